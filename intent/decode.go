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
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/uuid"

	"studio/internal/jsonfile"
)

// Limits of the generation input (API.md, POST /v1/generations).
const (
	MaxPromptLen     = 2000      // code points
	MaxSets          = 20        // sets per request
	MaxCollectionLen = 100       // code points
	MaxFrames        = 60        // frames per set
	MaxFrameLen      = 100       // code points
	MaxProviders     = 8         // providers per request
	MinCandidates    = 1         // per frame per provider
	MaxCandidates    = 10        // per frame per provider
	MaxSubjects      = 20        // subjects per request
	MaxSeed          = 1<<53 - 1 // the largest integer a double holds exactly
	MaxParamsBytes   = 16 << 10  // of params as canonical JSON
)

// Limits and values of the publication input.
const (
	MaxPublicationAssets = 600       // asset ids per publication
	ChannelGallery       = "gallery" // the default channel
	ChannelWebhook       = "webhook" // the other channel
)

// MaxFieldErrors caps the field errors one answer lists.
const MaxFieldErrors = 50

// invalidBodyMessage is the message of every validation error with fields.
const invalidBodyMessage = "The request body is invalid."

// DecodeGeneration strictly decodes and validates a POST /v1/generations body.
// It returns the body's request_id and whether the body had one (a null
// request_id counts as none), and the normalized input: every default applied
// and params in canonical form. A request_id in the body is checked like every
// other field; whether one is required is ResolveRequestID's call (the header
// may carry it).
//
// The body must be one JSON object with nothing after it but whitespace, of
// valid UTF-8, without duplicate member names, without unknown members
// (names are case-sensitive) and with every field of its type. A null
// optional field means "absent": its default applies; a null prompt or sets
// is "required". Every field error found is returned, together, in one
// *Error with code EInvalid, in an order that does not depend on the order of
// the keys: in each object its unknown members first (by name), then its
// fields in the order of the contract, array elements by index.
func DecodeGeneration(body []byte) (requestID string, requestIDSet bool, in GenerationInput, err error) {
	c := getChecker()
	defer c.release(len(body))
	m, err := c.body(body, "request_id", "prompt", "sets", "providers", "candidates", "subjects", "seed", "params")
	if err != nil {
		return "", false, GenerationInput{}, err
	}

	requestID, requestIDSet = c.requestID(m.get("request_id"))

	if s, ok := c.requiredString("prompt", m.get("prompt")); ok {
		c.length("prompt", s, 1, MaxPromptLen)
		in.Prompt = s
	}

	if items, ok := c.array("sets", m.get("sets"), true); ok {
		c.count("sets", len(items), 1, MaxSets, "sets")
		in.Sets = make([]FrameSet, len(items))
		for i, item := range items {
			in.Sets[i] = c.frameSet("sets", i, item)
		}
	}

	in.Providers = []string{"auto"}
	if items, ok := c.array("providers", m.get("providers"), false); ok {
		c.count("providers", len(items), 1, MaxProviders, "providers")
		in.Providers = c.distinctStrings("providers", items, 1, 0)
	}

	in.Candidates = 1
	if n, ok := c.integer("candidates", m.get("candidates"), MinCandidates, MaxCandidates); ok {
		in.Candidates = int(n)
	}

	in.Subjects = []string{}
	if items, ok := c.array("subjects", m.get("subjects"), false); ok {
		c.count("subjects", len(items), 0, MaxSubjects, "subjects")
		in.Subjects = c.distinctStrings("subjects", items, 1, 0)
	}

	if n, ok := c.integer("seed", m.get("seed"), 0, MaxSeed); ok {
		in.Seed = &n
	}

	in.Params = jsontext.Value("{}")
	if p, ok := c.params("params", m.get("params")); ok {
		in.Params = p
	}

	if err := c.err(); err != nil {
		return "", false, GenerationInput{}, err
	}
	return requestID, requestIDSet, in, nil
}

