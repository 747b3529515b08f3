package intent

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// maxFloatText is how the canonical form writes the largest double. jsontext
// writes a number that overflows a double as this too, where RFC 8785 wants
// an error; seeing it in the output sends Canonicalize down the slow path that
// tells the two apart.
var maxFloatText = []byte("1.7976931348623157e+308")

// Canonicalize returns the RFC 8785 (JCS) form of one JSON value: object
// members sorted by the UTF-16 code units of their names, numbers written as
// ECMAScript writes doubles, strings in their shortest escaping, no
// whitespace. The input must be I-JSON (RFC 7493): valid UTF-8, no duplicate
// member names, numbers within the range of a double, and nothing after the
// value but whitespace. b is not modified.
func Canonicalize(b []byte) ([]byte, error) {
	v := jsontext.Value(bytes.Clone(b))
	if err := v.Canonicalize(); err != nil {
		return nil, fmt.Errorf("canonicalize: %w", err)
	}
	if bytes.Contains(v, maxFloatText) {
		if err := checkFiniteNumbers(b); err != nil {
			return nil, fmt.Errorf("canonicalize: %w", err)
		}
	}
	return v, nil
}

// errNumberRange reports a JSON number beyond the range of a double.
var errNumberRange = errors.New("number out of the range of a double")

// checkFiniteNumbers walks b, which is known to be valid JSON, and reports a
// number too large for a double.
func checkFiniteNumbers(b []byte) error {
	d := jsontext.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := d.ReadToken()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if tok.Kind() == '0' {
			if _, err := tok.Float(); err != nil {
				return fmt.Errorf("%w: %s", errNumberRange, tok.String())
			}
		}
	}
}

// CanonicalJSON marshals v with the JSON v2 encoder and returns its RFC 8785
// canonical form. Nil slices and maps marshal as [] and {}; a nil pointer
// field tagged omitempty is left out.
func CanonicalJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("marshal: %w", err)
	}
	return Canonicalize(b)
}
