package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The process tests run the real binary, built once per test run from this
// package, as separate OS processes.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// studioBinary builds cmd/studio once and returns the path of the binary.
func studioBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("process tests build and run the binary; skipped with -short")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "studio-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "studio")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// proc is one running studio process.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	Addr   string // the HTTP address, once serving (serve only)
	stdout *syncBuffer
	logs   *syncBuffer
	done   chan struct{}
	err    error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startProcess runs `studio args...` with env added to the environment and
// waits until it logs "serving" (serve) or "workers started" (worker)
// when wait is set. The process is killed at the end of the test if still
// running, and its logs are printed when the test failed.
func startProcess(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(studioBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = append(cmd.Env, "STUDIO_LOG_LEVEL=debug")
	p := &proc{t: t, cmd: cmd, stdout: &syncBuffer{}, logs: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout = p.stdout
	// Not StderrPipe: Wait closes that pipe as soon as the process exits,
	// losing the last lines not yet read. Wait copies into this one to the
	// end.
	stderr, stderrW := io.Pipe()
	cmd.Stderr = stderrW
	scanned := make(chan struct{})
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		defer func() {
			io.Copy(io.Discard, stderr) // a line too long for the scanner
			close(scanned)
		}()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.logs.Write([]byte(line + "\n"))
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "serving" && rec.Addr != "" {
				select {
				case addr <- rec.Addr:
				default:
				}
			}
		}
	}()
	go func() {
		p.err = cmd.Wait()
		stderrW.Close()
		<-scanned
		close(p.done)
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("logs of studio %s:\n%s", strings.Join(args, " "), p.logs.String())
		}
	})
	if len(args) > 0 && args[0] == "serve" {
		select {
		case p.Addr = <-addr:
		case <-p.done:
			t.Fatalf("studio %v exited before serving: %v\n%s", args, p.err, p.logs.String())
		case <-time.After(60 * time.Second):
			t.Fatalf("studio %v did not start serving\n%s", args, p.logs.String())
		}
	}
	return p
}

// signal sends sig to the process.
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
}

// waitStopped waits until the process is stopped (after SIGSTOP): every
// one of its threads, as /proc lists them, or the process as ps(1) shows
// it where there is no /proc. Until then a thread may still be finishing a
// system call, such as taking a lock.
func (p *proc) waitStopped(d time.Duration) {
	p.t.Helper()
	pid := p.cmd.Process.Pid
	deadline := time.Now().Add(d)
	for {
		stopped, err := processStopped(pid)
		if err != nil {
			p.t.Fatalf("process %d: %v", pid, err)
		}
		if stopped {
			return
		}
		select {
		case <-p.done:
			p.t.Fatalf("process %d exited instead of stopping: %v\n%s", pid, p.err, p.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("process %d did not stop within %v", pid, d)
		}
		time.Sleep(time.Millisecond)
	}
}

// processStopped reports whether every thread of process pid is in the
// stopped state.
func processStopped(pid int) (bool, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat("/proc/self"); err == nil {
			return false, errors.New("gone from /proc")
		}
		out, err := exec.Command("ps", "-o", "stat=", "-p", strconv.Itoa(pid)).Output()
		if err != nil {
			return false, fmt.Errorf("ps: %w", err)
		}
		return strings.HasPrefix(strings.TrimSpace(string(out)), "T"), nil
	}
	if err != nil {
		return false, err
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // a thread that just ended
		}
		if err != nil {
			return false, err
		}
		// "tid (comm) state ...": comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false, fmt.Errorf("unreadable %s/stat: %q", task.Name(), b)
		}
		if state := b[i+2]; state != 'T' && state != 't' {
			return false, nil
		}
	}
	return true, nil
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(d time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		p.t.Fatalf("process did not exit within %v\n%s", d, p.logs.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// client talks to a studio HTTP API with a token.
type client struct {
	t     *testing.T
	base  string
	token string
	http  *http.Client
}

func newClient(t *testing.T, addr, token string) *client {
	return &client{t: t, base: "http://" + addr, token: token, http: &http.Client{Timeout: 60 * time.Second}}
}

// do sends a request with a JSON body (nil for none) and decodes a JSON
// answer into out when out is not nil. It returns the response (body read).
func (c *client) do(ctx context.Context, method, path string, body any, out any, header ...string) (*http.Response, error) {
	if body == nil {
		return c.send(ctx, method, path, nil, out, header...)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	return c.send(ctx, method, path, bytes.NewReader(b), out, append([]string{"Content-Type", "application/json"}, header...)...)
}

// send sends a request with the token and the header pairs (name, value)
// and decodes a JSON answer into out when out is not nil and the answer
// has a body. It returns the response (body read).
func (c *client) send(ctx context.Context, method, path string, body io.Reader, out any, header ...string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp, err
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp, fmt.Errorf("decode %s %s answer %q: %w", method, path, data, err)
		}
	}
	return resp, nil
}

// readToken reads the first token from a data directory.
func readToken(t *testing.T, data string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, "token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
