package intent

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxRequestIDLen is the most Unicode code points a request id may have.
const MaxRequestIDLen = 100

// IdempotencyKeyHeader is the HTTP header that may carry the request id
// instead of the body's request_id.
const IdempotencyKeyHeader = "Idempotency-Key"

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

// ParseIdempotencyKey reads the value of the Idempotency-Key header: either a
// quoted string (a structured-field sf-string: printable ASCII between double
// quotes, with \" and \\ as its only escapes) or the bare id. Surrounding
// spaces and tabs are ignored. Headers are ASCII, so a value with any other
// byte is refused (such an id goes in the body). The id is then checked with
// ValidateRequestID. Errors are *Error with code EInvalid naming the field
// "Idempotency-Key".
func ParseIdempotencyKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e {
			if c >= 0x80 {
				return "", invalidField(IdempotencyKeyHeader, "must be ASCII; send other request ids as request_id in the body")
			}
			return "", invalidField(IdempotencyKeyHeader, "must not contain control characters")
		}
	}
	id := v
	if strings.HasPrefix(v, `"`) {
		var ok bool
		if id, ok = unquoteSFString(v); !ok {
			return "", invalidField(IdempotencyKeyHeader, `must be a quoted string ("...", with \" and \\ as its only escapes) or a bare id`)
		}
	}
	if p := requestIDProblem(id); p != "" {
		return "", invalidField(IdempotencyKeyHeader, p)
	}
	return id, nil
}

// unquoteSFString decodes a structured-field string: the whole of v must be
// one DQUOTE-delimited string of printable ASCII whose only escapes are \"
// and \\.
func unquoteSFString(v string) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			i++
			if i >= len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", false
			}
			b.WriteByte(v[i])
		case '"':
			if i != len(v)-1 {
				return "", false // something after the closing quote
			}
			return b.String(), true
		default:
			if c < 0x20 || c > 0x7e {
				return "", false
			}
			b.WriteByte(c)
		}
	}
	return "", false // no closing quote
}

// ResolveRequestID picks the request id of a request from the body's
// request_id (bodySet: the body has one) and the Idempotency-Key header
// (headerSet: the header is present; headerID already parsed with
// ParseIdempotencyKey). Either may be given alone; both must then agree. With
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
