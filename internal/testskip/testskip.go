// Package testskip makes a group of tests that were skipped for want of a
// service (PostgreSQL, Redis, an object store, a browser) say so in the
// output of a plain `go test ./...`, one line per group, with how to run
// them.
//
// `go test ./...` shows nothing of a passing package's output but its ok
// line, and a skipped test passes: its t.Skip message shows only with -v.
// So Announce writes its line to the stderr of the go command that runs
// the test binary (its parent, found through /proc: Linux only; elsewhere
// the skip messages show with -v as before). Test binaries of one `go
// test` run share the go command's work directory, which holds the
// binaries and is removed when the run ends: a marker file per group
// there makes each line print once for the whole run, not once per
// package or per test.
package testskip

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

var (
	mu   sync.Mutex
	said = map[string]bool{}
)

// Group is a group of tests that need one service, and how to run them.
type Group struct {
	Name, How string
}

// The groups of studio's tests that skip without a service. CI (.ci/run)
// provides every one of them and makes a missing one fail instead.
var (
	PostgreSQL = Group{"PostgreSQL", "set STUDIO_TEST_POSTGRES_URL='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' to run them"}
	Redis      = Group{"Redis", "run a Redis at 127.0.0.1:6379 (or set STUDIO_TEST_REDIS_URL) and put redis-server on PATH to run them"}
	S3         = Group{"Object store (s3rver)", "put node and npm on PATH (s3rver installs into STUDIO_TEST_S3RVER_DIR, see .ci/run) to run them"}
	Chromium   = Group{"Browser (Chromium)", "put chromium on PATH or set STUDIO_TEST_CHROMIUM=/path/to/chromium to run them"}
)

// Announce says, once per `go test` run, that the tests of g were skipped
// and how to run them:
//
//	studio: PostgreSQL tests skipped: set STUDIO_TEST_POSTGRES_URL=... to run them
//
// Call it where such a test skips, just before t.Skip.
func (g Group) Announce() { Announce(g.Name, g.How) }

// Announce says, once per `go test` run, that the tests of group were
// skipped and how to run them (Group.Announce).
func Announce(group, how string) {
	mu.Lock()
	defer mu.Unlock()
	if said[group] {
		return
	}
	said[group] = true
	line := Line(group, how)
	out, byGo := goCommandStderr()
	if !byGo {
		// Not run by the go command (a test binary run by hand): its own
		// stderr is shown.
		fmt.Fprintln(os.Stderr, line)
		return
	}
	if out == nil {
		return
	}
	defer out.Close()
	marker := filepath.Join(filepath.Dir(filepath.Dir(os.Args[0])), "studio-skipped-"+slug(group))
	f, err := os.OpenFile(marker, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return // another package of this run said it, or no place to mark it
	}
	_ = f.Close()
	fmt.Fprintln(out, line)
}

// Line is the line Announce prints.
func Line(group, how string) string {
	return fmt.Sprintf("studio: %s tests skipped: %s", group, how)
}

// goCommandStderr opens the stderr of the parent process when the parent is
// the go command and its stderr is a terminal or a pipe. A regular file is
// refused: the go command writes it at its own offset and would write over
// the line.
func goCommandStderr() (*os.File, bool) {
	ppid := os.Getppid()
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ppid))
	if err != nil || strings.TrimSpace(string(comm)) != "go" {
		return nil, false
	}
	out, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/2", ppid), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, false
	}
	if fi, err := out.Stat(); err != nil || fi.Mode().IsRegular() {
		out.Close()
		// The go command shows this binary's output on failure and with
		// -v; the skip messages say the rest.
		return nil, true
	}
	return out, true
}

// slug is group as a file name.
func slug(group string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, group)
}
