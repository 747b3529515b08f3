// Package jsonfile says what is wrong with a JSON document a person wrote
// (a request file, a catalog) in words for that person: where it is, as
// the line and column an editor shows, and what was expected, never the
// decoder's own wording.
package jsonfile

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"reflect"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Position is the line and column of the byte at offset in data, both
// counted from 1; a column counts characters (UTF-8 code points, an
// invalid byte as one), as editors do. An offset past the end is the
// position just after the last character.
func Position(data []byte, offset int64) (line, column int) {
	if offset < 0 {
		offset = 0
	}
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	before := data[:offset]
	line = 1 + bytes.Count(before, []byte("\n"))
	if i := bytes.LastIndexByte(before, '\n'); i >= 0 {
		before = before[i+1:]
	}
	return line, 1 + utf8.RuneCount(before)
}

// CheckObject answers nil when data is exactly one JSON object (with
// whitespace around it), with the strict rules studio's server reads
// requests by: valid UTF-8 and no member name twice in one object.
// Otherwise its error names the document (name: a file's path, or
// "the standard input") and says what is wrong and where:
//
//	request.json is not valid JSON (line 3, column 12)
func CheckObject(name string, data []byte) error {
	if !utf8.Valid(data) {
		return at(name, data, int64(firstInvalid(data)), "this is not UTF-8 text")
	}
	d := jsontext.NewDecoder(bytes.NewReader(data))
	v, err := d.ReadValue()
	if err != nil {
		return Explain(name, data, err)
	}
	end := d.InputOffset()
	if rest := bytes.TrimLeft(data[end:], " \t\r\n"); len(rest) > 0 {
		return at(name, data, int64(len(data)-len(rest)), "there is more after the JSON value")
	}
	if k := v.Kind(); k != '{' {
		return fmt.Errorf("%s must hold a JSON object, not %s", name, kindName(k))
	}
	return nil
}

// Explain turns an error of decoding data with jsontext or json (v2) into
// one that names the document and the line and column at fault. Errors
// of other kinds are answered as they are.
func Explain(name string, data []byte, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, io.EOF) && len(bytes.TrimSpace(data)) == 0 {
		return fmt.Errorf("%s is empty: it must hold a JSON object", name)
	}
	var se *jsontext.SyntacticError
	if errors.As(err, &se) {
		switch {
		case errors.Is(se.Err, io.ErrUnexpectedEOF), errors.Is(err, io.ErrUnexpectedEOF):
			return at(name, data, int64(len(data)), "it ends too early")
		case errors.Is(se.Err, jsontext.ErrDuplicateName):
			return at(name, data, se.ByteOffset, fmt.Sprintf("%s appears twice in its object", quotedLast(se.JSONPointer)))
		}
		return at(name, data, se.ByteOffset, "")
	}
	var me *json.SemanticError
	if errors.As(err, &me) {
		line, col := Position(data, me.ByteOffset)
		if errors.Is(me.Err, json.ErrUnknownName) {
			in := ""
			if parent := fieldPath(me.JSONPointer.Parent()); parent != "" {
				in = " in " + parent
			}
			return fmt.Errorf("%s has an unknown member %q%s (line %d, column %d)", name, me.JSONPointer.LastToken(), in, line, col)
		}
		what := kindName(me.JSONKind)
		if v := scalarAt(data, me.ByteOffset); v != "" {
			what = v
		}
		field := fieldPath(me.JSONPointer)
		if field == "" {
			field = "the document"
		}
		if me.Err != nil && ownDecoder(me.GoType) {
			// A type that reads itself says what it takes in its own words.
			return fmt.Errorf("%s: %s: %v (line %d, column %d)", name, field, me.Err, line, col)
		}
		if takes := typeName(me.GoType); takes != "" && me.JSONKind != 0 {
			return fmt.Errorf("%s: %s cannot be %s: it takes %s (line %d, column %d)", name, field, what, takes, line, col)
		}
		return fmt.Errorf("%s: %s has a value it cannot take (line %d, column %d)", name, field, line, col)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return at(name, data, int64(len(data)), "it ends too early")
	}
	return err
}

// at is the error of a document that is not valid JSON at offset, with
// an optional reason.
func at(name string, data []byte, offset int64, reason string) error {
	line, col := Position(data, offset)
	if reason != "" {
		return fmt.Errorf("%s is not valid JSON (line %d, column %d): %s", name, line, col, reason)
	}
	return fmt.Errorf("%s is not valid JSON (line %d, column %d)", name, line, col)
}

// firstInvalid is the offset of data's first byte that is not UTF-8.
func firstInvalid(data []byte) int {
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(data)
}

// quotedLast is the last name of a JSON pointer, quoted.
func quotedLast(p jsontext.Pointer) string {
	return fmt.Sprintf("the name %q", p.LastToken())
}

// fieldPath writes a JSON pointer as a field path: /sets/0/frames is
// sets[0].frames.
func fieldPath(p jsontext.Pointer) string {
	var b []byte
	for tok := range p.Tokens() {
		if isIndex(tok) && len(b) > 0 {
			b = append(b, '[')
			b = append(b, tok...)
			b = append(b, ']')
			continue
		}
		if len(b) > 0 {
			b = append(b, '.')
		}
		b = append(b, tok...)
	}
	return string(b)
}

func isIndex(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// scalarAt is the number, string or literal at offset in data, when it
// is short enough to quote, else "".
func scalarAt(data []byte, offset int64) string {
	if offset < 0 || offset >= int64(len(data)) {
		return ""
	}
	v, err := jsontext.NewDecoder(bytes.NewReader(data[offset:])).ReadValue()
	if err != nil || len(v) > 40 {
		return ""
	}
	switch v.Kind() {
	case '0', '"', 't', 'f':
		return string(v)
	}
	return ""
}

// ownDecoder says whether a type decodes itself from JSON or text.
func ownDecoder(t reflect.Type) bool {
	if t == nil {
		return false
	}
	p := reflect.PointerTo(t)
	for _, i := range []reflect.Type{
		reflect.TypeFor[json.Unmarshaler](), reflect.TypeFor[json.UnmarshalerFrom](), reflect.TypeFor[encoding.TextUnmarshaler](),
	} {
		if t.Implements(i) || p.Implements(i) {
			return true
		}
	}
	return false
}

// typeName says what JSON a Go type takes, or "" for a type without a
// plain answer.
func typeName(t reflect.Type) string {
	if t == nil {
		return ""
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return ""
}

// kindName names a JSON kind for a person.
func kindName(k jsontext.Kind) string {
	switch k {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "nothing"
}
