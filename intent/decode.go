package intent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/uuid"
)

// Limits of the generation input (API.md, POST /v1/generations).
const (
	MaxPromptLen     = 2000
	MaxSets          = 20
	MaxCollectionLen = 100
	MaxFrames        = 60
	MaxFrameLen      = 100
	MaxProviders     = 8
	MinCandidates    = 1
	MaxCandidates    = 10
	MaxSubjects      = 20
	MaxSeed          = 1<<53 - 1
	MaxParamsBytes   = 16 << 10 // of the canonical JSON
)

// Limits and values of the publication input.
const (
	MaxPublicationAssets = 600
	ChannelGallery       = "gallery"
	ChannelWebhook       = "webhook"
)

// MaxFieldErrors caps the field errors one answer lists.
const MaxFieldErrors = 50

// invalidBodyMessage is the message of every validation error with fields.
const invalidBodyMessage = "The request body is invalid."

// Default values of the generation input.
var (
	defaultProviders = []string{"auto"}
	defaultParams    = jsontext.Value("{}")
)

// DecodeGeneration strictly decodes and validates a POST /v1/generations body.
// It returns the body's request_id and whether the body had one (a null
// request_id counts as none), and the normalized input: every default applied
// and params in canonical form. The request id itself is checked like every
// other field, but whether one is required is ResolveRequestID's call (the
// header may carry it).
//
// The body must be one JSON object with nothing after it but whitespace, of
// valid UTF-8, without duplicate member names, without unknown members
// (names are case-sensitive) and with every field of its type. A null
// optional field means "absent": its default applies. A null prompt or sets
// is "required". All field errors found are returned together, in a stable
// order (the fields' order in the contract, unknown fields last by name), in
// one *Error with code EInvalid.
func DecodeGeneration(body []byte) (requestID string, requestIDSet bool, in GenerationInput, err error) {
	members, err := readObject(body)
	if err != nil {
		return "", false, GenerationInput{}, err
	}
	var fe fieldErrors
	m := fe.known("", members, "request_id", "prompt", "sets", "providers", "candidates", "subjects", "seed", "params")

	requestID, requestIDSet = decodeRequestID(&fe, m["request_id"])

	if s, ok := fe.requiredString("prompt", m["prompt"]); ok {
		fe.length("prompt", s, 1, MaxPromptLen)
		in.Prompt = s
	}

	if items, ok := fe.array("sets", m["sets"], true); ok {
		fe.count("sets", len(items), 1, MaxSets, "sets")
		in.Sets = make([]FrameSet, len(items))
		for i, item := range items {
			in.Sets[i] = fe.frameSet(fmt.Sprintf("sets[%d]", i), item)
		}
	}

	in.Providers = defaultProviders
	if items, ok := fe.array("providers", m["providers"], false); ok {
		fe.count("providers", len(items), 1, MaxProviders, "providers")
		in.Providers = fe.distinctStrings("providers", items, 1, 0)
	}

	in.Candidates = 1
	if n, ok := fe.integer("candidates", m["candidates"], MinCandidates, MaxCandidates); ok {
		in.Candidates = int(n)
	}

	in.Subjects = []string{}
	if items, ok := fe.array("subjects", m["subjects"], false); ok {
		fe.count("subjects", len(items), 0, MaxSubjects, "subjects")
		in.Subjects = fe.distinctStrings("subjects", items, 1, 0)
	}

	if n, ok := fe.integer("seed", m["seed"], 0, MaxSeed); ok {
		in.Seed = &n
	}

	in.Params = defaultParams
	if p, ok := fe.params("params", m["params"]); ok {
		in.Params = p
	}

	if err := fe.err(); err != nil {
		return "", false, GenerationInput{}, err
	}
	return requestID, requestIDSet, in, nil
}

