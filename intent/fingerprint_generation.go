package intent

import (
	"strconv"
	"unicode/utf8"
)

// appendGenerationDoc appends the RFC 8785 canonical JSON of the
// fingerprint document of a generation input, written directly instead of
// marshaled by reflection and canonicalized again: a replay computes a
// fingerprint before anything else, and the generic path was a third of
// its time. It answers false for any input it does not write exactly as
// the generic path would (a nil slice, invalid UTF-8, params that are not
// a non-empty object); Fingerprint then takes the generic path.
// TestFingerprintGenerationFastPath holds the two paths to the same bytes.
//
// Member names are sorted by their UTF-16 code units, as RFC 8785 wants:
// actor < input < operation; candidates < params < prompt < providers <
// seed < sets < subjects; collection < frames.
func appendGenerationDoc(dst []byte, actor, operation string, in *GenerationInput) ([]byte, bool) {
	if in.Sets == nil || in.Providers == nil || in.Subjects == nil || len(in.Params) < 2 || in.Params[0] != '{' {
		return nil, false
	}
	params := []byte(in.Params)
	if string(params) != "{}" {
		var err error
		if params, err = Canonicalize(params); err != nil {
			return nil, false
		}
	}
	ok := true
	str := func(s string) {
		if !ok {
			return
		}
		dst, ok = appendCanonicalString(dst, s)
	}
	strs := func(ss []string) {
		dst = append(dst, '[')
		for i, s := range ss {
			if i > 0 {
				dst = append(dst, ',')
			}
			str(s)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `{"actor":`...)
	str(actor)
	dst = append(dst, `,"input":{"candidates":`...)
	dst = strconv.AppendInt(dst, int64(in.Candidates), 10)
	dst = append(dst, `,"params":`...)
	dst = append(dst, params...)
	dst = append(dst, `,"prompt":`...)
	str(in.Prompt)
	dst = append(dst, `,"providers":`...)
	strs(in.Providers)
	if in.Seed != nil {
		// Integers of a double's exact range print as ECMAScript does.
		if *in.Seed < -(1<<53) || *in.Seed > 1<<53 {
			return nil, false
		}
		dst = append(dst, `,"seed":`...)
		dst = strconv.AppendInt(dst, *in.Seed, 10)
	}
	if in.Candidates < -(1<<53) || in.Candidates > 1<<53 {
		return nil, false
	}
	dst = append(dst, `,"sets":[`...)
	for i, set := range in.Sets {
		if set.Frames == nil {
			return nil, false
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"collection":`...)
		str(set.Collection)
		dst = append(dst, `,"frames":`...)
		strs(set.Frames)
		dst = append(dst, '}')
	}
	dst = append(dst, `],"subjects":`...)
	strs(in.Subjects)
	dst = append(dst, `},"operation":`...)
	str(operation)
	dst = append(dst, '}')
	return dst, ok
}

// appendCanonicalString appends s as RFC 8785 writes a string: quotes,
// backslashes and control characters escaped (the five with short escapes
// as \b \t \n \f \r, the rest as \u00xx), everything else as it is. It
// answers false for invalid UTF-8.
func appendCanonicalString(dst []byte, s string) ([]byte, bool) {
	if !utf8.ValidString(s) {
		return nil, false
	}
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"'), true
}
