// Package s3rvertest runs s3rver (the npm package, an S3-compatible server
// on the local disk) for tests, on a free port, with a bucket made at
// start.
//
// s3rver is installed once with npm into a cache directory
// (STUDIO_TEST_S3RVER_DIR, or studio-s3rver in the user's cache
// directory) when it is not there yet. Without node and npm the tests that
// need it are skipped with a message that says so, unless
// STUDIO_TEST_S3=1 (CI sets it), which fails them instead.
package s3rvertest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"studio/internal/testskip"
)

// Environment variables.
const (
	// EnvRequire set to 1 makes a missing node, npm or s3rver fail the
	// test instead of skipping it.
	EnvRequire = "STUDIO_TEST_S3"
	// EnvDir is where s3rver is installed (node_modules/s3rver).
	EnvDir = "STUDIO_TEST_S3RVER_DIR"
)

// The credentials s3rver accepts by default.
const (
	AccessKey = "S3RVER"
	SecretKey = "S3RVER"
)

// Bucket is the bucket every server starts with.
const Bucket = "studio"

// Server is one running s3rver.
type Server struct {
	t    testing.TB
	dir  string
	port int
	// Addr is HOST:PORT.
	Addr string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Endpoint is the server's base URL.
func (s *Server) Endpoint() string { return "http://" + s.Addr }

// URL is the s3:// URL of prefix in the bucket, on this server.
func (s *Server) URL(prefix string) string {
	return fmt.Sprintf("s3://%s/%s?endpoint=%s&region=us-east-1", Bucket, prefix, s.Endpoint())
}

// Env is the environment a studio process needs to reach the server.
func (s *Server) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + AccessKey, "AWS_SECRET_ACCESS_KEY=" + SecretKey}
}

var (
	installOnce sync.Once
	installPath string
	installErr  error
)

// script finds or installs s3rver and answers the path of its command.
func script(t testing.TB) string {
	t.Helper()
	installOnce.Do(func() { installPath, installErr = install() })
	if installErr != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s=1 but s3rver cannot run: %v", EnvRequire, installErr)
		}
		testskip.S3.Announce()
		t.Skipf("object store tests need s3rver (node and npm; set %s=1 to fail instead): %v", EnvRequire, installErr)
	}
	return installPath
}

func install() (string, error) {
	dir := os.Getenv(EnvDir)
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(cache, "studio-s3rver")
	}
	bin := filepath.Join(dir, "node_modules", "s3rver", "bin", "s3rver.js")
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("node: %w", err)
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return "", fmt.Errorf("npm: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Test binaries of one run install at once: one does, under a lock.
	lock, err := os.OpenFile(filepath.Join(dir, ".install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	out, err := exec.Command("npm", "install", "--no-audit", "--no-fund", "--prefix", dir, "s3rver@3").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("npm install s3rver@3: %v\n%s", err, out)
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("npm install s3rver@3 left no %s", bin)
	}
	return bin, nil
}

// Start runs a new s3rver on a free port with an empty bucket; it stops
// at the end of the test.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := script(t)
	s := &Server{t: t, dir: t.TempDir()}
	// A free port, found by listening and closing: another process may
	// take it in between, so a start that fails tries another.
	var err error
	for range 3 {
		ln, lerr := net.Listen("tcp", "127.0.0.1:0")
		if lerr != nil {
			t.Fatal(lerr)
		}
		s.port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		s.Addr = "127.0.0.1:" + strconv.Itoa(s.port)
		if err = s.start(bin); err == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatal(err)
	return nil
}

// start runs s3rver on s.port and waits for the line that says it
// listens.
func (s *Server) start(bin string) error {
	cmd := exec.Command("node", bin, "-d", s.dir, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port),
		"--configure-bucket", Bucket)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start s3rver: %w", err)
	}
	ready := make(chan struct{})
	var logs strings.Builder
	var logMu sync.Mutex
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			logMu.Lock()
			if logs.Len() < 1<<16 {
				logs.WriteString(line + "\n")
			}
			logMu.Unlock()
			if strings.Contains(line, "listening on") {
				once.Do(func() { close(ready) })
			}
		}
		cmd.Wait()
		close(done)
	}()
	select {
	case <-ready:
	case <-done:
		logMu.Lock()
		defer logMu.Unlock()
		return fmt.Errorf("s3rver exited before listening:\n%s", logs.String())
	case <-time.After(60 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return fmt.Errorf("s3rver did not listen within a minute")
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

// Stop kills the server (the object store goes down); Restart brings it
// back on the same port with the same buckets.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Restart starts a stopped server again on its port and directory.
func (s *Server) Restart(ctx context.Context) {
	s.t.Helper()
	for {
		err := s.start(script(s.t))
		if err == nil {
			return
		}
		// The port may linger a moment after the kill.
		if ctx.Err() != nil {
			s.t.Fatalf("restart s3rver: %v", err)
		}
	}
}
