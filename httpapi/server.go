package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"studio/intent"
	"studio/internal/diskfree"
	"studio/internal/memo"
	"studio/store"
)

// Generations runs generation intents: intent.Service implements it.
type Generations interface {
	CreateGeneration(ctx context.Context, actor, requestID string, in intent.GenerationInput) (intent.GenerationResult, error)
	// ReplayGeneration answers a retry by the fingerprint a
	// CreateGeneration answer carried, or says (ok false) that it cannot:
	// the request then goes to CreateGeneration.
	ReplayGeneration(ctx context.Context, actor, requestID, fingerprint string) (res intent.GenerationResult, ok bool, err error)
}

// Store is what the API needs of the store: the reads it answers, the
// batch cancel and deletion, the token look-up and the readiness check. store.Store has
// it.
type Store interface {
	GetBatch(ctx context.Context, actor, id string) (intent.Batch, error)
	ListBatches(ctx context.Context, p store.ListParams) ([]intent.Batch, error)
	ListTasks(ctx context.Context, batchID string, p store.ListParams) ([]intent.Task, error)
	CancelBatch(ctx context.Context, actor, id string) (intent.Batch, error)
	DeleteBatch(ctx context.Context, actor, id string) (store.Deleted, error)
	GetAsset(ctx context.Context, actor, id string) (intent.Asset, error)
	ActorForToken(ctx context.Context, tokenHash string) (string, error)
	Ping(ctx context.Context) error
	// BatchChanges and ListPublications serve the batch events and the
	// publications list.
	BatchChanges(ctx context.Context, p store.ChangesParams) (store.Changes, error)
	ListPublications(ctx context.Context, p store.ListParams) ([]intent.Publication, error)
	// PublicationItems and PublicationItem serve the gallery.
	PublicationItems(ctx context.Context, publicationID string) ([]store.PublicationItem, error)
	PublicationItem(ctx context.Context, publicationID, assetID string) (store.PublicationItem, error)
	WatchBatch(batchID string) (<-chan struct{}, func())
}

var _ Store = store.Store(nil)

// Blobs opens stored asset bytes by their SHA-256 (lowercase hex). A
// missing blob is an error: an asset row never exists without its bytes.
type Blobs interface {
	Open(ctx context.Context, sha256 string) (io.ReadSeekCloser, error)
}

// Presigner answers short-lived URLs that read asset bytes straight from
// an object store (s3blob.Store has it); blob.ErrNotFound when the bytes
// are not where such a URL can reach them.
type Presigner interface {
	Presign(ctx context.Context, sha256 string, ttl time.Duration, contentType string) (*url.URL, error)
}

// Limits bounds what a request may carry.
type Limits struct {
	// GenerationBody is the largest POST /v1/generations body in bytes;
	// 1 MiB by default.
	GenerationBody int64
	// ReadyTimeout bounds the database check of GET /readyz; 2s by default.
	ReadyTimeout time.Duration
	// DBWait bounds a request's wait for the database (SQLite's write
	// lock, held by another process or by this one's writers queued
	// first; on PostgreSQL a pooled connection and a write's row or table
	// locks): past it the request is answered 503 with Retry-After
	// instead of waiting on.
	// DefaultDBWait by default; negative leaves the engine's own wait.
	DBWait time.Duration
	// MinFree is the free space, in bytes, below which the data volume
	// (Config.DataDir) makes GET /readyz answer 503; DefaultMinFree by
	// default, negative turns the check off.
	MinFree int64
	// UploadBody is the largest POST /v1/uploads body in bytes; 20 MiB by
	// default. (POST /v1/publications takes GenerationBody.)
	UploadBody int64
	// BodyTimeout bounds the time to read a request body, from the end of
	// its headers: a body not read by then is answered 408 and its
	// connection closed. 30s by default; negative turns it off.
	BodyTimeout time.Duration
	// WriteStall ends an answer (and its connection) when one write of it
	// makes no progress for this long: a reader too slow to take the
	// bytes. 60s by default; negative turns it off.
	WriteStall time.Duration
}

// Default limits.
const (
	DefaultGenerationBody = 1 << 20
	DefaultReadyTimeout   = 2 * time.Second
	DefaultDBWait         = 3 * time.Second
	DefaultMinFree        = 64 << 20
	DefaultBodyTimeout    = 30 * time.Second
	DefaultWriteStall     = 60 * time.Second
)

