package planner

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"go.uber.org/goleak"

	"studio/intent"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// frames returns n frame labels f01, f02, ...
func frames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("f%02d", i+1)
	}
	return out
}

func input(sets []intent.FrameSet, providers []string, candidates int) *intent.GenerationInput {
	return &intent.GenerationInput{
		Prompt: "a knight in the rain", Sets: sets, Providers: providers,
		Candidates: candidates, Subjects: []string{}, Params: jsontext.Value(`{}`),
	}
}

func embedded() *Planner { return New(EmbeddedCatalog()) }

// mustRefuse checks that err is a 422 and returns its fields.
func mustRefuse(t *testing.T, err error) []intent.FieldError {
	t.Helper()
	if intent.ErrorCode(err) != intent.EUnprocessable {
		t.Fatalf("err = %v, want code %s", err, intent.EUnprocessable)
	}
	return intent.ErrorFields(err)
}

func TestContractExamples(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	big := input([]intent.FrameSet{{Collection: "walk", Frames: frames(15)}, {Collection: "run", Frames: frames(15)}}, []string{"sketch", "mosaic"}, 5)
	tasks, err := embedded().PlanGeneration(ctx, "local", big)
	if err != nil || len(tasks) != 300 {
		t.Fatalf("2 sets x 15 frames x 2 providers x 5 candidates: %d tasks, %v; want 300", len(tasks), err)
	}
	small := input([]intent.FrameSet{{Collection: "walk", Frames: frames(2)}}, []string{"auto"}, 3)
	tasks, err = embedded().PlanGeneration(ctx, "local", small)
	if err != nil || len(tasks) != 12 {
		t.Fatalf("1 set x 2 frames x auto x 3 candidates: %d tasks, %v; want 12", len(tasks), err)
	}
	// Every task is distinct.
	seen := map[intent.PlannedTask]bool{}
	for _, task := range tasks {
		if seen[task] {
			t.Fatalf("task %+v planned twice", task)
		}
		seen[task] = true
	}
}

func TestTaskLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Ten sets of 60 frames and one of 1: 601 tasks with one provider and
	// one candidate.
	sets := make([]intent.FrameSet, 11)
	for i := range 10 {
		sets[i] = intent.FrameSet{Collection: fmt.Sprint("c", i), Frames: frames(60)}
	}
	sets[10] = intent.FrameSet{Collection: "last", Frames: frames(1)}
	_, err := embedded().PlanGeneration(ctx, "local", input(sets, []string{"sketch"}, 1))
	mustRefuse(t, err)
	if got, want := intent.ErrorMessage(err), "The plan has 601 tasks; the limit is 600."; got != want {
		t.Fatalf("message = %q, want %q", got, want)
	}
	tasks, err := embedded().PlanGeneration(ctx, "local", input(sets[:10], []string{"sketch"}, 1))
	if err != nil || len(tasks) != 600 {
		t.Fatalf("600 tasks: %d, %v", len(tasks), err)
	}

	p := embedded()
	p.MaxTasks = 12
	small := input([]intent.FrameSet{{Collection: "walk", Frames: frames(2)}}, []string{"auto"}, 3)
	if tasks, err := p.PlanGeneration(ctx, "local", small); err != nil || len(tasks) != 12 {
		t.Fatalf("12 tasks under a limit of 12: %d, %v", len(tasks), err)
	}
	p.MaxTasks = 11
	_, err = p.PlanGeneration(ctx, "local", small)
	mustRefuse(t, err)
	if got := intent.ErrorMessage(err); got != "The plan has 12 tasks; the limit is 11." {
		t.Fatalf("message = %q", got)
	}
}

// wideCatalog has eight embedded-kind generators, for the largest plans.
type wideCatalog struct{}

func (wideCatalog) Generators(context.Context) ([]GeneratorInfo, error) {
	var out []GeneratorInfo
	for i := range 8 {
		out = append(out, GeneratorInfo{ID: fmt.Sprint("g", i), Kind: "embedded"})
	}
	return out, nil
}