// DecodePublication strictly decodes and validates a POST /v1/publications
// body: {request_id, batch_id, asset_ids, channel}. batch_id is a UUID;
// asset_ids are 1..600 distinct UUIDs; channel is "gallery" (the default) or
// "webhook". UUIDs must be in their 36-character hyphenated form and come
// back in lowercase. The rules of strictness, null and errors are those of
// DecodeGeneration.
func DecodePublication(body []byte) (requestID string, requestIDSet bool, in PublicationInput, err error) {
	members, err := readObject(body)
	if err != nil {
		return "", false, PublicationInput{}, err
	}
	var fe fieldErrors
	m := fe.known("", members, "request_id", "batch_id", "asset_ids", "channel")

	requestID, requestIDSet = decodeRequestID(&fe, m["request_id"])

	if s, ok := fe.requiredString("batch_id", m["batch_id"]); ok {
		in.BatchID = fe.uuid("batch_id", s)
	}

	if items, ok := fe.array("asset_ids", m["asset_ids"], true); ok {
		fe.count("asset_ids", len(items), 1, MaxPublicationAssets, "ids")
		ids := make([]jsontext.Value, len(items))
		in.AssetIDs = make([]string, len(items))
		for i, item := range items {
			path := fmt.Sprintf("asset_ids[%d]", i)
			if s, ok := fe.str(path, item); ok {
				in.AssetIDs[i] = fe.uuid(path, s)
				ids[i] = jsontext.Value(strconv.Quote(in.AssetIDs[i]))
			}
		}
		fe.duplicates("asset_ids", in.AssetIDs, ids)
	}

	in.Channel = ChannelGallery
	if s, ok := fe.optionalString("channel", m["channel"]); ok {
		if s != ChannelGallery && s != ChannelWebhook {
			fe.add("channel", `must be "gallery" or "webhook"`)
		}
		in.Channel = s
	}

	if err := fe.err(); err != nil {
		return "", false, PublicationInput{}, err
	}
	return requestID, requestIDSet, in, nil
}

// decodeRequestID reads the optional request_id member.
func decodeRequestID(fe *fieldErrors, v jsontext.Value) (string, bool) {
	s, ok := fe.optionalString("request_id", v)
	if !ok {
		return "", false
	}
	if p := requestIDProblem(s); p != "" {
		fe.add("request_id", "%s", p)
	}
	return s, true
}

// member is one member of a JSON object, in the order of the document.
type member struct {
	name  string
	value jsontext.Value
}

// readObject parses body as exactly one JSON object, with the strict defaults
// of jsontext (valid UTF-8, no duplicate names), and returns its members.
func readObject(body []byte) ([]member, error) {
	d := jsontext.NewDecoder(bytes.NewReader(body))
	v, err := d.ReadValue()
	if err != nil {
		return nil, syntaxError(err)
	}
	v = v.Clone() // the next read reuses the decoder's buffer
	end := int(d.InputOffset())
	if rest := bytes.TrimLeft(body[end:], " \t\r\n"); len(rest) > 0 {
		return nil, Errorf(EInvalid, "The request body is not valid JSON: there is data after the JSON object (at byte %d).", len(body)-len(rest))
	}
	if v.Kind() != '{' {
		return nil, Errorf(EInvalid, "The request body must be a JSON object, not %s.", kindName(v.Kind()))
	}
	return objectMembers(v), nil
}

// syntaxError turns a jsontext error into a 400 that says where it is.
func syntaxError(err error) error {
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Errorf(EInvalid, "The request body is not valid JSON: it ends too early.")
		}
		return Errorf(EInvalid, "The request body is not valid JSON.")
	}
	if errors.Is(se.Err, jsontext.ErrDuplicateName) {
		return &Error{Code: EInvalid, Message: invalidBodyMessage, Fields: []FieldError{{
			Field: pointerPath(se.JSONPointer), Message: "appears more than once in its object",
		}}}
	}
	detail := "syntax error"
	if se.Err != nil {
		detail = strings.TrimPrefix(se.Err.Error(), "jsontext: ")
	}
	if errors.Is(se.Err, io.ErrUnexpectedEOF) {
		detail = "it ends too early"
	}
	return Errorf(EInvalid, "The request body is not valid JSON: %s (at byte %d).", detail, se.ByteOffset)
}

