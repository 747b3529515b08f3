package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"studio/store"
)

func TestLeaseOutageWindows(t *testing.T) {
	t.Parallel()
	var o store.LeaseOutage
	bg := context.Background()
	fault := &store.Fault{Kind: store.FaultUnreachable, Err: errors.New("refused")}
	dbNow := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	if ws := o.Windows(dbNow); len(ws) != 0 {
		t.Fatalf("windows before any call: %v", ws)
	}
	// Successes and errors that are not the database's open nothing.
	o.Note(bg, time.Now(), nil)
	o.Note(bg, time.Now(), errors.New("a bug"))
	canceled, cancel := context.WithCancel(bg)
	cancel()
	o.Note(canceled, time.Now(), context.Canceled)
	if ws := o.Windows(dbNow); len(ws) != 0 {
		t.Fatalf("windows after successes and non-faults: %v", ws)
	}

	start := time.Now().Add(-3 * time.Second) // the failing call began 3 s ago
	o.Note(bg, start, fault)
	o.Note(bg, time.Now(), fault) // still failing: the same window
	ws := o.Windows(dbNow)
	if len(ws) != 1 || ws[0].To.Before(dbNow.Add(-time.Second)) || ws[0].From.After(dbNow.Add(-3*time.Second)) {
		t.Fatalf("an open window: %v", ws)
	}
	if !store.InOutage(ws, dbNow.Add(-2*time.Second)) || store.InOutage(ws, dbNow.Add(-time.Minute)) {
		t.Fatalf("InOutage over %v", ws)
	}
	o.Note(bg, time.Now(), nil)                                         // a call that succeeded without writing (a claim that found nothing)
	if ws := o.Windows(dbNow); len(ws) != 1 || !ws[0].To.Equal(dbNow) { // open: it ends now
		t.Fatalf("a success without a write closed the window: %v", ws)
	}
	o.Wrote() // the first committed lease write closes it
	closed := o.Windows(dbNow.Add(time.Minute))[0]
	if store.InOutage([]store.Window{closed}, dbNow.Add(30*time.Second)) {
		t.Fatalf("a time after the success is in the closed window %v", closed)
	}

	// A renewal that ran out of its own time waiting opens one too.
	timedOut, cancel2 := context.WithTimeout(bg, time.Nanosecond)
	defer cancel2()
	<-timedOut.Done()
	o.Note(timedOut, time.Now(), context.DeadlineExceeded)
	if ws := o.Windows(dbNow); len(ws) != 2 {
		t.Fatalf("a call past its deadline opened no window: %v", ws)
	}
}
