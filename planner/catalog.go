package planner

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/go-json-experiment/json"

	"studio/generator"
	"studio/internal/jsonfile"
)

// AutoRoute is the route a request's providers default to.
const AutoRoute = "auto"

// Catalog is what the planner asks about generators. It may be remote, so
// every call takes a context and may fail. PlanGeneration calls Generators
// once per plan and Route only for provider names that are not generator
// ids (usually "auto", once).
type Catalog interface {
	// Generators returns every generator of the catalog, in catalog order.
	Generators(ctx context.Context) ([]GeneratorInfo, error)
	// Route returns the generator ids of the named route; ok is false when
	// the catalog has no such route.
	Route(ctx context.Context, name string) (ids []string, ok bool, err error)
}

// Visibility says which subjects an actor may use. It may be remote.
type Visibility interface {
	// Visible reports, for each subject in order, whether the actor may use
	// it. A subject that does not exist is not visible; the answer never
	// tells the two apart.
	Visible(ctx context.Context, actor string, subjects []string) ([]bool, error)
}

// GeneratorInfo is one generator of a catalog.
type GeneratorInfo struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// MaxConcurrency caps how many tasks of this generator run at once
	// across the workers sharing the catalog; 0 means no cap.
	MaxConcurrency int `json:"max_concurrency,omitzero"`
	// Sizes are the sizes ("WxH") the generator takes, nil for any;
	// DefaultSize is the one a task asks for without params.width and
	// params.height ("" for the generator's own).
	Sizes       []string `json:"sizes,omitzero"`
	DefaultSize string   `json:"default_size,omitzero"`
}

// Subject is one subject of a catalog: public, or visible to the listed
// actors only.
type Subject struct {
	ID     string   `json:"id"`
	Public bool     `json:"public,omitzero"`
	Actors []string `json:"actors,omitempty"`
}

// Static is a catalog read from one document, the embedded one or a file. It
// implements Catalog and Visibility, never changes after it is made, and is
// safe for concurrent use.
type Static struct {
	generators []GeneratorInfo
	specs      []generator.Spec
	routes     map[string][]string
	subjects   map[string]Subject
	order      []string // subject ids in document order
}

var _ Catalog = (*Static)(nil)
var _ Visibility = (*Static)(nil)

//go:embed embedded_catalog.json
var embeddedCatalog []byte

// EmbeddedCatalog returns the catalog studio runs with when no file is
// given: generators sketch and mosaic, the route auto = both, and the public
// subjects knight, robot and cat.
func EmbeddedCatalog() *Static {
	c, err := ParseCatalog(embeddedCatalog)
	if err != nil {
		panic("embedded catalog: " + err.Error())
	}
	return c
}

// LoadCatalog reads and checks a catalog file (the --catalog format).
func LoadCatalog(path string) (*Static, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load catalog: %w", err)
	}
	c, err := parseCatalog(data, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("load catalog %s: %w", path, err)
	}
	return c, nil
}

// catalogDoc is the file format. Pointers tell an absent member from a
// zero one.
type catalogDoc struct {
	Generators []struct {
		generator.Spec `json:",inline"`
		MaxConcurrency *int `json:"max_concurrency"`
	} `json:"generators"`
	Routes   map[string][]string `json:"routes"`
	Subjects []struct {
		ID     string   `json:"id"`
		Public *bool    `json:"public"`
		Actors []string `json:"actors"`
	} `json:"subjects"`
}

// ParseCatalog reads and checks a catalog document. It refuses unknown or
// duplicate members, an unknown kind or embedded id, a member its kind
// does not have, a remote generator studio could not build (see
// generator.CheckSpec: a bad URL or template, a missing workflow or node,
// an api_key_env that is not set), duplicate ids, a route naming a
// generator the catalog lacks, a missing auto route, and subjects that are
// neither public nor given actors; the error lists every problem. Workflow
// paths are relative to the working directory (LoadCatalog makes them
// relative to the file).
func ParseCatalog(data []byte) (*Static, error) { return parseCatalog(data, ".") }

