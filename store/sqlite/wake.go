package sqlite

import (
	"context"
	"os"
	"time"

	"studio/wake"
)

// DefaultWatchInterval is how often a store looks for commits of other
// processes on its file (Config.WatchInterval).
const DefaultWatchInterval = 100 * time.Millisecond

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
// process listens, the store looks every interval whether the file
// changed, in two steps. First it reads the header of the WAL index (the
// -shm file, which every connection on the file shares): one pread, which
// changes with every commit of any connection. Only when it changed does
// it ask PRAGMA data_version on its write connection: a value that moved
// means another connection committed, and since every write of this
// process goes through that one connection, another process. An idle
// process spends a pread per interval.
func (s *Store) watchOthers(interval time.Duration) {
	if interval < 0 {
		return
	}
	if interval == 0 {
		interval = DefaultWatchInterval
	}
	s.wake.Feed(func(ctx context.Context) {
		// Without its cancel: database/sql would watch a cancelable
		// context with a goroutine of its own at every look. Close waits
		// for a look in progress, a moment.
		qctx := context.WithoutCancel(ctx)
		st, err := s.writeDB.PrepareContext(qctx, `PRAGMA data_version`)
		if err != nil {
			return // each listener's poll covers what this misses
		}
		defer st.Close()
		shm, _ := os.Open(s.path + "-shm") // nil: every look asks the pragma
		if shm != nil {
			defer shm.Close()
		}
		var head, last [walIndexHeader]byte
		t := time.NewTicker(interval)
		defer t.Stop()
		var version int64
		known := false
		for {
			changed := true
			if shm != nil {
				if n, err := shm.ReadAt(head[:], 0); n == len(head) || err == nil {
					changed = head != last
					last = head
				}
			}
			if changed || !known {
				var v int64
				if err := st.QueryRowContext(qctx).Scan(&v); err == nil {
					if known && v != version {
						s.wake.Publish(othersEvent)
					}
					version, known = v, true
				}
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

// walIndexHeader is the size of the WAL index header that watchOthers
// compares: its change counter and last frame move with every commit.
const walIndexHeader = 48
