package postgres_test

import (
	"context"
	"net"
	neturl "net/url"
	"sync"
	"testing"
	"time"

	"studio/store"
	"studio/store/postgres"
	"studio/store/postgres/pgtest"
	"studio/store/storetest"
)

// TestWaitForConnectionIsBounded: with store.WithWait on the context, a
// call that waits for a pooled connection ends at the bound: busy when
// every connection is in use, unreachable when the pool had room but the
// server did not open a new one (a server that accepts and never
// answers). Without the bound the call waits on.
func TestWaitForConnectionIsBounded(t *testing.T) {
	t.Parallel()
	url, _ := pgtest.Schema(t)
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	// A port that forwards to the server until stalled, then accepts
	// connections and never answers them.
	target := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	stalled := false
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, in)
			st := stalled
			mu.Unlock()
			if st {
				continue
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, out)
			mu.Unlock()
			go func() { buf := make([]byte, 32<<10); copyConn(out, in, buf) }()
			go func() { buf := make([]byte, 32<<10); copyConn(in, out, buf) }()
		}
	}()
	u.Host = ln.Addr().String()
	s, err := postgres.Open(context.Background(), postgres.Config{URL: u.String(), MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := store.WithWait(context.Background(), 200*time.Millisecond)

	// Every connection in use: busy.
	held, err := s.Pool().Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = s.GetBatch(ctx, "alice", "no-such-batch")
	if f := store.FaultOf(err); f == nil || f.Kind != store.FaultBusy {
		t.Fatalf("with the pool's one connection held: %v, read as %+v", err, f)
	}
	t.Logf("pool exhausted: %v after %v", err, time.Since(start).Round(time.Millisecond))
	held.Release()

	// Room in the pool, and a server that does not answer: unreachable.
	mu.Lock()
	stalled = true
	mu.Unlock()
	s.Pool().Reset() // no open connection left to reuse
	start = time.Now()
	_, err = s.GetBatch(ctx, "alice", "no-such-batch")
	if f := store.FaultOf(err); f == nil || f.Kind != store.FaultUnreachable {
		t.Fatalf("with a server that does not answer: %v, read as %+v", err, f)
	}
	t.Logf("server not answering: %v after %v", err, time.Since(start).Round(time.Millisecond))
}

// copyConn copies from src to dst until either ends, then closes both.
func copyConn(dst, src net.Conn, buf []byte) {
	defer dst.Close()
	defer src.Close()
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestLockWaitIsBounded: with store.WithWait on the context, a write that
// queues behind another transaction's table lock (an operator's LOCK
// TABLE) ends at the bound with a busy fault, and commits nothing; once
// the lock is gone the same write commits.
func TestLockWaitIsBounded(t *testing.T) {
	t.Parallel()
	url, _ := pgtest.Schema(t)
	s, err := postgres.Open(context.Background(), postgres.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	other, err := s.Pool().Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(context.Background(), `LOCK TABLE batches IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	in := storetest.Intent(t, "alice", "locked-out", "fp", 3)
	ctx := store.WithWait(context.Background(), 200*time.Millisecond)
	start := time.Now()
	_, _, err = s.CreateIntent(ctx, in)
	if f := store.FaultOf(err); f == nil || f.Kind != store.FaultBusy {
		t.Fatalf("create behind a table lock: %v, read as %+v", err, f)
	}
	t.Logf("behind LOCK TABLE: %v after %v", err, time.Since(start).Round(time.Millisecond))
	if err := other.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, created, err := s.CreateIntent(ctx, in)
	if err != nil || !created {
		t.Fatalf("create once the lock is gone: %+v created=%v: %v", b, created, err)
	}
}
