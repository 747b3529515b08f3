package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"studio/intent"
	"studio/internal/testsignal"
	"studio/leasequeue"
	"studio/worker"
)

// lockedBuffer is a bytes.Buffer safe for a logger and a test at once.
// Each write notifies written.
type lockedBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written testsignal.Changes
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.written.Notify()
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
	logs.written.Until(t, "\"batch finished\" for "+done.ID, func() bool {
		return len(finished(logs.String(), done.ID)) > 0
	})
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