// Config holds a Server's dependencies.
type Config struct {
	// Generations runs POST /v1/generations (required).
	Generations Generations
	// Store answers reads, cancels and token look-ups (required).
	Store Store
	// Blobs serves asset bytes; without it GET /v1/assets/{id}/content
	// answers 503.
	Blobs Blobs
	// Presign, with PresignTTL, answers asset content with a redirect to
	// a presigned URL of the object store instead of the bytes (unless
	// the request says ?redirect=false); nil streams every answer.
	Presign    Presigner
	PresignTTL time.Duration
	// Uploads runs POST /v1/uploads; without it the route answers 503.
	Uploads Uploads
	// UploadDir holds upload bodies while they are checked; the system's
	// temporary directory when empty.
	UploadDir string
	// Publications runs POST /v1/publications and GET
	// /v1/publications/{id}; without it they answer 503.
	Publications Publications
	// Locks serves /v1/locks/; without it those routes answer 503.
	Locks Locks
	// Logger receives one line per request and the details of internal
	// errors; slog.Default() when nil.
	Logger *slog.Logger
	// CursorKey signs list cursors (HMAC-SHA256), so that a cursor the
	// server did not make is refused. Instances sharing a database share
	// it (store.Store.CursorKey). Empty: a random key, good for this
	// Server only.
	CursorKey []byte
	// Limits bounds requests; zero fields take their defaults.
	Limits Limits
	// Metrics, when set, is served without a token at GET /metrics.
	Metrics http.Handler
	// Observe, when set, is called once per request after it was answered
	// (for metrics). It must be quick and safe for concurrent use.
	Observe func(RequestRecord)
	// Catalogs answers GET /v1/catalog; without it the route answers 503.
	Catalogs Catalogs
	// GeneratorHealth, when set, answers the remote generators' states for
	// /readyz (status "degraded" while one is down).
	GeneratorHealth func() []GeneratorStatus
	// UI, when set, serves the web studio at / and /ui/ (no token: the
	// page signs in from the browser; see package web).
	UI http.Handler
	// Events tunes the batch event streams; zero fields take defaults.
	Events Events
	// DataDir, when set, is the directory whose volume /readyz checks for
	// at least Limits.MinFree free bytes.
	DataDir string
}

// RequestRecord describes one answered request: what the request log line
// says and what Config.Observe receives. It never holds a token or a body.
type RequestRecord struct {
	Method string
	// Route is the matched route pattern ("/v1/batches/{id}"), or "" when
	// no route matched.
	Route    string
	Status   int
	Duration time.Duration
	// Actor is the authenticated actor, "" before or without
	// authentication.
	Actor string
	// RequestID is the intent's request id, when the request carried one.
	RequestID string
	// Fault is the kind of dependency fault the request was answered with
	// (store.FaultKind), FaultAssetCorrupt for stored asset bytes that
	// failed their SHA-256, "" when none.
	Fault string
}

// FaultAssetCorrupt is RequestRecord.Fault for a request answered 503
// because the asset bytes it asked for fail their SHA-256 check.
const FaultAssetCorrupt = "asset_corrupt"

