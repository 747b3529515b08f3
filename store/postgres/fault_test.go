package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"studio/store"
	"studio/store/postgres/pgtest"
)

// The classifier is tested over errors pgx really returns: each case
// causes its fault against the test server (or a port nobody listens on)
// and reads the error with store.FaultOf, as the API and the workers do.

// urlWith answers the test server's URL with host and user replaced
// (empty: kept) and a connect timeout.
func urlWith(t *testing.T, host, user string) string {
	t.Helper()
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		u.Host = host
	}
	if user != "" {
		u.User = url.User(user)
	}
	q := u.Query()
	q.Set("connect_timeout", "10")
	u.RawQuery = q.Encode()
	return u.String()
}

// connect opens a connection to the test server, closed when the test ends.
func connect(t *testing.T) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// expectKind fails unless err is a fault of kind (kind "" means: not a
// fault), with MaybeCommitted as given.
func expectKind(t *testing.T, what string, err error, kind store.FaultKind, maybe bool) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	f := store.FaultOf(err)
	switch {
	case kind == "" && f != nil:
		t.Fatalf("%s: %v read as a %s fault, want no fault", what, err, f.Kind)
	case kind == "":
	case f == nil:
		t.Fatalf("%s: %v (%T) is not read as a fault, want %s", what, err, err, kind)
	case f.Kind != kind || f.MaybeCommitted != maybe:
		t.Fatalf("%s: %v read as %s (maybe committed %v), want %s (%v)", what, err, f.Kind, f.MaybeCommitted, kind, maybe)
	}
	t.Logf("%s: %v -> %q", what, err, kind)
}

func TestClassifyRefusedPort(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nobody listens there now: connections are refused
	_, err = pgx.Connect(context.Background(), urlWith(t, addr, ""))
	expectKind(t, "connect to a refused port", err, store.FaultUnreachable, false)
}

func TestClassifyUnresolvableHost(t *testing.T) {
	t.Parallel()
	_, err := pgx.Connect(context.Background(), urlWith(t, "studio-test-no-such-host.invalid:5432", ""))
	expectKind(t, "connect to a name that does not resolve", err, store.FaultUnreachable, false)
}

// TestClassifyTooManyConnections: the server answers the connection with
// too_many_connections (a role allowed none): busy, not unreachable.
func TestClassifyTooManyConnections(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := connect(t)
	var b [4]byte
	rand.Read(b[:])
	role := "studio_test_nolimit_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, `CREATE ROLE `+pgx.Identifier{role}.Sanitize()+` LOGIN CONNECTION LIMIT 0`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(context.Background(), `DROP ROLE `+pgx.Identifier{role}.Sanitize()) })
	_, err := pgx.Connect(ctx, urlWith(t, "", role))
	expectKind(t, "connect as a role over its connection limit", err, store.FaultBusy, false)
}

// TestClassifyTerminatedBackend: pg_terminate_backend ends the session:
// the next statement, and the one after, are unreachable; a COMMIT cut off
// may have committed.
func TestClassifyTerminatedBackend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := connect(t)
	kill := func(c *pgx.Conn) {
		t.Helper()
		var ok bool
		if err := admin.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, c.PgConn().PID()).Scan(&ok); err != nil || !ok {
			t.Fatalf("pg_terminate_backend: %v %v", ok, err)
		}
		// Until the backend is gone, the next statement might still run.
		for {
			var n int
			if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, c.PgConn().PID()).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	c := connect(t)
	kill(c)
	_, err := c.Exec(ctx, `SELECT 1`)
	if f := store.FaultOf(err); f == nil || f.Kind != store.FaultUnreachable {
		t.Fatalf("the statement after the backend was terminated: %v read as %+v", err, f)
	}
	t.Logf("the statement after pg_terminate_backend: %v", err)
	_, err = c.Exec(ctx, `SELECT 1`)
	expectKind(t, "a statement on the closed connection", err, store.FaultUnreachable, false)

	c2 := connect(t)
	tx, err := c2.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	kill(c2)
	err = tx.Commit(ctx)
	if f := store.FaultOf(err); f == nil || f.Kind != store.FaultUnreachable {
		t.Fatalf("COMMIT after the backend was terminated: %v read as %+v", err, f)
	}
	t.Logf("COMMIT after pg_terminate_backend: %v (maybe committed %v)", err, store.FaultOf(err).MaybeCommitted)
}

// TestClassifyTimeoutOnLiveConnection: a live connection whose server does
// not answer within a deadline set on the socket (the server busy, the
// link stalled) is busy, with the outcome unknown: not unreachable.
func TestClassifyTimeoutOnLiveConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := connect(t)
	if err := c.PgConn().Conn().SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Exec(ctx, `SELECT pg_sleep(1)`)
	expectKind(t, "a statement past the socket's deadline", err, store.FaultBusy, true)
}

// TestClassifyNotFaults: the caller's own deadline and a statement's
// error are not faults of the database.
func TestClassifyNotFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := connect(t)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := c.Exec(short, `SELECT pg_sleep(1)`)
	expectKind(t, "the caller's deadline", err, "", false)

	c2 := connect(t)
	_, err = c2.Exec(ctx, `SELECT 1/0`)
	expectKind(t, "division by zero", err, "", false)
	_, err = c2.Exec(ctx, `SELECT * FROM no_such_table_`+strconv.Itoa(int(time.Now().UnixNano()%1000)))
	expectKind(t, "a table that does not exist", err, "", false)
}
