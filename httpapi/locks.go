package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-json-experiment/json"

	"studio/apperr"
	"studio/intent"
	"studio/lockservice"
)

// Locks holds engine locks for remote clients: lockservice.Service
// implements it.
type Locks interface {
	Acquire(ctx context.Context, actor, requestID string, r lockservice.Request) (lockservice.Lease, bool, error)
	Renew(ctx context.Context, actor, leaseID string) (lockservice.Lease, error)
	Release(ctx context.Context, actor, leaseID string) (lockservice.Lease, error)
	Inspect(ctx context.Context, actor, name, key string, limit int) (lockservice.Info, error)
}

// lockBodyLimit bounds the body of a lock call: a key of 300 characters
// escaped as \uXXXX pairs fits many times over.
const lockBodyLimit = 16 << 10

// acquireBody is the body of POST /v1/locks/acquire.
type acquireBody struct {
	RequestID *string `json:"request_id"`
	Name      *string `json:"name"`
	Key       *string `json:"key"`
	TTLMs     *int64  `json:"ttl_ms"`
	WaitMs    *int64  `json:"wait_ms"`
	Limit     *int    `json:"limit"`
}

// leaseBody is the body of renew and release.
type leaseBody struct {
	LeaseID *string `json:"lease_id"`
}

// leaseJSON is a lease as the API answers it.
type leaseJSON struct {
	LeaseID   string `json:"lease_id"`
	RequestID string `json:"request_id"`
	Name      string `json:"name"`
	Key       string `json:"key"`
	Limit     int    `json:"limit"`
	Fence     int64  `json:"fence"`
	TTLMs     int64  `json:"ttl_ms"`
	ExpiresAt string `json:"expires_at"`
	State     string `json:"state"`
}

// holderJSON is one holder in an inspection.
type holderJSON struct {
	Fence     int64  `json:"fence"`
	ExpiresAt string `json:"expires_at"`
}

// inspectJSON is the answer of GET /v1/locks/inspect.
type inspectJSON struct {
	Name    string       `json:"name"`
	Key     string       `json:"key"`
	Limit   int          `json:"limit"`
	Held    bool         `json:"held"`
	Holders []holderJSON `json:"holders"`
	Waiters int          `json:"waiters"`
}

func toLeaseJSON(l lockservice.Lease) leaseJSON {
	return leaseJSON{
		LeaseID: l.ID, RequestID: l.RequestID, Name: l.Name, Key: l.Key, Limit: l.Limit,
		Fence: l.Fence, TTLMs: l.TTL.Milliseconds(), ExpiresAt: rfc3339ms(l.Expires), State: l.State,
	}
}

// rfc3339ms formats t in UTC with milliseconds, as leases are counted.
func rfc3339ms(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// acquireLock is POST /v1/locks/acquire: 201 with the lease, 200 with
// Idempotent-Replayed for a retry of a held one, 423 when the key was not
// free within wait_ms.
func (s *Server) acquireLock(w http.ResponseWriter, r *http.Request) {
	if !s.locksServed(w, r) {
		return
	}
	var b acquireBody
	if err := s.decodeLockBody(w, r, &b); err != nil {
		s.Error(w, r, err)
		return
	}
	bodyID, bodySet := "", b.RequestID != nil
	if bodySet {
		bodyID = *b.RequestID
	}
	requestID, err := requestIDOf(r, bodyID, bodySet)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	noteRequestID(r.Context(), requestID)
	req, err := acquireRequest(b)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	actor, _ := ActorFrom(r.Context())
	l, replayed, err := s.locks.Acquire(r.Context(), actor, requestID, req)
	if err != nil {
		s.Error(w, r, lockError(err))
		return
	}
	status := http.StatusCreated
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
		status = http.StatusOK
	}
	s.ok(w, r, status, toLeaseJSON(l))
}

// acquireRequest checks the body's fields and applies the defaults.
func acquireRequest(b acquireBody) (lockservice.Request, error) {
	var fields []intent.FieldError
	if b.Name == nil {
		fields = append(fields, intent.FieldError{Field: "name", Message: "is required"})
	}
	if b.Key == nil {
		fields = append(fields, intent.FieldError{Field: "key", Message: "is required"})
	}
	if len(fields) > 0 {
		return lockservice.Request{}, &intent.Error{Code: intent.EInvalid, Message: "The request body is invalid.", Fields: fields}
	}
	req := lockservice.Request{Name: *b.Name, Key: *b.Key, TTL: lockservice.DefaultTTL}
	if b.TTLMs != nil {
		// Bounded before the multiplication, so that it cannot overflow.
		req.TTL = time.Duration(max(min(*b.TTLMs, lockservice.MaxTTL.Milliseconds()+1), -1)) * time.Millisecond
	}
	if b.WaitMs != nil {
		req.Wait = time.Duration(max(min(*b.WaitMs, lockservice.MaxWait.Milliseconds()+1), -1)) * time.Millisecond
	}
	if b.Limit != nil {
		req.Limit = *b.Limit
	}
	if err := req.Check(); err != nil {
		return lockservice.Request{}, lockError(err)
	}
	return req, nil
}

// renewLock is POST /v1/locks/renew: the lease with its new expiry, or
// 410 when it ended.
func (s *Server) renewLock(w http.ResponseWriter, r *http.Request) {
	s.serveLease(w, r, s.locks.Renew)
}

// releaseLock is POST /v1/locks/release: the lease, released; 410 when it
// had ended otherwise before.
func (s *Server) releaseLock(w http.ResponseWriter, r *http.Request) {
	s.serveLease(w, r, s.locks.Release)
}