func parseCatalog(data []byte, dir string) (*Static, error) {
	var doc catalogDoc
	if err := json.Unmarshal(data, &doc, json.RejectUnknownMembers(true)); err != nil {
		// Where it is, for the person who wrote the file, in words of
		// studio's own (line and column, the field at fault).
		return nil, jsonfile.Explain("the catalog", data, err)
	}
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }

	c := &Static{routes: map[string][]string{}, subjects: map[string]Subject{}}
	ids := map[string]bool{}
	if len(doc.Generators) == 0 {
		bad("generators: at least one is required")
	}
	for i, g := range doc.Generators {
		at := fmt.Sprintf("generators[%d]", i)
		switch {
		case g.ID == "":
			bad("%s: id is required", at)
			continue
		case ids[g.ID]:
			bad("%s: duplicate id %q", at, g.ID)
			continue
		case g.Kind == "":
			bad("%s: kind is required", at)
		default:
			if g.Workflow != "" && !filepath.IsAbs(g.Workflow) {
				g.Workflow = filepath.Join(dir, g.Workflow)
			}
			if err := generator.CheckSpec(g.Spec); err != nil {
				bad("%s: %v", at, err)
			}
		}
		ids[g.ID] = true
		c.specs = append(c.specs, g.Spec)
		info := GeneratorInfo{ID: g.ID, Kind: g.Kind, Sizes: g.Spec.AllowedSizes(), DefaultSize: g.Spec.DefaultSize()}
		if g.MaxConcurrency != nil {
			if *g.MaxConcurrency < 1 {
				bad("%s: max_concurrency must be at least 1 (omit it for no cap)", at)
			}
			info.MaxConcurrency = *g.MaxConcurrency
		}
		c.generators = append(c.generators, info)
	}

	names := make([]string, 0, len(doc.Routes))
	for name := range doc.Routes {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		route := doc.Routes[name]
		at := fmt.Sprintf("routes[%q]", name)
		switch {
		case name == "":
			bad("routes: a route needs a name")
		case ids[name]:
			bad("%s: a route may not share its name with a generator", at)
		case len(route) == 0:
			bad("%s: lists no generators", at)
		}
		seen := map[string]bool{}
		for j, id := range route {
			switch {
			case !ids[id]:
				bad("%s[%d]: no generator %q in the catalog", at, j, id)
			case seen[id]:
				bad("%s[%d]: generator %q listed twice", at, j, id)
			}
			seen[id] = true
		}
		c.routes[name] = slices.Clone(route)
	}
	if _, ok := doc.Routes[AutoRoute]; !ok {
		bad("routes: the route %q is required (requests default to it)", AutoRoute)
	}

	for i, s := range doc.Subjects {
		at := fmt.Sprintf("subjects[%d]", i)
		public := s.Public != nil && *s.Public
		switch {
		case s.ID == "":
			bad("%s: id is required", at)
			continue
		case c.subjects[s.ID].ID != "":
			bad("%s: duplicate id %q", at, s.ID)
			continue
		case public && len(s.Actors) > 0:
			bad("%s: a public subject lists no actors", at)
		case !public && len(s.Actors) == 0:
			bad("%s: give \"public\": true or a list of \"actors\"", at)
		}
		if slices.Contains(s.Actors, "") {
			bad("%s: an actor name is empty", at)
		}
		c.subjects[s.ID] = Subject{ID: s.ID, Public: public, Actors: slices.Clone(s.Actors)}
		c.order = append(c.order, s.ID)
	}
	if len(probs) > 0 {
		return nil, errors.New("invalid catalog: " + strings.Join(probs, "; "))
	}
	return c, nil
}

// Generators implements Catalog.
func (c *Static) Generators(ctx context.Context) ([]GeneratorInfo, error) {
	return slices.Clone(c.generators), nil
}

// Route implements Catalog.
func (c *Static) Route(ctx context.Context, name string) ([]string, bool, error) {
	ids, ok := c.routes[name]
	return slices.Clone(ids), ok, nil
}

// Visible implements Visibility.
func (c *Static) Visible(ctx context.Context, actor string, subjects []string) ([]bool, error) {
	out := make([]bool, len(subjects))
	for i, id := range subjects {
		s, ok := c.subjects[id]
		out[i] = ok && (s.Public || slices.Contains(s.Actors, actor))
	}
	return out, nil
}

// Subjects lists the catalog's subjects in document order.
func (c *Static) Subjects() []Subject {
	out := make([]Subject, len(c.order))
	for i, id := range c.order {
		s := c.subjects[id]
		s.Actors = slices.Clone(s.Actors)
		out[i] = s
	}
	return out
}

// Specs lists the generators to build for this catalog (see
// generator.NewRegistry).
func (c *Static) Specs() []generator.Spec {
	out := slices.Clone(c.specs)
	for i := range out {
		out[i].Inputs = maps.Clone(out[i].Inputs)
	}
	return out
}