// pointerPath writes a JSON pointer as a field path: /sets/0/frames becomes
// sets[0].frames.
func pointerPath(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.ParseUint(tok, 10, 64); err == nil && b.Len() > 0 {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// objectMembers splits a valid JSON object into its members.
func objectMembers(v jsontext.Value) []member {
	d := jsontext.NewDecoder(bytes.NewReader(v))
	if _, err := d.ReadToken(); err != nil {
		panic("intent: objectMembers: " + err.Error())
	}
	var ms []member
	for d.PeekKind() != '}' {
		tok, err := d.ReadToken()
		if err != nil {
			panic("intent: objectMembers: " + err.Error())
		}
		name := tok.String() // before the next read voids tok
		val, err := d.ReadValue()
		if err != nil {
			panic("intent: objectMembers: " + err.Error())
		}
		ms = append(ms, member{name: name, value: val.Clone()})
	}
	return ms
}

// arrayElements splits a valid JSON array into its elements.
func arrayElements(v jsontext.Value) []jsontext.Value {
	d := jsontext.NewDecoder(bytes.NewReader(v))
	if _, err := d.ReadToken(); err != nil {
		panic("intent: arrayElements: " + err.Error())
	}
	elems := []jsontext.Value{}
	for d.PeekKind() != ']' {
		val, err := d.ReadValue()
		if err != nil {
			panic("intent: arrayElements: " + err.Error())
		}
		elems = append(elems, val.Clone())
	}
	return elems
}

// kindName names a JSON kind for a message.
func kindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "invalid"
}

// fieldErrors collects the field errors of one body.
type fieldErrors struct {
	list    []FieldError
	dropped int
}

// add records one field error.
func (fe *fieldErrors) add(field, format string, args ...any) {
	if len(fe.list) >= MaxFieldErrors {
		fe.dropped++
		return
	}
	fe.list = append(fe.list, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// err returns the collected errors as one *Error, or nil.
func (fe *fieldErrors) err() error {
	if len(fe.list) == 0 {
		return nil
	}
	msg := invalidBodyMessage
	if fe.dropped > 0 {
		msg = fmt.Sprintf("The request body is invalid (%d more problems not listed).", fe.dropped)
	}
	return &Error{Code: EInvalid, Message: msg, Fields: fe.list}
}

// join appends a member name to a path.
func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// known maps the members of an object by name and reports every member not
// in names as unknown, at once and sorted by name, so the order of the
// errors never depends on the order of the keys: in each object the unknown
// members come first, then its fields in the order of the contract.
func (fe *fieldErrors) known(path string, members []member, names ...string) map[string]jsontext.Value {
	m := make(map[string]jsontext.Value, len(members))
	var unknown []string
	for _, mb := range members {
		if slices.Contains(names, mb.name) {
			m[mb.name] = mb.value
		} else {
			unknown = append(unknown, mb.name)
		}
	}
	slices.Sort(unknown)
	for _, u := range unknown {
		msg := "is not a known field"
		for _, n := range names {
			if strings.EqualFold(u, n) {
				msg = fmt.Sprintf("is not a known field (names are case-sensitive: did you mean %q?)", n)
				break
			}
		}
		fe.add(join(path, u), "%s", msg)
	}
	return m
}

// typeError reports a value of the wrong JSON type.
func (fe *fieldErrors) typeError(path, want string, v jsontext.Value) {
	fe.add(path, "must be %s, not %s", want, kindName(v.Kind()))
}

// str reads a JSON string that must be there and not null.
func (fe *fieldErrors) str(path string, v jsontext.Value) (string, bool) {
	if v.Kind() != '"' {
		fe.typeError(path, "a string", v)
		return "", false
	}
	b, err := jsontext.AppendUnquote(nil, v)
	if err != nil {
		fe.add(path, "must be a valid string")
		return "", false
	}
	return string(b), true
}

// requiredString reads a required string member: absent or null is "is
// required".
func (fe *fieldErrors) requiredString(path string, v jsontext.Value) (string, bool) {
	if v == nil || v.Kind() == 'n' {
		fe.add(path, "is required")
		return "", false
	}
	return fe.str(path, v)
}

// optionalString reads an optional string member: absent or null gives ok
// false and no error.
func (fe *fieldErrors) optionalString(path string, v jsontext.Value) (string, bool) {
	if v == nil || v.Kind() == 'n' {
		return "", false
	}
	return fe.str(path, v)
}

// array reads an array member. Absent or null is "is required" when
// required, else ok false with no error.
func (fe *fieldErrors) array(path string, v jsontext.Value, required bool) ([]jsontext.Value, bool) {
	if v == nil || v.Kind() == 'n' {
		if required {
			fe.add(path, "is required")
		}
		return nil, false
	}
	if v.Kind() != '[' {
		fe.typeError(path, "an array", v)
		return nil, false
	}
	return arrayElements(v), true
}

// length checks that s has min..max code points.
func (fe *fieldErrors) length(path, s string, min, max int) {
	n := utf8.RuneCountInString(s)
	switch {
	case n < min && min == 1:
		fe.add(path, "must not be empty")
	case n < min || n > max:
		fe.add(path, "must have %d to %d characters (has %d)", min, max, n)
	}
}

// count checks the number of elements of an array.
func (fe *fieldErrors) count(path string, n, min, max int, what string) {
	if n < min || n > max {
		fe.add(path, "must have %d to %d %s (has %d)", min, max, what, n)
	}
}

// distinctStrings reads an array of strings of minLen..maxLen code points
// (maxLen 0: no upper limit) that must all differ.
func (fe *fieldErrors) distinctStrings(path string, items []jsontext.Value, minLen, maxLen int) []string {
	out := make([]string, len(items))
	for i, item := range items {
		p := fmt.Sprintf("%s[%d]", path, i)
		s, ok := fe.str(p, item)
		if !ok {
			continue
		}
		if maxLen > 0 {
			fe.length(p, s, minLen, maxLen)
		} else if s == "" && minLen > 0 {
			fe.add(p, "must not be empty")
		}
		out[i] = s
	}
	fe.duplicates(path, out, items)
	return out
}

// duplicates reports every element of values equal to an earlier one. Only
// elements that were strings (items[i].Kind() == '"') take part.
func (fe *fieldErrors) duplicates(path string, values []string, items []jsontext.Value) {
	first := make(map[string]int, len(values))
	for i, s := range values {
		if items[i] == nil || items[i].Kind() != '"' {
			continue
		}
		if j, ok := first[s]; ok {
			fe.add(fmt.Sprintf("%s[%d]", path, i), "repeats %s[%d]; values must be distinct", path, j)
			continue
		}
		first[s] = i
	}
}

// frameSet reads one element of sets.
func (fe *fieldErrors) frameSet(path string, v jsontext.Value) FrameSet {
	var fs FrameSet
	if v.Kind() != '{' {
		fe.typeError(path, "an object", v)
		return fs
	}
	m := fe.known(path, objectMembers(v), "collection", "frames")
	if s, ok := fe.requiredString(join(path, "collection"), m["collection"]); ok {
		fe.length(join(path, "collection"), s, 1, MaxCollectionLen)
		fs.Collection = s
	}
	fp := join(path, "frames")
	if items, ok := fe.array(fp, m["frames"], true); ok {
		fe.count(fp, len(items), 1, MaxFrames, "frames")
		fs.Frames = fe.distinctStrings(fp, items, 1, MaxFrameLen)
	}
	return fs
}

// integer reads an optional integer member in min..max. Absent or null gives
// ok false with no error. Any JSON number whose value as a double is an
// integer counts, so 3, 3.0 and 3e0 are all 3 (RFC 8785 writes each as 3).
func (fe *fieldErrors) integer(path string, v jsontext.Value, min, max int64) (int64, bool) {
	if v == nil || v.Kind() == 'n' {
		return 0, false
	}
	if v.Kind() != '0' {
		fe.typeError(path, "an integer", v)
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	switch {
	case err != nil || f != math.Trunc(f):
		fe.add(path, "must be an integer from %d to %d", min, max)
		return 0, false
	case f < float64(min) || f > float64(max):
		fe.add(path, "must be from %d to %d", min, max)
		return 0, false
	}
	return int64(f), true
}

// params reads the optional params object and returns its canonical form.
func (fe *fieldErrors) params(path string, v jsontext.Value) (jsontext.Value, bool) {
	if v == nil || v.Kind() == 'n' {
		return nil, false
	}
	if v.Kind() != '{' {
		fe.typeError(path, "an object", v)
		return nil, false
	}
	c, err := Canonicalize(v)
	if err != nil {
		if errors.Is(err, errNumberRange) {
			fe.add(path, "has a number beyond the range of a double")
		} else {
			fe.add(path, "is not valid I-JSON")
		}
		return nil, false
	}
	if len(c) > MaxParamsBytes {
		fe.add(path, "must be at most %d bytes as canonical JSON (is %d)", MaxParamsBytes, len(c))
		return nil, false
	}
	return c, true
}

// uuid checks a UUID in its 36-character form and returns it in lowercase.
func (fe *fieldErrors) uuid(path, s string) string {
	u, err := uuid.Parse(s)
	if err != nil || len(s) != 36 {
		fe.add(path, "must be a UUID like 0192f0c1-7a3b-7c4d-8e5f-0123456789ab")
		return s
	}
	return u.String()
}
