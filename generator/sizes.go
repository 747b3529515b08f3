package generator

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// SizeAny, as the only member of a spec's sizes, says the server takes any
// size (an OpenAI-compatible local server): studio checks none.
const SizeAny = "any"

// What to do with an image whose size is not the one asked, a spec's
// size_mismatch.
const (
	// SizeMismatchWarn keeps it, with a line in the task's history and
	// a warning in the log (the default).
	SizeMismatchWarn = "warn"
	// SizeMismatchRefuse throws it away and fails the task.
	SizeMismatchRefuse = "refuse"
)

// openAIModelSizes are the sizes the OpenAI Images API takes per model,
// from the API reference of "Create image" (size: "one of 1024x1024,
// 1536x1024 (landscape), 1024x1536 (portrait), or auto for the GPT image
// models, one of 256x256, 512x512, or 1024x1024 for dall-e-2, and one of
// 1024x1024, 1792x1024, or 1024x1792 for dall-e-3").
var openAIModelSizes = map[string][]string{
	"gpt-image-1":      {"1024x1024", "1536x1024", "1024x1536"},
	"gpt-image-1-mini": {"1024x1024", "1536x1024", "1024x1536"},
	"dall-e-2":         {"256x256", "512x512", "1024x1024"},
	"dall-e-3":         {"1024x1024", "1792x1024", "1024x1792"},
}

// AllowedSizes answers the sizes ("WxH") a generator of the spec takes,
// nil when it takes any: the spec's sizes when set (["any"]: any), else,
// for the openai kind, the known model's sizes. Other kinds take any.
func (s Spec) AllowedSizes() []string {
	switch {
	case len(s.Sizes) == 1 && s.Sizes[0] == SizeAny:
		return nil
	case len(s.Sizes) > 0:
		return slices.Clone(s.Sizes)
	case s.Kind == KindOpenAI:
		return slices.Clone(openAIModelSizes[s.Model])
	}
	return nil
}

// DefaultSize is the size a task of the spec asks for when its params
// name none: the openai kind's size, "" for the other kinds (their own).
func (s Spec) DefaultSize() string {
	if s.Kind != KindOpenAI {
		return ""
	}
	if s.Size != "" {
		return s.Size
	}
	return DefaultOpenAISize
}

// checkSizes checks a spec's sizes and size_mismatch members.
func checkSizes(s Spec) error {
	for _, size := range s.Sizes {
		if size == SizeAny {
			if len(s.Sizes) != 1 {
				return fmt.Errorf("generator %q: sizes: %q stands alone", s.ID, SizeAny)
			}
			continue
		}
		if _, _, ok := parseSize(size); !ok {
			return fmt.Errorf("generator %q: sizes: %q is not like \"1024x1024\" (%d to %d a side)", s.ID, size, MinSize, MaxSize)
		}
	}
	if allowed := s.AllowedSizes(); allowed != nil && s.DefaultSize() != "" && !slices.Contains(allowed, s.DefaultSize()) {
		return fmt.Errorf("generator %q: size %s is not one the model takes (%s); set \"sizes\" in the catalog for a server that takes it",
			s.ID, s.DefaultSize(), strings.Join(allowed, ", "))
	}
	switch s.SizeMismatch {
	case "", SizeMismatchWarn, SizeMismatchRefuse:
	default:
		return fmt.Errorf("generator %q: size_mismatch must be %q or %q", s.ID, SizeMismatchWarn, SizeMismatchRefuse)
	}
	return nil
}

// parseSize reads "WxH" with both sides in MinSize..MaxSize.
func parseSize(s string) (int, int, bool) {
	ws, hs, ok := strings.Cut(s, "x")
	if !ok {
		return 0, 0, false
	}
	w, err1 := strconv.Atoi(ws)
	h, err2 := strconv.Atoi(hs)
	if err1 != nil || err2 != nil || w < MinSize || h < MinSize || w > MaxSize || h > MaxSize {
		return 0, 0, false
	}
	return w, h, true
}

// RequestSize is the size ("WxH") a task with these params asks for:
// params.width x params.height (one alone makes a square), else def. Its
// error is the params' (checked before by ValidateParams).
func RequestSize(params jsontext.Value, def string) (string, error) {
	return requestSize(params, def)
}

// SizeRefuser is a generator that says what to do with an image of
// another size than the one asked (a catalog's size_mismatch).
type SizeRefuser interface {
	// RefusesOtherSizes reports whether such an image is thrown away
	// and the task failed, instead of kept with a warning.
	RefusesOtherSizes() bool
}
