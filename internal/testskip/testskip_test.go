package testskip

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestAnnounceOncePerRun runs `go test` on two packages
// whose tests each announce the same group twice, as a user would run it
// (no -v), and checks the go command's output has the line exactly once.
func TestAnnounceOncePerRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	if _, err := os.Stat("/proc/self/comm"); err != nil {
		t.Skip("Announce finds the go command through /proc")
	}
	// Two packages (testdata/a, testdata/b), two test binaries, as
	// `go test ./...` runs them.
	cmd := exec.Command(goBin, "test", "-count=1", "./testdata/a", "./testdata/b")
	out, err := cmd.CombinedOutput() // a pipe: Announce writes to it
	if err != nil {
		t.Fatalf("go test: %v\n%s", err, out)
	}
	for _, want := range []string{Line("Widget", "set WIDGET=1 to run them"), Line("Gadget", "install gadget to run them")} {
		if n := strings.Count(string(out), want); n != 1 {
			t.Errorf("%q appears %d times in:\n%s", want, n, out)
		}
	}
	if strings.Contains(string(out), "no widget") {
		t.Errorf("the skip messages show without -v:\n%s", out)
	}
}
