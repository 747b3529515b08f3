package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"studio/store"
)

// faultAnswer is how the API answers a dependency fault of one kind.
type faultAnswer struct {
	// status is the answer's status; writeStatus, when set, replaces it
	// for requests that write (507 for a full volume: the write is what
	// does not fit).
	status, writeStatus int
	// retryAfter is the Retry-After the answer carries.
	retryAfter time.Duration
	// detail names the class of fault, and nothing internal.
	detail string
}

// faultAnswers is the one map from a dependency fault's kind to its
// answer. A fault is never a 500: it is not a bug, it passes, and a retry
// (with the same request id, for an intent) is safe.
var faultAnswers = map[store.FaultKind]faultAnswer{
	store.FaultBusy:        {status: http.StatusServiceUnavailable, retryAfter: 2 * time.Second, detail: "The database is busy."},
	store.FaultUnreachable: {status: http.StatusServiceUnavailable, retryAfter: 5 * time.Second, detail: "The database is unreachable."},
	store.FaultFull: {status: http.StatusServiceUnavailable, writeStatus: http.StatusInsufficientStorage,
		retryAfter: 60 * time.Second, detail: "The data volume is full."},
	store.FaultReadOnly:   {status: http.StatusServiceUnavailable, retryAfter: 30 * time.Second, detail: "The database is read-only."},
	store.FaultIO:         {status: http.StatusServiceUnavailable, retryAfter: 10 * time.Second, detail: "The database could not read or write its files."},
	store.FaultAssetStore: {status: http.StatusServiceUnavailable, retryAfter: 5 * time.Second, detail: "The asset store is unavailable."},
}

// unknownOutcome ends the detail of a fault after which a write may have
// committed.
const unknownOutcome = " The outcome is unknown: retry with the same request id."

// writeFault answers a dependency fault: its status, Retry-After and a
// detail that names its class. The first fault of an outage is logged
// (once, by s.outage); the request log line has the status.
func (s *Server) writeFault(w http.ResponseWriter, r *http.Request, f *store.Fault) {
	a, ok := faultAnswers[f.Kind]
	if !ok {
		a = faultAnswers[store.FaultUnreachable]
	}
	writes := r.Method != http.MethodGet && r.Method != http.MethodHead
	status := a.status
	if writes && a.writeStatus != 0 {
		status = a.writeStatus
	}
	detail := a.detail
	if writes && f.MaybeCommitted {
		detail += unknownOutcome
	}
	if f.Kind == store.FaultAssetStore {
		s.assetOutage.Fault(f)
	} else {
		s.outage.Fault(f)
	}
	if rec, ok := r.Context().Value(recordKey).(*RequestRecord); ok {
		rec.Fault = string(f.Kind)
	}
	w.Header().Set("Retry-After", strconv.Itoa(int(a.retryAfter/time.Second)))
	s.writeProblem(w, r, Problem{
		Type:   "about:blank",
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
	})
}
