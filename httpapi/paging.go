package httpapi

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

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
// the only one it reads. Version 1 was unsigned and is refused.
const cursorVersion = 2

// cursor is the payload behind an opaque next_cursor: the list it belongs
// to (its scope) and the id of the last record of the page before. It is
// not a secret and grants nothing (every page is read with the caller's
// actor, whatever the cursor says), but it is signed: a cursor the server
// did not make is refused.
type cursor struct {
	V     int    `json:"v"`
	Scope string `json:"scope"`
	After string `json:"after"`
}

// cursorSigner makes and checks cursors: base64url(payload) "."
// base64url(HMAC-SHA256(key, payload)).
type cursorSigner struct{ key []byte }

// newCursorSigner signs with key, or with a random key when it is empty.
func newCursorSigner(key []byte) (cursorSigner, error) {
	if len(key) == 0 {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return cursorSigner{}, fmt.Errorf("make cursor key: %w", err)
		}
	}
	return cursorSigner{key: bytes.Clone(key)}, nil
}

func (c cursorSigner) mac(payload []byte) []byte {
	m := hmac.New(sha256.New, c.key)
	m.Write(payload)
	return m.Sum(nil)
}

// encode makes the cursor of the page after id in the list scope.
func (c cursorSigner) encode(scope, id string) string {
	b, err := json.Marshal(cursor{V: cursorVersion, Scope: scope, After: id})
	if err != nil {
		// A struct of an int and two strings always encodes (ids are valid
		// UTF-8, as the store gave them).
		panic("encode cursor: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b) + "." + base64.RawURLEncoding.EncodeToString(c.mac(b))
}

// decode returns the id a cursor made by encode for scope carries, or false
// for anything else: a signature that does not match (a forged or changed
// cursor, or one signed with another key), another list's cursor, another
// version, a truncated one.
func (c cursorSigner) decode(scope, s string) (string, bool) {
	p, sig, ok := strings.Cut(s, ".")
	if !ok {
		return "", false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(p)
	if err != nil {
		return "", false
	}
	got, err := base64.RawURLEncoding.Strict().DecodeString(sig)
	if err != nil || !hmac.Equal(got, c.mac(b)) {
		return "", false
	}
	var cur cursor
	if err := json.Unmarshal(b, &cur, json.RejectUnknownMembers(true)); err != nil {
		return "", false
	}
	if cur.V != cursorVersion || cur.Scope != scope {
		return "", false
	}
	id, err := uuid.Parse(cur.After)
	if err != nil || id.String() != cur.After {
		return "", false
	}
	return cur.After, true
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
func (s *Server) parsePage(q url.Values, scope string) (page, error) {
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
		after, ok := s.cursors.decode(scope, cur)
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
// the next page when there is one, signed by c.
func makePage[T any](c cursorSigner, items []T, limit int, scope string, id func(T) string) listPage[T] {
	p := listPage[T]{Items: items}
	if p.Items == nil {
		p.Items = []T{}
	}
	if len(p.Items) > limit {
		p.Items = p.Items[:limit]
		next := c.encode(scope, id(p.Items[limit-1]))
		p.NextCursor = &next
	}
	return p
}
