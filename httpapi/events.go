package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-json-experiment/json"

	"studio/intent"
	"studio/store"
)

// Events tunes GET /v1/batches/{id}/events.
type Events struct {
	// Poll is how often a stream reads its batch's changes from the
	// database even when nothing woke it (the safety net: the store's hub
	// wakes it for changes of this process, and of others as far as the
	// engine carries them); 250ms by default.
	Poll time.Duration
	// Heartbeat is how long a stream may stay silent before it sends a
	// comment line to keep proxies from closing it; 15s by default.
	Heartbeat time.Duration
	// Gap is the least time between two reads of a stream woken by
	// changes (which wake it at once, without waiting for the poll): a
	// batch whose tasks change many times a second is read at most once
	// per Gap. 5ms by default: a change right after another shows within
	// it.
	Gap time.Duration
}

// Default event timings.
const (
	DefaultEventPoll      = 250 * time.Millisecond
	DefaultEventHeartbeat = 15 * time.Second
	DefaultEventGap       = 5 * time.Millisecond
)

// eventCursor is where a stream stands, and what its event ids encode:
// every change up to pos was sent ("pos"), or, within the range
// (since, until] of one read, the tasks up to task in id order were sent
// ("since.until.task").
type eventCursor struct {
	pos          int64
	since, until int64
	task         string
}

func (c eventCursor) String() string {
	if c.task == "" {
		return strconv.FormatInt(c.pos, 10)
	}
	return strconv.FormatInt(c.since, 10) + "." + strconv.FormatInt(c.until, 10) + "." + c.task
}

// parseEventCursor reads a Last-Event-ID this server wrote.
func parseEventCursor(s string) (eventCursor, bool) {
	parts := strings.SplitN(s, ".", 3)
	num := func(v string) (int64, bool) {
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil && n >= 0
	}
	switch len(parts) {
	case 1:
		p, ok := num(parts[0])
		return eventCursor{pos: p}, ok
	case 3:
		a, ok1 := num(parts[0])
		b, ok2 := num(parts[1])
		if !ok1 || !ok2 || a >= b || parts[2] == "" || len(parts[2]) > 100 {
			return eventCursor{}, false
		}
		return eventCursor{since: a, until: b, task: parts[2]}, true
	}
	return eventCursor{}, false
}

// batchEvents is GET /v1/batches/{id}/events: Server-Sent Events of one
// batch. First a "batch" event (the batch as GET /v1/batches/{id} shows
// it), then, as the database shows changes, a "task" event per changed task
// (as one item of the tasks list) followed by a "batch" event with the new
// counts, and a final "done" event with the ended batch, after which the
// stream ends. Event ids are positions in the store's commit order:
// reconnecting with Last-Event-ID sends every change after it, once; a task
// that changed several times meanwhile is sent once, as it stands.
func (s *Server) batchEvents(w http.ResponseWriter, r *http.Request) {
	actor, _ := ActorFrom(r.Context())
	batchID := chi.URLParam(r, "id")
	var cur eventCursor
	resumed := false
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		c, ok := parseEventCursor(last)
		if !ok {
			s.Error(w, r, &intent.Error{Code: intent.EInvalid, Message: "The Last-Event-ID header is not valid.",
				Fields: []intent.FieldError{{Field: "Last-Event-ID", Message: "is not an event id of this stream"}}})
			return
		}
		cur, resumed = c, true
	}
	since := int64(-1)
	if resumed {
		since = cur.pos
	}
	// changed closes when this process changes one of the batch's tasks;
	// it is taken before each read, so a change during the read wakes the
	// next one. After a read woken so, the stream waits out the gap
	// (gapOver) before it listens again.
	changed, release := s.store.WatchBatch(batchID)
	defer func() { release() }()
	first, err := s.readChanges(r.Context(), actor, batchID, cur, since)
	if err != nil {
		s.Error(w, r, notFoundAs(err, "batch"))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	st := &eventStream{w: w, rc: http.NewResponseController(w)}
	if !resumed {
		cur = eventCursor{pos: first.pos}
	}
	// The first event: the batch as it stands. Its id is where the stream
	// stands, which a resumed stream has not moved yet.
	if err := st.send("batch", cur.String(), first.batch); err != nil {
		return
	}
	last := first.batch
	rd := &first
	poll := time.NewTicker(s.events.Poll)
	defer poll.Stop()
	heartbeat := time.NewTimer(s.events.Heartbeat)
	defer heartbeat.Stop()
	var gapOver <-chan time.Time
	// again fires after a read that found changes committed but not yet
	// readable (store.Changes.Pending): they come in a moment, and the
	// stream reads again then rather than at its next poll; a Gap first,
	// doubling while they stay pending (a long transaction elsewhere).
	var again <-chan time.Time
	pendingWait := s.events.Gap
	for {
		if rd != nil {
			st.wrote = false
			next, over, err := st.deliver(*rd, last)
			if over || err != nil {
				return
			}
			cur, last = next, rd.batch
			if st.wrote {
				heartbeat.Reset(s.events.Heartbeat)
			}
			rd = nil
		}
		wake := changed
		if gapOver != nil {
			wake = nil
		}
		read := false
		select {
		case <-r.Context().Done():
			return
		case <-s.streamsDone:
			return
		case <-heartbeat.C:
			if err := st.comment("ping"); err != nil {
				return
			}
			heartbeat.Reset(s.events.Heartbeat)
		case <-gapOver:
			gapOver = nil
		case <-again:
			again = nil
			read = true
		case <-wake:
			read = true
			gapOver = time.After(s.events.Gap)
		case <-poll.C:
			read = true
		}
		if read {
			release()
			changed, release = s.store.WatchBatch(batchID)
			next, err := s.readChanges(r.Context(), actor, batchID, cur, cur.pos)
			if err != nil {
				if r.Context().Err() == nil {
					s.log.LogAttrs(r.Context(), slog.LevelError, "batch events: read changes",
						slog.String("batch", batchID), slog.String("error", err.Error()))
				}
				return
			}
			rd = &next
			switch {
			case !next.pending:
				pendingWait = s.events.Gap
			case again == nil && pendingWait < s.events.Poll:
				again = time.After(pendingWait)
				pendingWait *= 2
			}
		}
	}
}

