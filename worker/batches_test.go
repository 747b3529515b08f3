package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"studio/intent"
	"studio/leasequeue"
	"studio/worker"
)

// lockedBuffer is a bytes.Buffer safe for a logger and a test at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// finished answers the "batch finished" log records of a batch.
func finished(logs, batchID string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(logs, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "batch finished" && rec["batch"] == batchID {
			out = append(out, rec)
		}
	}
	return out
}

// TestFinishedBatchIsLogged: a pool that reads batches logs each batch it
// worked on once, when its last task has ended, with the counts; a batch
// still running is not logged.
func TestFinishedBatchIsLogged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var logs lockedBuffer
	done := e.batch(spec{frames: 3, params: `{"height":16,"width":16}`})
	slow := e.batch(spec{frames: 1, prompt: "slow", params: `{"delay_ms":60000,"height":16,"width":16}`})
	p := e.pool(worker.Config{Options: leasequeue.Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))}, Batches: e.st})
	e.waitBatch("alice", done.ID, ended)
	deadline := time.Now().Add(30 * time.Second)
	for len(finished(logs.String(), done.ID)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no \"batch finished\" for %s in:\n%s", done.ID, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs := finished(logs.String(), done.ID)
	if len(recs) != 1 {
		t.Fatalf("%d \"batch finished\" records for one batch: %v", len(recs), recs)
	}
	r := recs[0]
	if r["state"] != string(intent.StateSucceeded) || r["tasks"] != 3.0 || r["succeeded"] != 3.0 || r["actor"] != "alice" {
		t.Fatalf("record %v", r)
	}
	if n := len(finished(logs.String(), slow.ID)); n != 0 {
		t.Fatalf("the batch still running was logged as finished %d times", n)
	}
}
