package generator

import (
	"fmt"
	"slices"
)

// Spec names one generator of a catalog: its id and kind.
type Spec struct {
	ID   string
	Kind string
}

// CheckSpec reports whether studio can build the generator a catalog names:
// a known kind and, for kind embedded, one of EmbeddedIDs.
func CheckSpec(s Spec) error {
	switch s.Kind {
	case KindEmbedded:
		if !slices.Contains(EmbeddedIDs(), s.ID) {
			return fmt.Errorf("generator %q: no embedded generator has this id (known: %v)", s.ID, EmbeddedIDs())
		}
		return nil
	default:
		return fmt.Errorf("generator %q: unknown kind %q (known: %q)", s.ID, s.Kind, KindEmbedded)
	}
}

// New builds the generator of a spec.
func New(s Spec) (Generator, error) {
	if err := CheckSpec(s); err != nil {
		return nil, err
	}
	switch s.ID {
	case Sketch:
		return NewSketch(), nil
	case Mosaic:
		return NewMosaic(), nil
	default:
		return NewNoop(), nil
	}
}

// Registry holds the generators of a catalog by id. It is read-only after
// NewRegistry, so any number of workers may share it.
type Registry struct {
	byID map[string]Generator
	ids  []string
}

// NewRegistry builds every generator of a catalog. Ids must be distinct.
func NewRegistry(specs ...Spec) (*Registry, error) {
	r := &Registry{byID: make(map[string]Generator, len(specs))}
	for _, s := range specs {
		if _, dup := r.byID[s.ID]; dup {
			return nil, fmt.Errorf("new registry: generator %q listed twice", s.ID)
		}
		g, err := New(s)
		if err != nil {
			return nil, fmt.Errorf("new registry: %w", err)
		}
		r.byID[s.ID] = g
		r.ids = append(r.ids, s.ID)
	}
	return r, nil
}

// Get returns the generator with the id. A task naming a generator the
// registry lacks cannot run here; Get's error says so and is permanent.
func (r *Registry) Get(id string) (Generator, error) {
	g, ok := r.byID[id]
	if !ok {
		return nil, Permanent(fmt.Errorf("generator %q is not in the catalog", id))
	}
	return g, nil
}

// IDs lists the generators' ids in catalog order.
func (r *Registry) IDs() []string { return slices.Clone(r.ids) }
