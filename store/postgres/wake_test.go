package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"studio/store/postgres/pgtest"
	"studio/store/storetest"
	"studio/wake"
)

func TestPayloadRoundTrip(t *testing.T) {
	s := &Store{schema: "my schema", wakes: &wakes{origin: "o1"}}
	p := s.payload([]wake.Event{{Kind: wake.Tasks, ID: "b1"}})
	origin, schema, evs, ok := decodePayload(p)
	if !ok || origin != "o1" || schema != "my schema" || len(evs) != 1 || evs[0].ID != "b1" || evs[0].Kind != wake.Tasks {
		t.Fatalf("decode(%q) = %q %q %v %v", p, origin, schema, evs, ok)
	}
	if s.payload(nil) != "" {
		t.Fatal("no events should make no payload")
	}
	for _, bad := range []string{"", "o1", "o1 q1 s"} {
		if _, _, _, ok := decodePayload(bad); ok {
			t.Fatalf("decodePayload(%q) accepted", bad)
		}
	}
}

// TestWakesAcrossProcesses: a store value (another process) hears through
// LISTEN/NOTIFY the new work, the changes and the cancels that another
// commits, with their ids, and not those of another schema; when its
// listening connection is killed (pg_terminate_backend), it listens again,
// wakes its subscribers once for what it may have missed, and hears the
// next commits.
func TestWakesAcrossProcesses(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	_, schema := pgtest.Schema(t)
	_, other := pgtest.Schema(t)
	a := openLockDB(t, url, schema)
	elsewhere := openLockDB(t, url, other)
	b := openLockDB(t, url, schema)
	listening := make(chan uint32, 8)
	b.wakes.onListen = func() { listening <- b.wakes.pid.Load() }
	sub := b.Wake().Subscribe(wake.All)
	defer sub.Close()
	pid := <-listening
	ctx := t.Context()
	next := func(what string) wake.Pending {
		t.Helper()
		select {
		case <-sub.C():
		case <-ctx.Done():
			t.Fatalf("%s: no wake-up", what)
		}
		return sub.Take(time.Now())
	}
	// Another schema's commit first: had it been passed on, it would be
	// taken with the next one.
	if _, _, err := elsewhere.CreateIntent(ctx, storetest.Intent(t, "alice", "x", "fp", 1)); err != nil {
		t.Fatal(err)
	}
	in := storetest.Intent(t, "alice", "r1", "fp", 2)
	if _, _, err := a.CreateIntent(ctx, in); err != nil {
		t.Fatal(err)
	}
	p := next("create")
	if ids, all := p.IDs(wake.Tasks); p.Due != wake.Tasks || all || !slices.Equal(ids, []string{in.Batch.ID}) {
		t.Fatalf("create: due %b, ids %v all %v; want tasks of %s only", p.Due, ids, all, in.Batch.ID)
	}
	if _, err := a.CancelBatch(ctx, "alice", in.Batch.ID); err != nil {
		t.Fatal(err)
	}
	p = next("cancel")
	if ids, _ := p.IDs(wake.Cancel); p.Due&wake.Cancel == 0 || !slices.Equal(ids, []string{in.Batch.ID}) {
		t.Fatalf("cancel: due %b, cancel ids %v", p.Due, ids)
	}

	if _, err := a.pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	if again := <-listening; again == pid {
		t.Fatalf("listening again on the killed backend %d", pid)
	}
	p = next("resync")
	if _, all := p.IDs(wake.Tasks); p.Due != wake.All || !all {
		t.Fatalf("after a new LISTEN: due %b (all ids %v), want every kind of any id", p.Due, all)
	}
	in2 := storetest.Intent(t, "alice", "r2", "fp", 1)
	if _, _, err := a.CreateIntent(ctx, in2); err != nil {
		t.Fatal(err)
	}
	p = next("create after the new LISTEN")
	if ids, _ := p.IDs(wake.Tasks); !slices.Equal(ids, []string{in2.Batch.ID}) {
		t.Fatalf("after the new LISTEN: tasks ids %v, want %s", ids, in2.Batch.ID)
	}
}

// TestOwnNotificationsSkipped: a store's listener passes on nothing of its
// own commits (they were published in the process already): the one
// signal after a commit carries that commit's wake-up, once.
func TestOwnNotificationsSkipped(t *testing.T) {
	t.Parallel()
	_, schema := pgtest.Schema(t)
	a := openLockDB(t, pgtest.URL(t), schema)
	b := openLockDB(t, pgtest.URL(t), schema)
	listening := make(chan struct{}, 8)
	a.wakes.onListen = func() { listening <- struct{}{} }
	sub := a.Wake().Subscribe(wake.Tasks)
	defer sub.Close()
	<-listening
	ctx := context.Background()
	in := storetest.Intent(t, "alice", "mine", "fp", 1)
	if _, _, err := a.CreateIntent(ctx, in); err != nil {
		t.Fatal(err)
	}
	<-sub.C()
	sub.Take(time.Now())
	// b's commit comes after a's own notification on the channel: once a
	// hears b's, it has read (and skipped) its own.
	in2 := storetest.Intent(t, "alice", "theirs", "fp", 1)
	if _, _, err := b.CreateIntent(ctx, in2); err != nil {
		t.Fatal(err)
	}
	<-sub.C()
	if ids, _ := sub.Take(time.Now()).IDs(wake.Tasks); !slices.Equal(ids, []string{in2.Batch.ID}) {
		t.Fatalf("ids %v, want only the other store's %s", ids, in2.Batch.ID)
	}
}