func (wideCatalog) Route(context.Context, string) ([]string, bool, error) { return nil, false, nil }

// TestHugePlanRefusedCheaply: the largest input the 400 rules allow (20 sets
// x 60 frames x 8 providers x 10 candidates = 96000 tasks) is refused without
// allocating its tasks.
func TestHugePlanRefusedCheaply(t *testing.T) {
	ctx := context.Background()
	sets := make([]intent.FrameSet, 20)
	for i := range sets {
		sets[i] = intent.FrameSet{Collection: fmt.Sprint("c", i), Frames: frames(60)}
	}
	var providers []string
	for i := range 8 {
		providers = append(providers, fmt.Sprint("g", i))
	}
	in := input(sets, providers, 10)
	p := &Planner{Catalog: wideCatalog{}, Visibility: EmbeddedCatalog()}
	var err error
	allocs := testing.AllocsPerRun(20, func() { _, err = p.PlanGeneration(ctx, "local", in) })
	mustRefuse(t, err)
	if got := intent.ErrorMessage(err); got != "The plan has 96000 tasks; the limit is 600." {
		t.Fatalf("message = %q", got)
	}
	// A plan of 96000 tasks would allocate them in one slice of ~5 MB; the
	// refusal allocates a few small things whatever the size.
	if allocs > 40 {
		t.Fatalf("refusal made %v allocations", allocs)
	}
}

func TestCountTasks(t *testing.T) {
	t.Parallel()
	sets := []intent.FrameSet{{Frames: frames(15)}, {Frames: frames(15)}}
	cases := []struct {
		sets                  []intent.FrameSet
		providers, candidates int
		want                  int
	}{
		{sets, 2, 5, 300},
		{sets[:1], 2, 5, 150},
		{[]intent.FrameSet{{Frames: frames(2)}}, 2, 3, 12},
		{nil, 2, 3, 0},
		{sets, 0, 3, 0},
		{sets, 2, 0, 0},
		{sets, 1 << 62, 4, int(^uint(0) >> 1)},
		{sets, 1 << 30, 1 << 30, int(^uint(0) >> 1)},
	}
	for _, c := range cases {
		if got := CountTasks(c.sets, c.providers, c.candidates); got != c.want {
			t.Errorf("CountTasks(%d sets, %d, %d) = %d, want %d", len(c.sets), c.providers, c.candidates, got, c.want)
		}
	}
}