// Server is studio's HTTP API.
type Server struct {
	gens       Generations
	store      Store
	blobs      Blobs
	presign    Presigner
	presignTTL time.Duration
	uploads    Uploads
	uploadDir  string
	pubs       Publications
	locks      Locks
	log        *slog.Logger
	limits     Limits
	metrics    http.Handler
	observe    func(RequestRecord)
	cursors    cursorSigner
	catalogs   Catalogs
	health     func() []GeneratorStatus
	ui         http.Handler
	router     *chi.Mux
	// bodies remembers what intent bodies already answered came to
	// (serveIntent).
	bodies *memo.Map[bodyKey, seenBody]
	// outage logs a run of dependency faults once when it begins and once
	// when it ends.
	outage *store.Outage
	// assetOutage is the same for the asset store (an object store): its
	// faults and successes are its own, not the database's.
	assetOutage *store.Outage
	// dataDir is the directory whose volume /readyz checks for free space.
	dataDir string

	events      Events
	streamsDone chan struct{} // closed by EndStreams
	endStreams  sync.Once
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Generations == nil {
		return nil, errors.New("new http api: no generations service")
	}
	if cfg.Store == nil {
		return nil, errors.New("new http api: no store")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Limits.GenerationBody <= 0 {
		cfg.Limits.GenerationBody = DefaultGenerationBody
	}
	if cfg.Limits.ReadyTimeout <= 0 {
		cfg.Limits.ReadyTimeout = DefaultReadyTimeout
	}
	if cfg.Limits.DBWait == 0 {
		cfg.Limits.DBWait = DefaultDBWait
	}
	if cfg.Limits.MinFree == 0 {
		cfg.Limits.MinFree = DefaultMinFree
	}
	if cfg.Limits.BodyTimeout == 0 {
		cfg.Limits.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.Limits.WriteStall == 0 {
		cfg.Limits.WriteStall = DefaultWriteStall
	}
	if cfg.Limits.UploadBody <= 0 {
		cfg.Limits.UploadBody = intent.MaxUploadBytes
	}
	if cfg.Events.Poll <= 0 {
		cfg.Events.Poll = DefaultEventPoll
	}
	if cfg.Events.Gap <= 0 {
		cfg.Events.Gap = DefaultEventGap
	}
	if cfg.Events.Heartbeat <= 0 {
		cfg.Events.Heartbeat = DefaultEventHeartbeat
	}
	s := &Server{
		gens:        cfg.Generations,
		store:       cfg.Store,
		blobs:       cfg.Blobs,
		presign:     cfg.Presign,
		presignTTL:  cfg.PresignTTL,
		uploads:     cfg.Uploads,
		uploadDir:   cfg.UploadDir,
		pubs:        cfg.Publications,
		locks:       cfg.Locks,
		log:         cfg.Logger,
		limits:      cfg.Limits,
		metrics:     cfg.Metrics,
		observe:     cfg.Observe,
		catalogs:    cfg.Catalogs,
		health:      cfg.GeneratorHealth,
		ui:          cfg.UI,
		bodies:      memo.New[bodyKey, seenBody](seenBodies),
		outage:      store.NewOutage(cfg.Logger, "api"),
		assetOutage: store.NewOutage(cfg.Logger, "api"),
		dataDir:     cfg.DataDir,

		events:      cfg.Events,
		streamsDone: make(chan struct{}),
	}
	var err error
	if s.cursors, err = newCursorSigner(cfg.CursorKey); err != nil {
		return nil, fmt.Errorf("new http api: %w", err)
	}
	if err := checkOpenAPI(); err != nil {
		return nil, fmt.Errorf("new http api: %w", err)
	}
	s.router = s.routes()
	return s, nil
}

// Handler returns the API's http.Handler.
func (s *Server) Handler() http.Handler { return s.router }

// routes builds the router. Adding a route is one line here and its entry
// in openapi.json.
func (s *Server) routes() *chi.Mux {
	r := chi.NewRouter()
	// Set before any route so that every subrouter inherits them.
	r.NotFound(s.notFound)
	r.MethodNotAllowed(s.methodNotAllowed)
	r.Use(s.logRequests, s.recoverPanics, commonHeaders, headAsGet)

	// Operations: no token.
	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	r.Get("/openapi.json", s.openAPI)
	if s.metrics != nil {
		r.Method(http.MethodGet, "/metrics", s.metrics)
	}
	// Published: the gallery, for anyone who has a publication's id.
	r.Get("/gallery/{publication}/{file}", s.getGalleryFile)
	if s.ui != nil {
		r.Method(http.MethodGet, "/", s.ui)
		r.Method(http.MethodGet, "/ui/*", s.ui)
	}

	// The API: every route, known or not, needs a token first.
	r.Route("/v1", func(r chi.Router) {
		r.Use(s.authenticate, s.refuseEncodings)
		// Authenticated already (the router's own MethodNotAllowed, which
		// this one would inherit, authenticates /v1 for the methods that
		// never reach this router).
		r.MethodNotAllowed(s.answerMethod)
		r.Post("/generations", s.createGeneration)
		r.Get("/batches", s.listBatches)
		r.Get("/batches/{id}", s.getBatch)
		r.Get("/batches/{id}/tasks", s.listTasks)
		r.Post("/batches/{id}/cancel", s.cancelBatch)
		r.Delete("/batches/{id}", s.deleteBatch)
		r.Get("/batches/{id}/events", s.batchEvents)
		r.Get("/assets/{id}", s.getAsset)
		r.Get("/assets/{id}/content", s.getAssetContent)
		r.Post("/locks/acquire", s.acquireLock)
		r.Post("/locks/renew", s.renewLock)
		r.Post("/locks/release", s.releaseLock)
		r.Get("/locks/inspect", s.inspectLock)
		r.Post("/uploads", s.createUpload)
		r.Post("/publications", s.createPublication)
		r.Get("/publications", s.listPublications)
		r.Get("/publications/{id}", s.getPublication)
		r.Get("/catalog", s.getCatalog)
	})
	return r
}

// notFound answers a path no route serves.
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	s.Error(w, r, intent.Errorf(intent.ENotFound, "No route serves %s.", r.URL.Path))
}

// routeMethods are the methods the 405 answer checks for its Allow header
// (HEAD is allowed wherever GET is).
var routeMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// methodNotAllowed answers a request whose method the path does not serve,
// made-up methods included (the router sends those here whatever the
// path). Under /v1 the request is authenticated first, like any other.
// Then: a path that serves other methods is 405 with the Allow header RFC
// 9110 requires; a path that serves none is 404.
func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1" || strings.HasPrefix(r.URL.Path, "/v1/") {
		s.authenticate(http.HandlerFunc(s.answerMethod)).ServeHTTP(w, r)
		return
	}
	s.answerMethod(w, r)
}

