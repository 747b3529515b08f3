package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Event is one event of a batch's stream.
type Event struct {
	// Name is "batch" (the batch as it stands: first on connect, then
	// after task changes), "task" (a task changed) or "done" (the batch
	// ended; the stream ends after it).
	Name string
	// ID is the event's id: pass the last one seen to Events to resume.
	ID string
	// Batch is set for "batch" and "done", Task for "task".
	Batch *Batch
	Task  *Task
}

// EventStream reads one connection of GET /v1/batches/{id}/events.
type EventStream struct {
	resp   *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
	done   bool
}

// Events opens a batch's event stream, resuming after lastEventID when it
// is not empty. Opening retries as every call does; the stream itself is
// not reopened when it breaks (WaitBatch does that).
func (c *Client) Events(ctx context.Context, batchID, lastEventID string) (*EventStream, error) {
	h := http.Header{"Accept": {"text/event-stream"}}
	if lastEventID != "" {
		h.Set("Last-Event-ID", lastEventID)
	}
	a, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/batches/" + seg(batchID) + "/events", header: h, stream: true})
	if err != nil {
		return nil, fmt.Errorf("events of %s: %w", batchID, err)
	}
	if ct := a.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		a.resp.Body.Close()
		a.cancel()
		return nil, fmt.Errorf("events of %s: the answer is %q, not text/event-stream", batchID, ct)
	}
	return &EventStream{resp: a.resp, r: bufio.NewReader(a.resp.Body), cancel: a.cancel}, nil
}

// Next reads the next event. After "done" it answers io.EOF; a stream that
// ends before "done" answers io.ErrUnexpectedEOF (reconnect with the last
// event's id).
func (s *EventStream) Next() (Event, error) {
	if s.done {
		return Event{}, io.EOF
	}
	var ev Event
	var data strings.Builder
	started := false
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return Event{}, fmt.Errorf("read event: %w", err)
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if !started {
				continue
			}
			break
		}
		if strings.HasPrefix(line, ":") {
			continue // a comment: heartbeat
		}
		started = true
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			ev.Name = value
		case "id":
			ev.ID = value
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(value)
		}
	}
	switch ev.Name {
	case "batch", "done":
		ev.Batch = new(Batch)
		if err := json.Unmarshal([]byte(data.String()), ev.Batch); err != nil {
			return Event{}, fmt.Errorf("read %s event: %w", ev.Name, err)
		}
		if ev.Name == "done" {
			s.done = true
		}
	case "task":
		ev.Task = new(Task)
		if err := json.Unmarshal([]byte(data.String()), ev.Task); err != nil {
			return Event{}, fmt.Errorf("read task event: %w", err)
		}
	}
	return ev, nil
}

// Close ends the stream.
func (s *EventStream) Close() error {
	s.cancel()
	return s.resp.Body.Close()
}

// Progress is what WaitBatch reports on each change.
type Progress struct {
	// Batch is the batch as last seen.
	Batch Batch
	// Task is the task that changed, nil for an update of the batch only.
	Task *Task
	// Polling is set once WaitBatch follows the batch by polling, the
	// event stream not being available.
	Polling bool
}

// WaitOptions tune WaitBatch.
type WaitOptions struct {
	// OnProgress, when set, is called on every change (from WaitBatch's
	// goroutine, one call at a time).
	OnProgress func(Progress)
	// PollInterval is how often WaitBatch reads the batch when it polls;
	// 1s by default.
	PollInterval time.Duration
	// MaxStreamFailures is how many times in a row the stream may fail to
	// open or break without an event before WaitBatch polls instead; 5 by
	// default.
	MaxStreamFailures int
}

// WaitBatch follows a batch until it ends and answers it as it ended. It
// follows the event stream, reconnecting after a break with the last event
// id (no change lost, none repeated), and polls GET /v1/batches/{id}
// instead when the stream is not served (404 on the events route of a
// batch that exists, or repeated failures). Errors of the batch itself
// (404, 401) end it; so does ctx.
func (c *Client) WaitBatch(ctx context.Context, batchID string, o WaitOptions) (*Batch, error) {
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	if o.MaxStreamFailures <= 0 {
		o.MaxStreamFailures = 5
	}
	report := func(p Progress) {
		if o.OnProgress != nil {
			o.OnProgress(p)
		}
	}
	var last Batch
	lastID := ""
	failures := 0
	for failures < o.MaxStreamFailures {
		st, err := c.Events(ctx, batchID, lastID)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			if s := StatusOf(err); s == http.StatusNotFound {
				// The batch, or the route? GET the batch: its 404 ends
				// the wait, otherwise this server has no event streams.
				if _, gerr := c.GetBatch(ctx, batchID); gerr != nil {
					return nil, gerr
				}
				break
			} else if s != 0 && !retryable(s) {
				return nil, err
			}
			failures++
			continue
		}
		for {
			ev, err := st.Next()
			if err != nil {
				st.Close()
				if ctx.Err() != nil {
					return nil, fmt.Errorf("wait for %s: %w", batchID, ctx.Err())
				}
				failures++
				if err := sleepCtx(ctx, c.backoff(failures)); err != nil {
					return nil, fmt.Errorf("wait for %s: %w", batchID, err)
				}
				break
			}
			failures = 0
			if ev.ID != "" {
				lastID = ev.ID
			}
			switch ev.Name {
			case "batch":
				last = *ev.Batch
				report(Progress{Batch: last})
			case "task":
				report(Progress{Batch: last, Task: ev.Task})
			case "done":
				st.Close()
				last = *ev.Batch
				report(Progress{Batch: last})
				return &last, nil
			}
		}
	}
	return c.pollBatch(ctx, batchID, o, report)
}

// pollBatch follows a batch by reading it every o.PollInterval.
func (c *Client) pollBatch(ctx context.Context, batchID string, o WaitOptions, report func(Progress)) (*Batch, error) {
	var prev *Batch
	for {
		b, err := c.GetBatch(ctx, batchID)
		if err != nil {
			return nil, err
		}
		if prev == nil || b.Counts != prev.Counts || b.State != prev.State {
			report(Progress{Batch: *b, Polling: true})
		}
		if Ended(b.State) {
			return b, nil
		}
		prev = b
		if err := sleepCtx(ctx, o.PollInterval); err != nil {
			return nil, fmt.Errorf("wait for %s: %w", batchID, err)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
