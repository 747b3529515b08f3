package httpapi

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"

	"github.com/go-json-experiment/json"
	"github.com/google/uuid"

	"studio/intent"
)

// List limits, as the contract fixes them.
const (
	DefaultListLimit = 100
	MaxListLimit     = 500
)

// cursorVersion is the version of the cursor payload this code writes and
// the only one it reads.
const cursorVersion = 1

// cursor is the payload behind an opaque next_cursor: the list it belongs
// to (its scope) and the id of the last record of the page before. It is
// not a secret and grants nothing: every page is read with the caller's
// actor, whatever the cursor says.
type cursor struct {
	V     int    `json:"v"`
	Scope string `json:"scope"`
	After string `json:"after"`
}

// encodeCursor makes the cursor of the page after id in the list scope.
func encodeCursor(scope, id string) string {
	b, err := json.Marshal(cursor{V: cursorVersion, Scope: scope, After: id})
	if err != nil {
		// A struct of an int and two strings always encodes (ids are valid
		// UTF-8, as the store gave them).
		panic("encode cursor: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor returns the id a cursor made by encodeCursor for scope
// carries, or false for anything else: another list's cursor, another
// version, a changed or truncated one.
func decodeCursor(scope, s string) (string, bool) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return "", false
	}
	var c cursor
	if err := json.Unmarshal(b, &c, json.RejectUnknownMembers(true)); err != nil {
		return "", false
	}
	if c.V != cursorVersion || c.Scope != scope {
		return "", false
	}
	id, err := uuid.Parse(c.After)
	if err != nil || id.String() != c.After {
		return "", false
	}
	return c.After, true
}

// page is a list request's limit and starting point.
type page struct {
	limit int
	after string
}

// parseQuery parses the query string, refusing (400) a malformed one.
func parseQuery(r *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, intent.Errorf(intent.EInvalid, "The query string is malformed.")
	}
	return q, nil
}

// single returns a query parameter that may appear at most once.
func single(q url.Values, name string) (string, error) {
	vs := q[name]
	if len(vs) > 1 {
		return "", invalidQuery(name, "must appear at most once")
	}
	if len(vs) == 0 {
		return "", nil
	}
	return vs[0], nil
}

// invalidQuery is the 400 of one bad query parameter.
func invalidQuery(field, msg string) error {
	return &intent.Error{Code: intent.EInvalid, Message: "The query is not valid.",
		Fields: []intent.FieldError{{Field: field, Message: msg}}}
}

// parsePage reads limit (1..500, 100 by default) and cursor (one this list
// made) from the query.
func parsePage(q url.Values, scope string) (page, error) {
	p := page{limit: DefaultListLimit}
	var fields []intent.FieldError
	if lim, err := single(q, "limit"); err != nil {
		fields = append(fields, intent.ErrorFields(err)...)
	} else if q.Has("limit") {
		n, err := strconv.Atoi(lim)
		if err != nil || n < 1 || n > MaxListLimit {
			fields = append(fields, intent.FieldError{Field: "limit", Message: "must be an integer from 1 to 500"})
		}
		p.limit = n
	}
	if cur, err := single(q, "cursor"); err != nil {
		fields = append(fields, intent.ErrorFields(err)...)
	} else if q.Has("cursor") {
		after, ok := decodeCursor(scope, cur)
		if !ok {
			fields = append(fields, intent.FieldError{Field: "cursor", Message: "is not a cursor of this list"})
		}
		p.after = after
	}
	if len(fields) > 0 {
		return page{}, &intent.Error{Code: intent.EInvalid, Message: "The query is not valid.", Fields: fields}
	}
	return p, nil
}

// listPage is the envelope of every list answer.
type listPage[T any] struct {
	Items []T `json:"items"`
	// NextCursor is null on the last page.
	NextCursor *string `json:"next_cursor"`
}

// makePage trims items, read with limit+1, to limit and makes the cursor of
// the next page when there is one.
func makePage[T any](items []T, limit int, scope string, id func(T) string) listPage[T] {
	p := listPage[T]{Items: items}
	if p.Items == nil {
		p.Items = []T{}
	}
	if len(p.Items) > limit {
		p.Items = p.Items[:limit]
		next := encodeCursor(scope, id(p.Items[limit-1]))
		p.NextCursor = &next
	}
	return p
}
