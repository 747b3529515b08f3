// Package apperr is studio's error kinds: an Error with a code for
// machines, a message for people and the fields at fault. Every package
// returns these codes; httpapi maps each to exactly one HTTP status, in one
// place, so nothing below it speaks HTTP. intent re-exports the codes of
// the domain; the lock API's (EGone, ELocked, ETooMany) are only here.
package apperr

import (
	"errors"
	"fmt"
	"strings"
)

// Error codes. Each maps to exactly one HTTP status in httpapi.
const (
	EInvalid          = "invalid"           // 400: the request breaks the input rules
	EUnauthorized     = "unauthorized"      // 401: no valid bearer token
	ENotFound         = "not_found"         // 404: no such record for this actor
	EConflict         = "conflict"          // 409: the id is bound to other input
	ETimeout          = "timeout"           // 408: the body did not arrive in time
	ETooLarge         = "too_large"         // 413: the body is over its limit
	EUnsupportedMedia = "unsupported_media" // 415: the body is not of an accepted type
	EUnprocessable    = "unprocessable"     // 422: well-formed, but the plan refuses it
	EGone             = "gone"              // 410: a lease that existed has ended
	ELocked           = "locked"            // 423: a lock key was not free in time
	ETooMany          = "too_many"          // 429: the caller holds too much already
	EUnavailable      = "unavailable"       // 503: shutting down or a dependency is down
	EInternal         = "internal"          // 500: a bug or an unexpected failure
)

// FieldError names one field of the input and what is wrong with it.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Error is the domain error: a code for machines, a message for people and,
// for validation, the fields at fault.
type Error struct {
	Code    string
	Message string
	Fields  []FieldError
}

// Error implements the error interface.
func (e *Error) Error() string {
	if len(e.Fields) == 0 {
		return fmt.Sprintf("%s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("%s: %s (%s: %s)", e.Code, e.Message, e.Fields[0].Field, e.Fields[0].Message)
}

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// FieldsError returns an *Error of the code for fields at fault. Its
// message follows one rule: a single field is stated in full, as
// "field: message." (one period, whatever the message ends with);
// several are summed up by summary, a sentence, and listed in Fields.
func FieldsError(code, summary string, fields []FieldError) *Error {
	msg := summary
	if len(fields) == 1 {
		msg = fields[0].Field + ": " + strings.TrimRight(fields[0].Message, ".") + "."
	}
	return &Error{Code: code, Message: msg, Fields: fields}
}

// Code returns the code of the first *Error in err's chain, EInternal for
// any other non-nil error, and "" for nil.
func Code(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EInternal
}

// Message returns the message of the first *Error in err's chain, or a
// generic text for other errors (their details are for the logs only).
func Message(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "Internal error."
}

// Fields returns the field errors of the first *Error in err's chain.
func Fields(err error) []FieldError {
	var e *Error
	if errors.As(err, &e) {
		return e.Fields
	}
	return nil
}
