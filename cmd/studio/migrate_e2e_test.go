package main

import (
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMigrateWaitsForAnotherWriter: `studio migrate` started while another
// process holds SQLite's write lock waits for it (busy_timeout, IMMEDIATE
// transactions) and succeeds once the lock is free, rather than failing
// at once with SQLITE_BUSY. Every studio process runs these migrations
// when it opens the database, so this is also how a worker starts beside
// a busy one.
func TestMigrateWaitsForAnotherWriter(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("needs /proc to see when the migrate process has the database open")
	}
	bin := studioBinary(t)
	data := t.TempDir()
	if out, err := exec.Command(bin, "migrate", "--data", data).CombinedOutput(); err != nil {
		t.Fatalf("first migrate: %v\n%s", err, out)
	}
	path := filepath.Join(data, "studio.db")
	shm, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	shm += "-shm" // as /proc names it
	// The other process: this one, in an IMMEDIATE transaction.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()

	p := startProcess(t, nil, "migrate", "--data", data)
	exited := func() bool {
		select {
		case <-p.done:
			return true
		default:
			return false
		}
	}
	// Once it has the WAL index open, its next step is the first
	// migration's IMMEDIATE transaction, which needs the lock held here.
	pollFor(t, time.Minute, "migrate to open the database", func() bool {
		return exited() || hasOpen(t, p.cmd.Process.Pid, shm)
	})
	// Hold the lock a while longer (well within the 10s busy_timeout):
	// a migrate that does not wait for it ends in the meantime.
	time.Sleep(time.Second)
	if exited() {
		t.Fatalf("migrate ended while another process held the write lock: %v\n%s", p.err, p.logs.String())
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(time.Minute); code != 0 || !strings.Contains(p.stdout.String(), "the database is up to date") {
		t.Fatalf("migrate after the lock was freed: exit %d, stdout %q\n%s", code, p.stdout.String(), p.logs.String())
	}
}

// hasOpen reports whether process pid has the file at path open.
func hasOpen(t *testing.T, pid int, path string) bool {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false // gone, or not started yet
	}
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && target == path {
			return true
		}
	}
	return false
}