// changeRead is what one poll of a stream found.
type changeRead struct {
	batch intent.Batch
	// tasks are the changed tasks, each with the id of its event.
	tasks []taskEvent
	// pos is where the stream stands once they are sent.
	pos     int64
	pending bool
}

type taskEvent struct {
	task intent.Task
	id   eventCursor
}

// readChanges reads the changes after cur (the rest of a range first,
// when cur stands inside one); since < 0 reads only the batch and the
// current position.
func (s *Server) readChanges(ctx context.Context, actor, batchID string, cur eventCursor, since int64) (changeRead, error) {
	var out changeRead
	if cur.task != "" {
		// The tasks of the range up to cur.task were sent: the rest of
		// the range, then what came after it.
		ch, err := s.store.BatchChanges(ctx, store.ChangesParams{Actor: actor, BatchID: batchID, Since: cur.since, Until: cur.until})
		if err != nil {
			return changeRead{}, err
		}
		for _, t := range ch.Tasks {
			if t.ID > cur.task {
				out.tasks = append(out.tasks, taskEvent{t, eventCursor{since: cur.since, until: cur.until, task: t.ID}})
			}
		}
		since = cur.until
	}
	ch, err := s.store.BatchChanges(ctx, store.ChangesParams{Actor: actor, BatchID: batchID, Since: since})
	if err != nil {
		return changeRead{}, err
	}
	out.batch, out.pos, out.pending = ch.Batch, ch.Position, ch.Pending
	if since >= 0 && ch.Position < since {
		// A position from another database, or a bogus one: never move
		// back, so nothing is sent twice.
		out.pos = since
	}
	for _, t := range ch.Tasks {
		out.tasks = append(out.tasks, taskEvent{t, eventCursor{since: since, until: out.pos, task: t.ID}})
	}
	return out, nil
}

// eventStream writes events to one client.
type eventStream struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	// wrote is set by every write; the heartbeat timer restarts then.
	wrote bool
}

// deliver sends the task events of one read, then the batch (or, once the
// batch has ended and every change of it was sent, the "done" event). It
// answers the stream's new cursor and whether the stream is over.
func (st *eventStream) deliver(rd changeRead, last intent.Batch) (eventCursor, bool, error) {
	next := eventCursor{pos: rd.pos}
	for _, t := range rd.tasks {
		if err := st.send("task", t.id.String(), t.task); err != nil {
			return next, true, err
		}
	}
	if terminal(rd.batch.State) && !rd.pending {
		return next, true, st.send("done", next.String(), rd.batch)
	}
	if len(rd.tasks) > 0 || rd.batch.Counts != last.Counts || rd.batch.State != last.State {
		return next, false, st.send("batch", next.String(), rd.batch)
	}
	return next, false, nil
}

// send writes one event and flushes it.
func (st *eventStream) send(event, id string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", event, err)
	}
	// JSON has no raw newlines, so the data is one line.
	return st.write("event: " + event + "\nid: " + id + "\ndata: " + string(data) + "\n\n")
}

// comment writes a comment line (a heartbeat).
func (st *eventStream) comment(text string) error { return st.write(": " + text + "\n\n") }

func (st *eventStream) write(s string) error {
	// Each write renews the connection's write deadline (the server's
	// write-stall limit, statusWriter.Write): a client that stops reading
	// does not hold the stream.
	st.wrote = true
	if _, err := st.w.Write([]byte(s)); err != nil {
		return err
	}
	return st.rc.Flush()
}

// EndStreams ends every open event stream, and any opened after: call it
// when the server shuts down (http.Server.RegisterOnShutdown), since
// Shutdown waits for handlers and a stream would otherwise run until its
// batch ends. A client sees the stream end and reconnects elsewhere.
func (s *Server) EndStreams() { s.endStreams.Do(func() { close(s.streamsDone) }) }

// terminal says whether a batch in this state has ended.
func terminal(state intent.State) bool {
	return state == intent.StateSucceeded || state == intent.StateFailed || state == intent.StateCanceled
}
