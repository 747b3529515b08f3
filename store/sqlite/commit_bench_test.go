package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"studio/intent"
	"studio/store/sqlite"
	"studio/store/storetest"
)

// The commit benchmarks run CreateIntent of a 12-, 300- and 600-task tree
// beside its floor: one IMMEDIATE transaction inserting the same rows (a
// batch row and n task rows) with one prepared statement and nothing else.
// The ratio of the two is the cost of the binding check and the binding row.
//
//	go test -run '^$' -bench 'Commit|Replay' -benchtime 200x ./store/sqlite
func BenchmarkCommit(b *testing.B) {
	for _, sync := range []string{sqlite.SyncFull, sqlite.SyncNormal} {
		for _, n := range []int{12, 300, 600} {
			b.Run(fmt.Sprintf("sync=%s/tasks=%d/intent", sync, n), func(b *testing.B) {
				s := openBench(b, sync)
				ins := make([]intent.NewIntent, b.N)
				for i := range ins {
					ins[i] = storetest.Intent(b, "alice", fmt.Sprintf("req-%d", i), "fp", n)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, _, err := s.CreateIntent(context.Background(), ins[i]); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(fmt.Sprintf("sync=%s/tasks=%d/floor", sync, n), func(b *testing.B) {
				s := openBench(b, sync)
				ins := make([]intent.NewIntent, b.N)
				for i := range ins {
					ins[i] = storetest.Intent(b, "alice", fmt.Sprintf("req-%d", i), "fp", n)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := floorCommit(s, ins[i]); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// floorCommit inserts the batch and its tasks in one transaction with one
// prepared statement for the tasks: the least any commit of the tree does.
func floorCommit(s *sqlite.Store, in intent.NewIntent) error {
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	nb := in.Batch
	if _, err := tx.ExecContext(ctx, `INSERT INTO batches (id, actor, request_id, prompt, spec, task_count, queued, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, nb.ID, "alice", in.Binding.RequestID, nb.Prompt, nb.Spec, len(nb.Tasks), len(nb.Tasks), 1, 1); err != nil {
		return err
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO tasks (id, batch_id, actor, collection, frame, generator, candidate, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, t := range nb.Tasks {
		if _, err := stmt.ExecContext(ctx, t.ID, nb.ID, "alice", t.Collection, t.Frame, t.Generator, t.Candidate, 1, 1); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// BenchmarkReplay reads a binding and its batch the way the replay path
// does (LookupIntent, GetBatch) beside the floor of the same two
// primary-key reads as bare statements.
func BenchmarkReplay(b *testing.B) {
	s := openBench(b, sqlite.SyncFull)
	in := storetest.Intent(b, "alice", "req", "fp", 600)
	if _, _, err := s.CreateIntent(context.Background(), in); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("store", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			bd, err := s.LookupIntent(ctx, "alice", "req")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.GetBatch(ctx, "alice", bd.ResourceID); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			var fp, id string
			if err := s.ReadDB().QueryRowContext(ctx, `SELECT fingerprint, resource_id FROM intents WHERE actor = ? AND request_id = ?`,
				"alice", "req").Scan(&fp, &id); err != nil {
				b.Fatal(err)
			}
			var prompt string
			var count int
			if err := s.ReadDB().QueryRowContext(ctx, `SELECT prompt, task_count FROM batches WHERE id = ?`, id).Scan(&prompt, &count); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func openBench(b *testing.B, sync string) *sqlite.Store {
	b.Helper()
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(b.TempDir(), "bench.db"), Synchronous: sync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}
