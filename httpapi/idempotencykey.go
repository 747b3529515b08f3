package httpapi

import (
	"errors"
	"strings"

	"studio/intent"
)

// idempotencyKeyHeader is the HTTP header that may carry the request id
// instead of the body's request_id.
const idempotencyKeyHeader = "Idempotency-Key"

// invalidKey is the 400 error naming the Idempotency-Key header.
func invalidKey(message string) *intent.Error {
	return &intent.Error{Code: intent.EInvalid, Message: "The request body is invalid.",
		Fields: []intent.FieldError{{Field: idempotencyKeyHeader, Message: message}}}
}

// parseIdempotencyKey reads the value of the Idempotency-Key header: either a
// quoted string (a structured-field sf-string: printable ASCII between double
// quotes, with \" and \\ as its only escapes) or the bare id. Surrounding
// spaces and tabs are ignored. Headers are ASCII, so a value with any other
// byte is refused (such an id goes in the body). The id is then checked with
// intent.ValidateRequestID. Errors are *intent.Error with code EInvalid
// naming the field "Idempotency-Key".
func parseIdempotencyKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e {
			if c >= 0x80 {
				return "", invalidKey("must be ASCII; send other request ids as request_id in the body")
			}
			return "", invalidKey("must not contain control characters")
		}
	}
	id := v
	if strings.HasPrefix(v, `"`) {
		var ok bool
		if id, ok = unquoteSFString(v); !ok {
			return "", invalidKey(`must be a quoted string ("...", with \" and \\ as its only escapes) or a bare id`)
		}
	}
	var e *intent.Error
	if err := intent.ValidateRequestID(id); errors.As(err, &e) && len(e.Fields) == 1 {
		return "", invalidKey(e.Fields[0].Message)
	} else if err != nil {
		return "", err
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