// DecodePublication strictly decodes and validates a POST /v1/publications
// body: {request_id, batch_id, asset_ids, channel}. batch_id is a UUID;
// asset_ids are 1..600 distinct UUIDs; channel is "gallery" (the default) or
// "webhook". UUIDs must be in their 36-character hyphenated form and come
// back in lowercase. Strictness, null and errors are as in DecodeGeneration.
func DecodePublication(body []byte) (requestID string, requestIDSet bool, in PublicationInput, err error) {
	c := getChecker()
	defer c.release(len(body))
	m, err := c.body(body, "request_id", "batch_id", "asset_ids", "channel")
	if err != nil {
		return "", false, PublicationInput{}, err
	}

	requestID, requestIDSet = c.requestID(m.get("request_id"))

	if s, ok := c.requiredString("batch_id", m.get("batch_id")); ok {
		in.BatchID = c.uuid("batch_id", s)
	}

	if items, ok := c.array("asset_ids", m.get("asset_ids"), true); ok {
		c.count("asset_ids", len(items), 1, MaxPublicationAssets, "ids")
		in.AssetIDs = make([]string, len(items))
		isString := make([]bool, len(items))
		for i, item := range items {
			s, problem := stringValue(item)
			if problem != "" {
				c.add(index("asset_ids", i), problem)
				continue
			}
			in.AssetIDs[i], isString[i] = c.uuid(index("asset_ids", i), s), true
		}
		c.duplicates("asset_ids", in.AssetIDs, isString)
	}

	in.Channel = ChannelGallery
	if s, ok := c.optionalString("channel", m.get("channel")); ok {
		if s != ChannelGallery && s != ChannelWebhook {
			c.add("channel", `must be "gallery" or "webhook"`)
		}
		in.Channel = s
	}

	if err := c.err(); err != nil {
		return "", false, PublicationInput{}, err
	}
	return requestID, requestIDSet, in, nil
}

// checker reads the parts of one body and collects what is wrong with them.
type checker struct {
	list    []FieldError
	dropped int
	// rd and dec split objects and arrays; reused for every one.
	rd  bytes.Reader
	dec jsontext.Decoder
}

// checkers keeps checkers for reuse: a checker's decoder and its buffer
// are most of what decoding a small body allocates.
var checkers = sync.Pool{New: func() any { return new(checker) }}

// maxPooledBody is the largest body whose checker goes back to the pool
// (its decoder's buffer grew to the body's size).
const maxPooledBody = 64 << 10

func getChecker() *checker { return checkers.Get().(*checker) }

// release returns c to the pool, holding nothing of the body it read:
// its field errors went out with the error that carries them.
func (c *checker) release(bodyLen int) {
	c.list, c.dropped = nil, 0
	c.rd.Reset(nil)
	c.dec.Reset(&c.rd)
	if bodyLen <= maxPooledBody {
		checkers.Put(c)
	}
}

// members are the known members of an object, by the position of their
// name in the names asked for; a missing member is nil.
type members struct {
	names []string
	vals  [maxMembers]jsontext.Value
}

// maxMembers bounds the names an object is read with.
const maxMembers = 8

// get returns the member name (one of the names the object was read with).
func (m *members) get(name string) jsontext.Value {
	for i, n := range m.names {
		if n == name {
			return m.vals[i]
		}
	}
	return nil
}

// revisit are the decoder options for a part of a body already read whole
// with the strict defaults: its UTF-8 and names need no second check.
var revisit = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

// add records one field error.
func (c *checker) add(field, message string) {
	if len(c.list) >= MaxFieldErrors {
		c.dropped++
		return
	}
	c.list = append(c.list, FieldError{Field: field, Message: message})
}

// err returns the collected errors as one *Error, or nil.
func (c *checker) err() error {
	if len(c.list) == 0 {
		return nil
	}
	msg := invalidBodyMessage
	if c.dropped > 0 {
		msg = fmt.Sprintf("The request body is invalid (%d more problems not listed).", c.dropped)
	}
	return &Error{Code: EInvalid, Message: msg, Fields: c.list}
}

// join appends a member name to a path.
func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// index appends an array index to a path.
func index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// body parses body as exactly one JSON object, with the strict defaults of
// jsontext (valid UTF-8, no duplicate names), and returns its known members
// by name, having reported the unknown ones.
func (c *checker) body(body []byte, names ...string) (members, error) {
	c.rd.Reset(body)
	c.dec.Reset(&c.rd)
	v, err := c.dec.ReadValue()
	if err != nil {
		return members{}, syntaxError(body, err)
	}
	end := int(c.dec.InputOffset())
	v = body[end-len(v) : end] // the caller's bytes: the next read reuses the decoder's
	if rest := bytes.TrimLeft(body[end:], " \t\r\n"); len(rest) > 0 {
		line, col := jsonfile.Position(body, int64(len(body)-len(rest)))
		return members{}, Errorf(EInvalid, "The request body is not valid JSON (line %d, column %d): there is data after the JSON object.", line, col)
	}
	if v.Kind() != '{' {
		return members{}, Errorf(EInvalid, "The request body must be a JSON object, not %s.", kindName(v.Kind()))
	}
	return c.object("", v, names), nil
}

