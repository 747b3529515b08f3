package sqlite

import (
	"context"
	"time"

	"studio/wake"
)

// DefaultWatchInterval is how often a store looks for commits of other
// processes on its file (Config.WatchInterval).
const DefaultWatchInterval = 50 * time.Millisecond

// Wake returns the store's hub: every commit through this store publishes
// its wake-ups there (store.TaskWakes and the others) once it is done,
// and commits of other processes on the same file are heard within the
// watch interval (see watchOthers).
func (s *Store) Wake() *wake.Hub { return s.wake }

// othersEvent is what a commit of another process wakes: SQLite says that
// the file changed, not what changed, so every worker, publisher and
// events stream looks once. Not Cancel: a cancel made by another process
// reaches a running task at its next renewal or step (a renewal is a
// write; a drain in another process changes the file all the time).
var othersEvent = wake.Event{Kind: wake.Tasks | wake.Items | wake.Changed}

// watchOthers feeds the hub with the commits of other processes. SQLite
// has no notification between processes; instead, while anyone in this
// process listens, the store asks PRAGMA data_version every interval on
// its write connection: a value that moved means another connection
// committed, and since every write of this process goes through that one
// connection, another process. The pragma reads the WAL index in shared
// memory, no table: an idle process spends almost nothing on it.
func (s *Store) watchOthers(interval time.Duration) {
	if interval < 0 {
		return
	}
	if interval == 0 {
		interval = DefaultWatchInterval
	}
	s.wake.Feed(func(ctx context.Context) {
		t := time.NewTicker(interval)
		defer t.Stop()
		var last int64
		known := false
		for {
			var v int64
			if err := s.writeDB.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&v); err == nil {
				if known && v != last {
					s.wake.Publish(othersEvent)
				}
				last, known = v, true
			}
			if s.onWatch != nil {
				s.onWatch()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}