func (s *Server) answerMethod(w http.ResponseWriter, r *http.Request) {
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	var allow []string
	for _, m := range routeMethods {
		if s.router.Match(chi.NewRouteContext(), m, path) {
			allow = append(allow, m)
			if m == http.MethodGet {
				allow = append(allow, http.MethodHead)
			}
		}
	}
	if len(allow) == 0 {
		s.notFound(w, r)
		return
	}
	for _, m := range allow {
		w.Header().Add("Allow", m)
	}
	s.writeProblem(w, r, Problem{
		Type:   "about:blank",
		Title:  http.StatusText(http.StatusMethodNotAllowed),
		Status: http.StatusMethodNotAllowed,
		Detail: fmt.Sprintf("%s does not serve %s.", r.URL.Path, truncate(r.Method, 40)),
	})
}

// healthz answers while the process lives.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	s.ok(w, r, http.StatusOK, status{Status: "ok"})
}

// readyz answers 200 when the database is reachable with every migration
// applied and the data volume has at least Limits.MinFree bytes free; 503
// with Retry-After and the reason otherwise.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.limits.ReadyTimeout)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		if f := store.FaultOf(err); f != nil {
			s.writeFault(w, r, f)
			return
		}
		// Not an internal error of this request: the database is down,
		// slow or behind. Log why, answer without the details.
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "not ready", slog.String("error", err.Error()))
		w.Header().Set("Retry-After", "5")
		detail := "The database is not ready."
		if ctx.Err() != nil && r.Context().Err() == nil {
			detail = fmt.Sprintf("The database did not answer within %v.", s.limits.ReadyTimeout)
		}
		s.Error(w, r, intent.Errorf(intent.EUnavailable, "%s", detail))
		return
	}
	if s.dataDir != "" && s.limits.MinFree > 0 {
		free, err := diskfree.Bytes(s.dataDir)
		if err == nil && free < uint64(s.limits.MinFree) {
			w.Header().Set("Retry-After", "60")
			s.Error(w, r, intent.Errorf(intent.EUnavailable, "The data volume has %s free, below the floor of %s.",
				sizeText(free), sizeText(uint64(s.limits.MinFree))))
			return
		}
	}
	st := status{Status: "ok"}
	if s.health != nil {
		// A remote generator that is down degrades the service but does
		// not make it unready: its tasks wait, the others run.
		st.Generators = s.health()
		for _, g := range st.Generators {
			if g.State != "up" {
				st.Status = "degraded"
			}
		}
	}
	s.ok(w, r, http.StatusOK, st)
}

// sizeText writes a byte count for people: 12.5 MiB.
func sizeText(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// status is the body of /healthz and /readyz.
type status struct {
	// Status is "ok", or (readyz) "degraded" when a remote generator is
	// down.
	Status string `json:"status"`
	// Generators are the remote generators' states (readyz).
	Generators []GeneratorStatus `json:"generators,omitempty"`
}

// GeneratorStatus is how one remote generator stands: state "up", or
// "down" while it does not answer (its circuit breaker is open and its
// tasks wait, queued), since when, and the last error while down.
type GeneratorStatus struct {
	ID    string    `json:"id"`
	State string    `json:"state"`
	Since time.Time `json:"since"`
	Error string    `json:"error,omitempty"`
}