// syntaxError turns a jsontext error into a 400 that says where it is, as
// the line and column an editor shows, in words of studio's own.
func syntaxError(body []byte, err error) error {
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
	if errors.Is(se.Err, io.ErrUnexpectedEOF) {
		return Errorf(EInvalid, "The request body is not valid JSON: it ends too early.")
	}
	line, col := jsonfile.Position(body, se.ByteOffset)
	return Errorf(EInvalid, "The request body is not valid JSON (line %d, column %d).", line, col)
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

// object splits a valid JSON object, maps its members by name and reports
// every member not in names as unknown, at once and sorted by name, so the
// order of the errors never depends on the order of the keys.
func (c *checker) object(path string, v jsontext.Value, names []string) members {
	c.rd.Reset(v)
	c.dec.Reset(&c.rd, revisit...)
	if _, err := c.dec.ReadToken(); err != nil {
		panic("intent: split a valid object: " + err.Error())
	}
	if len(names) > maxMembers {
		panic("intent: an object read with more than maxMembers names")
	}
	m := members{names: names}
	var unknown []string
	for c.dec.PeekKind() != '}' {
		i, name := c.memberName(names)
		val, err := c.dec.ReadValue()
		if err != nil {
			panic("intent: split a valid object: " + err.Error())
		}
		end := int(c.dec.InputOffset())
		if i >= 0 {
			m.vals[i] = v[end-len(val) : end]
		} else {
			unknown = append(unknown, name)
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
		c.add(join(path, u), msg)
	}
	return m
}

// memberName reads the next member name of a valid object: its index in
// names, or -1 and the name. A known name without escapes is matched on
// the raw bytes, with no string made of it.
func (c *checker) memberName(names []string) (int, string) {
	raw, err := c.dec.ReadValue() // a name reads as a string value
	if err != nil {
		panic("intent: split a valid object: " + err.Error())
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		inner := raw[1 : len(raw)-1]
		for i, n := range names {
			if string(inner) == n {
				return i, ""
			}
		}
		return -1, string(inner)
	}
	b, err := jsontext.AppendUnquote(nil, raw)
	if err != nil {
		panic("intent: split a valid object: " + err.Error())
	}
	name := string(b)
	return slices.Index(names, name), name
}

// elements splits a valid JSON array into its elements.
func (c *checker) elements(v jsontext.Value) []jsontext.Value {
	c.rd.Reset(v)
	c.dec.Reset(&c.rd, revisit...)
	if _, err := c.dec.ReadToken(); err != nil {
		panic("intent: split a valid array: " + err.Error())
	}
	elems := make([]jsontext.Value, 0, 8) // one allocation for the usual short array
	for c.dec.PeekKind() != ']' {
		val, err := c.dec.ReadValue()
		if err != nil {
			panic("intent: split a valid array: " + err.Error())
		}
		end := int(c.dec.InputOffset())
		elems = append(elems, v[end-len(val):end])
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

// absent reports a member that is missing or null.
func absent(v jsontext.Value) bool { return v == nil || v.Kind() == 'n' }

// typeProblem says that v is not of the wanted type.
func typeProblem(want string, v jsontext.Value) string {
	return "must be " + want + ", not " + kindName(v.Kind())
}

// stringValue reads a valid JSON value that must be a string.
func stringValue(v jsontext.Value) (s, problem string) {
	if v.Kind() != '"' {
		return "", typeProblem("a string", v)
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1]), "" // no escapes: the bytes are the string
	}
	b, err := jsontext.AppendUnquote(nil, v)
	if err != nil {
		return "", "must be a valid string"
	}
	return string(b), ""
}

// requestID reads the optional request_id member.
func (c *checker) requestID(v jsontext.Value) (string, bool) {
	s, ok := c.optionalString("request_id", v)
	if !ok {
		return "", false
	}
	if p := requestIDProblem(s); p != "" {
		c.add("request_id", p)
	}
	return s, true
}

// requiredString reads a required string member: absent or null "is
// required".
func (c *checker) requiredString(path string, v jsontext.Value) (string, bool) {
	if absent(v) {
		c.add(path, "is required")
		return "", false
	}
	s, problem := stringValue(v)
	if problem != "" {
		c.add(path, problem)
		return "", false
	}
	return s, true
}

// optionalString reads an optional string member: absent or null gives ok
// false and no error.
func (c *checker) optionalString(path string, v jsontext.Value) (string, bool) {
	if absent(v) {
		return "", false
	}
	s, problem := stringValue(v)
	if problem != "" {
		c.add(path, problem)
		return "", false
	}
	return s, true
}

// array reads an array member. Absent or null "is required" when required,
// else gives ok false with no error.
func (c *checker) array(path string, v jsontext.Value, required bool) ([]jsontext.Value, bool) {
	if absent(v) {
		if required {
			c.add(path, "is required")
		}
		return nil, false
	}
	if v.Kind() != '[' {
		c.add(path, typeProblem("an array", v))
		return nil, false
	}
	return c.elements(v), true
}

// lengthProblem says whether s has min..max code points (max 0: no limit).
func lengthProblem(s string, min, max int) string {
	if s == "" && min > 0 {
		return "must not be empty"
	}
	if n := utf8.RuneCountInString(s); n < min || (max > 0 && n > max) {
		return fmt.Sprintf("must have %d to %d characters (has %d)", min, max, n)
	}
	return ""
}

// length checks that s has min..max code points.
func (c *checker) length(path, s string, min, max int) {
	if p := lengthProblem(s, min, max); p != "" {
		c.add(path, p)
	}
}

// count checks the number of elements of an array.
func (c *checker) count(path string, n, min, max int, what string) {
	if n < min || n > max {
		c.add(path, fmt.Sprintf("must have %d to %d %s (has %d)", min, max, what, n))
	}
}

// distinctStrings reads an array of strings of minLen..maxLen code points
// (maxLen 0: no upper limit) that must all differ.
func (c *checker) distinctStrings(path string, items []jsontext.Value, minLen, maxLen int) []string {
	out := make([]string, len(items))
	isString := make([]bool, len(items))
	for i, item := range items {
		s, problem := stringValue(item)
		if problem == "" {
			out[i], isString[i] = s, true
			problem = lengthProblem(s, minLen, maxLen)
		}
		if problem != "" {
			c.add(index(path, i), problem)
		}
	}
	c.duplicates(path, out, isString)
	return out
}

// duplicates reports every string of values equal to an earlier one, in
// index order; only the elements that were strings take part. It sorts
// indices rather than filling a map: cheaper for lists this short.
func (c *checker) duplicates(path string, values []string, isString []bool) {
	idx := make([]int, 0, len(values))
	for i := range values {
		if isString[i] {
			idx = append(idx, i)
		}
	}
	slices.SortStableFunc(idx, func(a, b int) int { return strings.Compare(values[a], values[b]) })
	var dups [][2]int // {index, index of its first occurrence}
	first := -1
	for k, i := range idx {
		if k == 0 || values[i] != values[idx[k-1]] {
			first = i // stable: the first of a run is the lowest index
			continue
		}
		dups = append(dups, [2]int{i, first})
	}
	slices.SortFunc(dups, func(a, b [2]int) int { return a[0] - b[0] })
	for _, d := range dups {
		c.add(index(path, d[0]), "repeats "+index(path, d[1])+"; values must be distinct")
	}
}

// frameSet reads element i of sets.
func (c *checker) frameSet(setsPath string, i int, v jsontext.Value) FrameSet {
	var fs FrameSet
	path := index(setsPath, i)
	if v.Kind() != '{' {
		c.add(path, typeProblem("an object", v))
		return fs
	}
	m := c.object(path, v, []string{"collection", "frames"})
	if s, ok := c.requiredString(join(path, "collection"), m.get("collection")); ok {
		c.length(join(path, "collection"), s, 1, MaxCollectionLen)
		fs.Collection = s
	}
	framesPath := join(path, "frames")
	if items, ok := c.array(framesPath, m.get("frames"), true); ok {
		c.count(framesPath, len(items), 1, MaxFrames, "frames")
		fs.Frames = c.distinctStrings(framesPath, items, 1, MaxFrameLen)
	}
	return fs
}

// integer reads an optional integer member in min..max. Absent or null gives
// ok false with no error. A JSON number counts as an integer when its value
// as a double is one, so 3, 3.0 and 3e0 are all 3: RFC 8785 writes each as 3,
// and validity, like the fingerprint, depends only on the canonical form.
func (c *checker) integer(path string, v jsontext.Value, min, max int64) (int64, bool) {
	if absent(v) {
		return 0, false
	}
	if v.Kind() != '0' {
		c.add(path, typeProblem("an integer", v))
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || f != math.Trunc(f) || f < float64(min) || f > float64(max) {
		c.add(path, fmt.Sprintf("must be an integer from %d to %d", min, max))
		return 0, false
	}
	return int64(f), true
}

// params reads the optional params object and returns its canonical form.
func (c *checker) params(path string, v jsontext.Value) (jsontext.Value, bool) {
	if absent(v) {
		return nil, false
	}
	if v.Kind() != '{' {
		c.add(path, typeProblem("an object", v))
		return nil, false
	}
	canon, err := Canonicalize(v)
	switch {
	case errors.Is(err, errNumberRange):
		c.add(path, "has a number beyond the range of a double")
		return nil, false
	case err != nil:
		c.add(path, "is not valid I-JSON")
		return nil, false
	case len(canon) > MaxParamsBytes:
		c.add(path, fmt.Sprintf("must be at most %d bytes as canonical JSON (is %d)", MaxParamsBytes, len(canon)))
		return nil, false
	}
	return canon, true
}

// uuid checks a UUID in its 36-character form and returns it in lowercase.
func (c *checker) uuid(path, s string) string {
	u, err := uuid.Parse(s)
	if err != nil || len(s) != 36 {
		c.add(path, "must be a UUID like 0192f0c1-7a3b-7c4d-8e5f-0123456789ab")
		return s
	}
	return u.String()
}