func TestProviders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	custom, err := ParseCatalog([]byte(`{
		"generators":[{"id":"sketch","kind":"embedded"},{"id":"mosaic","kind":"embedded"},{"id":"noop","kind":"embedded"}],
		"routes":{"auto":["mosaic","sketch"],"bench":["noop"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		catalog   *Static
		providers []string
		want      []string
	}{
		{EmbeddedCatalog(), []string{"auto"}, []string{"sketch", "mosaic"}},
		{EmbeddedCatalog(), []string{"mosaic", "auto"}, []string{"mosaic", "sketch"}},
		{EmbeddedCatalog(), []string{"auto", "sketch"}, []string{"sketch", "mosaic"}},
		{EmbeddedCatalog(), []string{"mosaic"}, []string{"mosaic"}},
		{EmbeddedCatalog(), []string{"mosaic", "sketch"}, []string{"mosaic", "sketch"}},
		{custom, []string{"auto"}, []string{"mosaic", "sketch"}},
		{custom, []string{"bench", "auto"}, []string{"noop", "mosaic", "sketch"}},
	}
	for _, c := range cases {
		in := input([]intent.FrameSet{{Collection: "c", Frames: frames(1)}}, c.providers, 1)
		tasks, err := New(c.catalog).PlanGeneration(ctx, "local", in)
		if err != nil {
			t.Errorf("%v: %v", c.providers, err)
			continue
		}
		var got []string
		for _, task := range tasks {
			got = append(got, task.Generator)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%v resolved to %v, want %v", c.providers, got, c.want)
		}
	}
}

func TestUnknownGenerator(t *testing.T) {
	t.Parallel()
	in := input([]intent.FrameSet{{Collection: "c", Frames: frames(1)}}, []string{"sketch", "watercolour"}, 1)
	_, err := embedded().PlanGeneration(context.Background(), "local", in)
	fields := mustRefuse(t, err)
	want := []intent.FieldError{{Field: "providers[1]", Message: `no generator or route "watercolour" in the catalog`}}
	if !slices.Equal(fields, want) {
		t.Fatalf("fields = %+v, want %+v", fields, want)
	}
	if got := intent.ErrorMessage(err); got != `providers[1]: no generator or route "watercolour" in the catalog.` {
		t.Fatalf("message = %q", got)
	}
}

func TestSubjects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	file, err := LoadCatalog(filepath.Join("testdata", "catalog-example.json"))
	if err != nil {
		t.Fatal(err)
	}
	plan := func(c *Static, actor string, subjects ...string) error {
		in := input([]intent.FrameSet{{Collection: "c", Frames: frames(1)}}, []string{"auto"}, 1)
		in.Subjects = subjects
		_, err := New(c).PlanGeneration(ctx, actor, in)
		return err
	}
	if err := plan(EmbeddedCatalog(), "anyone", "knight", "robot", "cat"); err != nil {
		t.Errorf("public subjects: %v", err)
	}
	if err := plan(file, "alice", "knight", "ghost"); err != nil {
		t.Errorf("ghost for alice: %v", err)
	}
	fields := mustRefuse(t, plan(EmbeddedCatalog(), "local", "knight", "dragon"))
	if len(fields) != 1 || fields[0].Field != "subjects[1]" {
		t.Fatalf("fields = %+v", fields)
	}

	// Another actor's private subject answers exactly as one that does not
	// exist: the answer does not tell whether it exists.
	private := mustRefuse(t, plan(file, "bob", "knight", "ghost"))
	unknown := mustRefuse(t, plan(file, "bob", "knight", "ghosx"))
	if len(private) != 1 || len(unknown) != 1 || private[0].Field != "subjects[1]" ||
		private[0].Message != strings.ReplaceAll(unknown[0].Message, "ghosx", "ghost") {
		t.Fatalf("private %+v and unknown %+v differ", private, unknown)
	}
}

func TestParams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		params string
		fields []string
	}{
		{`{}`, nil},
		{`{"height":2048,"width":16}`, nil},
		{`{"delay_ms":60000,"fail_attempts":10,"style":"any"}`, nil},
		{`{"width":15}`, []string{"params.width"}},
		{`{"height":2049}`, []string{"params.height"}},
		{`{"width":"256"}`, []string{"params.width"}},
		{`{"delay_ms":60001}`, []string{"params.delay_ms"}},
		{`{"fail_attempts":11}`, []string{"params.fail_attempts"}},
		{`{"fail_attempts":-1,"height":1.5}`, []string{"params.height", "params.fail_attempts"}},
	}
	for _, c := range cases {
		in := input([]intent.FrameSet{{Collection: "c", Frames: frames(1)}}, []string{"auto"}, 1)
		in.Params = jsontext.Value(c.params)
		_, err := embedded().PlanGeneration(ctx, "local", in)
		if c.fields == nil {
			if err != nil {
				t.Errorf("%s: %v", c.params, err)
			}
			continue
		}
		var got []string
		for _, f := range mustRefuse(t, err) {
			got = append(got, f.Field)
		}
		if !slices.Equal(got, c.fields) {
			t.Errorf("%s: fields %v, want %v", c.params, got, c.fields)
		}
	}
}

func TestEveryProblemInOneAnswer(t *testing.T) {
	t.Parallel()
	in := input([]intent.FrameSet{{Collection: "c", Frames: frames(1)}}, []string{"oil", "auto", "ink"}, 1)
	in.Subjects = []string{"dragon", "cat"}
	in.Params = jsontext.Value(`{"width":4}`)
	_, err := embedded().PlanGeneration(context.Background(), "local", in)
	var got []string
	for _, f := range mustRefuse(t, err) {
		got = append(got, f.Field)
	}
	if want := []string{"providers[0]", "providers[2]", "params.width", "subjects[0]"}; !slices.Equal(got, want) {
		t.Fatalf("fields %v, want %v", got, want)
	}
	if got := intent.ErrorMessage(err); got != "The request cannot be planned: 4 problems (see errors)." {
		t.Fatalf("message = %q", got)
	}
}

// countingCatalog wraps a catalog and visibility and counts the calls, as
// a test of the intent service would.
type countingCatalog struct {
	*Static
	generators, routes, visible atomic.Int64
}

func (c *countingCatalog) Generators(ctx context.Context) ([]GeneratorInfo, error) {
	c.generators.Add(1)
	return c.Static.Generators(ctx)
}

func (c *countingCatalog) Route(ctx context.Context, name string) ([]string, bool, error) {
	c.routes.Add(1)
	return c.Static.Route(ctx, name)
}

func (c *countingCatalog) Visible(ctx context.Context, actor string, subjects []string) ([]bool, error) {
	c.visible.Add(1)
	return c.Static.Visible(ctx, actor, subjects)
}

func TestPortCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := &countingCatalog{Static: EmbeddedCatalog()}
	p := New(c)
	in := input([]intent.FrameSet{{Collection: "c", Frames: frames(2)}}, []string{"sketch", "mosaic"}, 1)
	if _, err := p.PlanGeneration(ctx, "local", in); err != nil {
		t.Fatal(err)
	}
	if g, r, v := c.generators.Load(), c.routes.Load(), c.visible.Load(); g != 1 || r != 0 || v != 0 {
		t.Fatalf("explicit providers, no subjects: %d Generators, %d Route, %d Visible calls; want 1, 0, 0", g, r, v)
	}
	in.Providers = []string{"auto"}
	in.Subjects = []string{"cat", "robot"}
	if _, err := p.PlanGeneration(ctx, "local", in); err != nil {
		t.Fatal(err)
	}
	if g, r, v := c.generators.Load(), c.routes.Load(), c.visible.Load(); g != 2 || r != 1 || v != 1 {
		t.Fatalf("after a second plan with auto and subjects: %d, %d, %d calls; want 2, 1, 1", g, r, v)
	}
}

// gateCatalog lets no Generators call return until n of them are inside at
// once: if plans ran one after another, the test would never end.
type gateCatalog struct {
	*Static
	mu     sync.Mutex
	inside int
	n      int
	open   chan struct{}
}

func (c *gateCatalog) Generators(ctx context.Context) ([]GeneratorInfo, error) {
	c.mu.Lock()
	c.inside++
	if c.inside == c.n {
		close(c.open)
	}
	c.mu.Unlock()
	select {
	case <-c.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return c.Static.Generators(ctx)
}

func TestPlansRunInParallel(t *testing.T) {
	t.Parallel()
	const n = 16
	c := &gateCatalog{Static: EmbeddedCatalog(), n: n, open: make(chan struct{})}
	p := &Planner{Catalog: c, Visibility: c.Static}
	var wg sync.WaitGroup
	errs := make([]error, n)
	counts := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := input([]intent.FrameSet{{Collection: "c", Frames: frames(i + 1)}}, []string{"auto"}, 1)
			tasks, err := p.PlanGeneration(context.Background(), "local", in)
			errs[i], counts[i] = err, len(tasks)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || counts[i] != 2*(i+1) {
			t.Errorf("plan %d: %d tasks, %v", i, counts[i], errs[i])
		}
	}
}

// failingCatalog is a catalog that is down.
type failingCatalog struct{ err error }

func (c failingCatalog) Generators(context.Context) ([]GeneratorInfo, error) { return nil, c.err }
func (c failingCatalog) Route(context.Context, string) ([]string, bool, error) {
	return nil, false, c.err
}
func (c failingCatalog) Visible(context.Context, string, []string) ([]bool, error) {
	return nil, c.err
}

// shortVisibility answers fewer subjects than asked.
type shortVisibility struct{}

func (shortVisibility) Visible(context.Context, string, []string) ([]bool, error) {
	return []bool{true}, nil
}

// brokenRoute names a generator its catalog lacks.
type brokenRoute struct{ *Static }

func (brokenRoute) Route(context.Context, string) ([]string, bool, error) {
	return []string{"ghost"}, true, nil
}

func TestPortFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	down := errors.New("catalog unreachable")
	in := input([]intent.FrameSet{{Collection: "c", Frames: frames(1)}}, []string{"auto"}, 1)
	in.Subjects = []string{"cat", "knight"}
	cases := map[string]*Planner{
		"catalog down":         {Catalog: failingCatalog{down}, Visibility: EmbeddedCatalog()},
		"visibility down":      {Catalog: EmbeddedCatalog(), Visibility: failingCatalog{down}},
		"visibility too short": {Catalog: EmbeddedCatalog(), Visibility: shortVisibility{}},
		"broken route":         {Catalog: brokenRoute{EmbeddedCatalog()}, Visibility: EmbeddedCatalog()},
	}
	for name, p := range cases {
		_, err := p.PlanGeneration(ctx, "local", in)
		if err == nil || intent.ErrorCode(err) != intent.EInternal {
			t.Errorf("%s: err = %v, want an internal error", name, err)
		}
		if strings.HasSuffix(name, "down") && !errors.Is(err, down) {
			t.Errorf("%s: err = %v does not wrap the port's error", name, err)
		}
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	gate := &gateCatalog{Static: EmbeddedCatalog(), n: 2, open: make(chan struct{})}
	if _, err := (&Planner{Catalog: gate, Visibility: gate.Static}).PlanGeneration(canceled, "local", in); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled plan: %v", err)
	}
}

// goldenCase is one testdata/*.input.json: a plan to make and, optionally,
// a catalog file to make it with.
type goldenCase struct {
	Actor   string                 `json:"actor"`
	Catalog string                 `json:"catalog,omitempty"`
	Input   intent.GenerationInput `json:"input"`
}

// TestGoldenPlans plans every testdata/NAME.input.json and compares the
// tasks, or the refusal, with testdata/NAME.golden (-update rewrites them).
func TestGoldenPlans(t *testing.T) {
	t.Parallel()
	inputs, err := filepath.Glob(filepath.Join("testdata", "*.input.json"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, path := range inputs {
		name := strings.TrimSuffix(filepath.Base(path), ".input.json")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var c goldenCase
			if err := json.Unmarshal(data, &c, json.RejectUnknownMembers(true)); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			cat := EmbeddedCatalog()
			if c.Catalog != "" {
				if cat, err = LoadCatalog(filepath.Join("testdata", c.Catalog)); err != nil {
					t.Fatal(err)
				}
			}
			tasks, err := New(cat).PlanGeneration(context.Background(), c.Actor, &c.Input)
			got := renderPlan(tasks, err)
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("plan differs from %s:\n got:\n%s\nwant:\n%s", golden, got, want)
			}
		})
	}
}

// renderPlan writes a plan one task a line, or a refusal with its fields.
func renderPlan(tasks []intent.PlannedTask, err error) string {
	var b strings.Builder
	if err != nil {
		fmt.Fprintf(&b, "refused %s: %s\n", intent.ErrorCode(err), intent.ErrorMessage(err))
		for _, f := range intent.ErrorFields(err) {
			fmt.Fprintf(&b, "  %s: %s\n", f.Field, f.Message)
		}
		return b.String()
	}
	fmt.Fprintf(&b, "%d tasks\n", len(tasks))
	for _, task := range tasks {
		fmt.Fprintf(&b, "%s\t%s\t%s\t%d\n", task.Collection, task.Frame, task.Generator, task.Candidate)
	}
	return b.String()
}
