// Package planner turns a normalized generation input into its tasks.
//
// It asks two ports, Catalog (which generators exist, what the auto route
// expands to) and Visibility (which subjects an actor may use); both may be
// remote, so the planner runs outside any transaction. Static is the
// embedded implementation of both, read from one catalog document: the
// embedded one (EmbeddedCatalog) or a file (LoadCatalog).
//
// A plan refuses with an *intent.Error of code EUnprocessable (422) what it
// cannot plan: a provider that is neither a generator nor a route of the
// catalog, a subject the actor may not use, params the generators refuse,
// and more tasks than the limit. Everything else about the input was
// checked before (400) by the intent package.
package planner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"studio/generator"
	"studio/intent"
)

// DefaultMaxTasks is the task limit of one batch when none is set.
const DefaultMaxTasks = 600

// Planner implements intent.Planner over a Catalog and a Visibility. It
// holds no mutable state: any number of plans may run at once.
type Planner struct {
	Catalog    Catalog
	Visibility Visibility
	// MaxTasks is the most tasks one batch may have; DefaultMaxTasks when 0.
	MaxTasks int
}

var _ intent.Planner = (*Planner)(nil)

// New returns a planner over one catalog that is also its visibility (as
// Static is), with the default task limit.
func New(c interface {
	Catalog
	Visibility
}) *Planner {
	return &Planner{Catalog: c, Visibility: c}
}

// PlanGeneration implements intent.Planner. It resolves the providers
// ("auto", or any route, expands to its generators; the order is kept and a
// generator named twice is planned once), checks params with the resolved
// generators' kinds and subjects with Visibility, and reports every field
// at fault in one 422. It then counts the tasks, sum over sets of
// len(frames) x len(providers) x candidates, and refuses more than MaxTasks
// before allocating any. Tasks come in order: set, frame, provider,
// candidate 1..N.
func (p *Planner) PlanGeneration(ctx context.Context, actor string, in *intent.GenerationInput) ([]intent.PlannedTask, error) {
	if in == nil {
		return nil, errors.New("plan generation: nil input")
	}
	var fields []intent.FieldError

	providers, kinds, gens, bad, err := p.resolve(ctx, in.Providers)
	if err != nil {
		return nil, err
	}
	fields = append(fields, bad...)

	for _, kind := range kinds {
		err := generator.ValidateParams(kind, in.Params)
		if err == nil {
			continue
		}
		pf := intent.ErrorFields(err)
		if intent.ErrorCode(err) != intent.EUnprocessable || len(pf) == 0 {
			return nil, fmt.Errorf("plan generation: check params: %w", err)
		}
		for _, f := range pf {
			if !slices.Contains(fields, f) {
				fields = append(fields, f)
			}
		}
	}

	for _, f := range checkSizes(gens, providers, in.Params) {
		if !slices.Contains(fields, f) {
			fields = append(fields, f)
		}
	}

	if len(in.Subjects) > 0 {
		visible, err := p.Visibility.Visible(ctx, actor, in.Subjects)
		if err != nil {
			return nil, fmt.Errorf("plan generation: visibility: %w", err)
		}
		if len(visible) != len(in.Subjects) {
			return nil, fmt.Errorf("plan generation: visibility answered %d of %d subjects", len(visible), len(in.Subjects))
		}
		for i, ok := range visible {
			if !ok {
				fields = append(fields, intent.FieldError{
					Field:   fmt.Sprintf("subjects[%d]", i),
					Message: fmt.Sprintf("subject %q does not exist or is not visible to this actor", in.Subjects[i]),
				})
			}
		}
	}

	if len(fields) > 0 {
		return nil, intent.FieldsError(intent.EUnprocessable,
			fmt.Sprintf("The request cannot be planned: %d problems (see errors).", len(fields)), fields)
	}

	limit := p.Limit()
	n := CountTasks(in.Sets, len(providers), in.Candidates)
	switch {
	case n > limit:
		return nil, intent.Errorf(intent.EUnprocessable, "The plan has %d tasks; the limit is %d.", n, limit)
	case n == 0:
		return nil, intent.Errorf(intent.EUnprocessable, "The plan has no tasks.")
	}

	tasks := make([]intent.PlannedTask, 0, n)
	for _, set := range in.Sets {
		for _, frame := range set.Frames {
			for _, gen := range providers {
				for c := 1; c <= in.Candidates; c++ {
					tasks = append(tasks, intent.PlannedTask{Collection: set.Collection, Frame: frame, Generator: gen, Candidate: c})
				}
			}
		}
	}
	return tasks, nil
}

