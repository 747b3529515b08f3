package intent

import "studio/apperr"

// Error codes of the domain, from apperr (which has them all, the lock
// API's too). Each maps to exactly one HTTP status in httpapi; the domain
// never speaks HTTP itself.
const (
	EInvalid          = apperr.EInvalid          // 400: the request breaks the input rules
	EUnauthorized     = apperr.EUnauthorized     // 401: no valid bearer token
	ENotFound         = apperr.ENotFound         // 404: no such record for this actor
	EConflict         = apperr.EConflict         // 409: the id is bound to other input
	ETimeout          = apperr.ETimeout          // 408: the body did not arrive in time
	ETooLarge         = apperr.ETooLarge         // 413: the body is over its limit
	EUnsupportedMedia = apperr.EUnsupportedMedia // 415: the body is not of an accepted type
	EUnprocessable    = apperr.EUnprocessable    // 422: well-formed, but the plan refuses it
	EUnavailable      = apperr.EUnavailable      // 503: shutting down or a dependency is down
	EInternal         = apperr.EInternal         // 500: a bug or an unexpected failure
)

// ConflictMessage is the exact detail of every request-id conflict.
const ConflictMessage = "The request ID already belongs to different input."

// Error is the domain error (apperr.Error).
type Error = apperr.Error

// FieldError names one field of the input and what is wrong with it
// (apperr.FieldError).
type FieldError = apperr.FieldError

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code, format string, args ...any) *Error { return apperr.Errorf(code, format, args...) }

// FieldsError returns an *Error for fields at fault: one is stated in
// the message ("field: message."), several summed up by summary
// (apperr.FieldsError).
func FieldsError(code, summary string, fields []FieldError) *Error {
	return apperr.FieldsError(code, summary, fields)
}

// ErrorCode returns the code of the first *Error in err's chain, EInternal for
// any other non-nil error, and "" for nil.
func ErrorCode(err error) string { return apperr.Code(err) }

// ErrorMessage returns the message of the first *Error in err's chain, or a
// generic text for other errors (their details are for the logs only).
func ErrorMessage(err error) string { return apperr.Message(err) }

// ErrorFields returns the field errors of the first *Error in err's chain.
func ErrorFields(err error) []FieldError { return apperr.Fields(err) }
