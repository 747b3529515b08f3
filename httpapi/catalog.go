package httpapi

import (
	"context"
	"net/http"

	"studio/intent"
)

// Catalogs answers GET /v1/catalog: what one actor may ask for.
type Catalogs interface {
	// CatalogFor returns the catalog as the actor sees it: every generator
	// and route, only the subjects the actor may use.
	CatalogFor(ctx context.Context, actor string) (Catalog, error)
}

// Catalog is the body of GET /v1/catalog: what a composer needs to offer
// valid choices and to count a plan's tasks before sending it.
type Catalog struct {
	// Generators are the catalog's generators, in catalog order.
	Generators []CatalogGenerator `json:"generators"`
	// Routes map a provider name ("auto" always among them) to the
	// generator ids it stands for, in order.
	Routes map[string][]string `json:"routes"`
	// Subjects are the ids of the subjects this actor may use, in catalog
	// order.
	Subjects []string `json:"subjects"`
	// Channels are the publication channels this server carries out.
	Channels []string `json:"channels"`
	// MaxBatchTasks is the most tasks one batch may have.
	MaxBatchTasks int `json:"max_batch_tasks"`
}

// CatalogGenerator is one generator of the catalog.
type CatalogGenerator struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Health is "up" or "down" for a remote generator as this process
	// sees it ("down": its tasks wait, queued), absent for the embedded
	// ones.
	Health string `json:"health,omitempty"`
}

// getCatalog is GET /v1/catalog.
func (s *Server) getCatalog(w http.ResponseWriter, r *http.Request) {
	if s.catalogs == nil {
		s.Error(w, r, intent.Errorf(intent.EUnavailable, "The catalog is not served by this process."))
		return
	}
	actor, _ := ActorFrom(r.Context())
	c, err := s.catalogs.CatalogFor(r.Context(), actor)
	if err != nil {
		s.Error(w, r, err)
		return
	}
	// Empty lists and maps go out as [] and {}, never null (the JSON
	// encoder's default), so a client can iterate without care.
	s.ok(w, r, http.StatusOK, c)
}
