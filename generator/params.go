package generator

import (
	"bytes"
	"fmt"
	"math"
	"strconv"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"studio/intent"
)

// Limits and defaults of the embedded generators' params.
const (
	DefaultSize     = 256
	MinSize         = 16
	MaxSize         = 2048
	MaxDelayMS      = 60000
	MaxFailAttempts = 10
)

// Params are the params the embedded generators understand. Other members
// of the params object are allowed; they change the picture (they are part
// of what it is rendered from) but mean nothing else.
type Params struct {
	Width  int
	Height int
	// DelayMS is how long Wait takes per task, like a slow provider.
	DelayMS int
	// FailAttempts is how many first attempts of each task fail at Submit
	// with a transient error.
	FailAttempts int
}

// paramRule is the range of one integer param.
type paramRule struct {
	name     string
	min, max int
	def      int
	set      func(*Params, int)
}

var paramRules = []paramRule{
	{"width", MinSize, MaxSize, DefaultSize, func(p *Params, v int) { p.Width = v }},
	{"height", MinSize, MaxSize, DefaultSize, func(p *Params, v int) { p.Height = v }},
	{"delay_ms", 0, MaxDelayMS, 0, func(p *Params, v int) { p.DelayMS = v }},
	{"fail_attempts", 0, MaxFailAttempts, 0, func(p *Params, v int) { p.FailAttempts = v }},
}

// ParseParams reads the embedded generators' params from a params object
// (nil or empty means {}). A value out of its range, or not an integer, is
// an *intent.Error with code EUnprocessable and one field error per bad
// member, named "params.width" and so on.
func ParseParams(raw jsontext.Value) (Params, error) {
	members, err := decodeObject(raw)
	if err != nil {
		return Params{}, err
	}
	var p Params
	var fields []intent.FieldError
	for _, r := range paramRules {
		v := r.def
		if m, ok := members[r.name]; ok {
			n, ok := intValue(m)
			if !ok || n < r.min || n > r.max {
				fields = append(fields, intent.FieldError{
					Field:   "params." + r.name,
					Message: fmt.Sprintf("must be an integer from %d to %d", r.min, r.max),
				})
				continue
			}
			v = n
		}
		r.set(&p, v)
	}
	if len(fields) > 0 {
		return Params{}, intent.FieldsError(intent.EUnprocessable, fmt.Sprintf("%d params are out of range.", len(fields)), fields)
	}
	return p, nil
}

// ValidateParams checks params for the generators of a kind; it returns what
// ParseParams returns for embedded ones. The remote kinds read width and
// height only (the same rule); the other members go to prompt_template.
func ValidateParams(kind string, raw jsontext.Value) error {
	switch kind {
	case KindEmbedded:
		_, err := ParseParams(raw)
		return err
	case KindOpenAI, KindComfyUI:
		members, err := decodeObject(raw)
		if err != nil {
			return err
		}
		sized := jsontext.Value("{}")
		if len(members) > 0 {
			keep := map[string]jsontext.Value{}
			for _, k := range []string{"width", "height"} {
				if v, ok := members[k]; ok {
					keep[k] = v
				}
			}
			if sized, err = json.Marshal(keep); err != nil {
				return fmt.Errorf("validate params: %w", err)
			}
		}
		_, err = ParseParams(sized)
		return err
	default:
		return fmt.Errorf("validate params: unknown generator kind %q", kind)
	}
}

// decodeObject splits a params object into its members.
func decodeObject(raw jsontext.Value) (map[string]jsontext.Value, error) {
	members := map[string]jsontext.Value{}
	if len(raw) == 0 {
		return members, nil
	}
	if err := json.Unmarshal(raw, &members); err != nil {
		return nil, &intent.Error{Code: intent.EUnprocessable, Message: "params must be a JSON object.",
			Fields: []intent.FieldError{{Field: "params", Message: "must be a JSON object"}}}
	}
	return members, nil
}

// intValue reads a JSON number that is an integer (64, 64.0 and 6.4e1 alike).
func intValue(v jsontext.Value) (int, bool) {
	v = bytes.TrimSpace(v)
	if v.Kind() != '0' {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int(f), true
}