// checkSizes refuses a size that a resolved generator with a list of
// sizes does not take (the OpenAI models take a few): one field error,
// naming the field and the sizes allowed, per such generator.
func checkSizes(gens []GeneratorInfo, ids []string, params jsontext.Value) []intent.FieldError {
	var out []intent.FieldError
	for _, g := range gens {
		if len(g.Sizes) == 0 || !slices.Contains(ids, g.ID) {
			continue
		}
		size, err := generator.RequestSize(params, g.DefaultSize)
		if err != nil || size == "" || slices.Contains(g.Sizes, size) {
			continue // bad params are ValidateParams' to report
		}
		field := "params.width"
		if !hasMember(params, "width") {
			field = "params.height"
		}
		out = append(out, intent.FieldError{Field: field, Message: fmt.Sprintf(
			"generator %q takes only the sizes %s, not %s (a catalog gives \"sizes\": [\"any\"] to a server that takes any size)",
			g.ID, strings.Join(g.Sizes, ", "), size)})
	}
	return out
}

// hasMember reports whether the params object has the member.
func hasMember(params jsontext.Value, name string) bool {
	var m map[string]jsontext.Value
	if json.Unmarshal(params, &m) != nil {
		return false
	}
	_, ok := m[name]
	return ok
}

// resolve turns provider names into generator ids, with the kinds among
// them in order of first use, the catalog's generators, and a field error
// for each name the catalog does not know.
func (p *Planner) resolve(ctx context.Context, names []string) (ids, kinds []string, gens []GeneratorInfo, bad []intent.FieldError, err error) {
	gens, err = p.Catalog.Generators(ctx)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("plan generation: catalog: %w", err)
	}
	kindOf := make(map[string]string, len(gens))
	for _, g := range gens {
		kindOf[g.ID] = g.Kind
	}
	add := func(id string) {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
		if k := kindOf[id]; !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	for i, name := range names {
		if _, ok := kindOf[name]; ok {
			add(name)
			continue
		}
		route, ok, err := p.Catalog.Route(ctx, name)
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("plan generation: catalog route %q: %w", name, err)
		}
		if !ok {
			bad = append(bad, intent.FieldError{
				Field:   fmt.Sprintf("providers[%d]", i),
				Message: fmt.Sprintf("no generator or route %q in the catalog", name),
			})
			continue
		}
		for _, id := range route {
			if _, ok := kindOf[id]; !ok {
				return nil, nil, nil, nil, fmt.Errorf("plan generation: route %q names generator %q, which the catalog lacks", name, id)
			}
			add(id)
		}
	}
	return ids, kinds, gens, bad, nil
}

// Limit is the most tasks one plan may have: MaxTasks, or
// DefaultMaxTasks when it is not set.
func (p *Planner) Limit() int {
	if p.MaxTasks > 0 {
		return p.MaxTasks
	}
	return DefaultMaxTasks
}

// CountTasks is the number of tasks of a plan: the sum over sets of
// len(frames) x providers x candidates. It saturates at math.MaxInt
// instead of overflowing.
func CountTasks(sets []intent.FrameSet, providers, candidates int) int {
	if providers <= 0 || candidates <= 0 {
		return 0
	}
	per := providers
	if candidates > math.MaxInt/per {
		return math.MaxInt
	}
	per *= candidates
	total := 0
	for _, s := range sets {
		f := len(s.Frames)
		if f > 0 && per > (math.MaxInt-total)/f {
			return math.MaxInt
		}
		total += f * per
	}
	return total
}
