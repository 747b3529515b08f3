// Package client is a Go client for studio's HTTP API: typed calls for
// every route, safe retries, live batch events and downloads.
//
// # Retries
//
// Every call retries what may succeed on another try: connection errors,
// timeouts, 5xx answers and 429 (waiting as Retry-After says), with
// exponential backoff, each wait drawn between half and all of its
// delay, up to Retry.Attempts tries. Any
// other 4xx answer is returned at once as an *Error carrying the problem
// document (RFC 9457) the server sent.
//
// Retrying a POST is safe because every mutating call is an intent with a
// request id: the call takes the id from the caller or makes one (a
// UUIDv7) once, before the first try, and sends the same id and the same
// body on every try. The server answers a repeated id with the record the
// first try made (200, Replayed), so a try whose answer was lost is never
// done twice. Keep the id to retry across processes: a later call with the
// same id and input answers the same record. Cancel and reads are
// idempotent by nature.
//
// # Events
//
// Events reads GET /v1/batches/{id}/events (Server-Sent Events) once;
// WaitBatch follows a batch to its end, reconnecting with Last-Event-ID
// (so no change is lost or repeated) and falling back to polling when the
// stream is not available, and reports progress through a callback.
//
// # Errors
//
// Errors from the server are *Error (use errors.As): status, title, detail
// and the fields at fault. When the tries are used up without an answer,
// the error is an *UnreachableError, which says why in people's words and
// matches ErrUnreachable (errors.Is).
package client