func (s *Server) serveLease(w http.ResponseWriter, r *http.Request, call func(ctx context.Context, actor, id string) (lockservice.Lease, error)) {
	if !s.locksServed(w, r) {
		return
	}
	var b leaseBody
	if err := s.decodeLockBody(w, r, &b); err != nil {
		s.Error(w, r, err)
		return
	}
	if b.LeaseID == nil || *b.LeaseID == "" {
		s.Error(w, r, &intent.Error{Code: intent.EInvalid, Message: "The request body is invalid.",
			Fields: []intent.FieldError{{Field: "lease_id", Message: "is required"}}})
		return
	}
	actor, _ := ActorFrom(r.Context())
	l, err := call(r.Context(), actor, *b.LeaseID)
	if err != nil {
		s.Error(w, r, lockError(err))
		return
	}
	s.ok(w, r, http.StatusOK, toLeaseJSON(l))
}

// inspectLock is GET /v1/locks/inspect?name=&key=[&limit=]: the key's
// holders (fences and expiries) and waiters, never a lease id.
func (s *Server) inspectLock(w http.ResponseWriter, r *http.Request) {
	if !s.locksServed(w, r) {
		return
	}
	q, err := parseQuery(r)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	var fields []intent.FieldError
	for _, name := range []string{"name", "key"} {
		if len(q[name]) != 1 {
			fields = append(fields, intent.FieldError{Field: name, Message: "must be given once"})
		}
	}
	limit := 0
	if vs := q["limit"]; len(vs) > 0 {
		n, err := strconv.Atoi(vs[0])
		if len(vs) > 1 || err != nil {
			fields = append(fields, intent.FieldError{Field: "limit", Message: "must be one integer"})
		}
		limit = n
	}
	if len(fields) > 0 {
		s.Error(w, r, &intent.Error{Code: intent.EInvalid, Message: "The query is not valid.", Fields: fields})
		return
	}
	actor, _ := ActorFrom(r.Context())
	info, err := s.locks.Inspect(r.Context(), actor, q.Get("name"), q.Get("key"), limit)
	if err != nil {
		s.Error(w, r, lockError(err))
		return
	}
	out := inspectJSON{Name: info.Name, Key: info.Key, Limit: info.Limit, Held: info.Held, Holders: []holderJSON{}, Waiters: info.Waiters}
	for _, h := range info.Holders {
		out.Holders = append(out.Holders, holderJSON{Fence: h.Fence, ExpiresAt: rfc3339ms(h.Expires)})
	}
	s.ok(w, r, http.StatusOK, out)
}

// locksServed answers 503 when this server has no lock service.
func (s *Server) locksServed(w http.ResponseWriter, r *http.Request) bool {
	if s.locks == nil {
		s.Error(w, r, intent.Errorf(intent.EUnavailable, "Locks are not served by this process."))
		return false
	}
	return true
}

// decodeLockBody reads a lock call's JSON body strictly: 415 for another
// media type, 413 over the limit, 400 for anything but one object of the
// known members.
func (s *Server) decodeLockBody(w http.ResponseWriter, r *http.Request, v any) error {
	if err := requireJSON(r); err != nil {
		return err
	}
	body, err := readBody(w, r, lockBodyLimit)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v, json.RejectUnknownMembers(true)); err != nil {
		field, msg := "", err.Error()
		var se *json.SemanticError
		if errors.As(err, &se) {
			field = string(se.JSONPointer)
			if len(field) > 0 && field[0] == '/' {
				field = field[1:]
			}
			if se.Err != nil {
				msg = se.Err.Error()
			} else {
				msg = "has the wrong type"
			}
		}
		e := &intent.Error{Code: intent.EInvalid, Message: "The request body is invalid."}
		if field != "" {
			e.Fields = []intent.FieldError{{Field: field, Message: msg}}
		} else {
			// Not one object (malformed JSON, another type, trailing
			// data): say what is wanted, not the decoder's words.
			e.Message = "The request body must be one JSON object of the documented members."
		}
		return e
	}
	return nil
}

// lockError turns the lock service's errors into the API's.
func lockError(err error) error {
	var ie *lockservice.InvalidError
	var ee *lockservice.EndedError
	switch {
	case errors.As(err, &ie):
		return &intent.Error{Code: intent.EInvalid, Message: "The request is invalid.",
			Fields: []intent.FieldError{{Field: ie.Field, Message: ie.Message}}}
	case errors.As(err, &ee):
		return apperr.Errorf(apperr.EGone, "The lease is %s: %s.", ee.State, ee.Reason)
	case errors.Is(err, lockservice.ErrNotFound):
		return intent.Errorf(intent.ENotFound, "No lease with this id.")
	case errors.Is(err, lockservice.ErrBusy):
		return apperr.Errorf(apperr.ELocked, "The key is held; it was not free within wait_ms.")
	case errors.Is(err, lockservice.ErrConflict):
		return intent.Errorf(intent.EConflict, "%s", intent.ConflictMessage)
	case errors.Is(err, lockservice.ErrLimitConflict):
		return intent.Errorf(intent.EConflict, "The semaphore key is held under another limit; use one limit per key.")
	case errors.Is(err, lockservice.ErrTooMany):
		return apperr.Errorf(apperr.ETooMany, "This actor holds or waits for as many leases as the server allows; release some first.")
	case errors.Is(err, lockservice.ErrClosed):
		return intent.Errorf(intent.EUnavailable, "The lock service is shutting down.")
	}
	return fmt.Errorf("lock call: %w", err)
}
