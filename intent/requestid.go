package intent

import (
	"unicode"
	"unicode/utf8"
)

// MaxRequestIDLen is the most Unicode code points a request id may have.
const MaxRequestIDLen = 100

// invalidField returns the 400 error for one field.
func invalidField(field, message string) *Error {
	return &Error{Code: EInvalid, Message: invalidBodyMessage, Fields: []FieldError{{Field: field, Message: message}}}
}

// requestIDProblem returns what is wrong with id as a request id, or "".
func requestIDProblem(id string) string {
	if !utf8.ValidString(id) {
		return "must be valid UTF-8"
	}
	n := 0
	for _, r := range id {
		if unicode.IsControl(r) {
			return "must not contain control characters"
		}
		n++
	}
	switch {
	case n == 0:
		return "must not be empty"
	case n > MaxRequestIDLen:
		return "must be at most 100 characters"
	}
	return ""
}

// ValidateRequestID checks a request id: 1..100 Unicode code points of valid
// UTF-8 with no control characters (C0, DEL, C1). The error is an *Error with
// code EInvalid naming the field "request_id".
func ValidateRequestID(id string) error {
	if p := requestIDProblem(id); p != "" {
		return invalidField("request_id", p)
	}
	return nil
}

// ResolveRequestID picks the request id of a request from the body's
// request_id (bodySet: the body has one) and the Idempotency-Key header
// (headerSet: the header is present; headerID already parsed). Either may be given alone; both must then agree. With
// neither, or with two different ids, the error is an *Error with code
// EInvalid naming "request_id".
func ResolveRequestID(bodyID string, bodySet bool, headerID string, headerSet bool) (string, error) {
	var id string
	switch {
	case bodySet && headerSet && bodyID != headerID:
		return "", invalidField("request_id", "differs from the Idempotency-Key header; send one id, or the same in both")
	case bodySet:
		id = bodyID
	case headerSet:
		id = headerID
	default:
		return "", &Error{Code: EInvalid, Message: "request_id is required.", Fields: []FieldError{{Field: "request_id", Message: "is required (in the body or as the Idempotency-Key header)"}}}
	}
	if err := ValidateRequestID(id); err != nil {
		return "", err
	}
	return id, nil
}
