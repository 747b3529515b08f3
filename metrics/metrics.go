// Package metrics is studio's Prometheus registry: the counters, histograms
// and collectors that /metrics serves, and the decorators and hooks that
// feed them from the rest of the program.
//
// Every name is under studio_ (the Go runtime's go_* and the process's
// process_* excepted), says its unit (_seconds, _total), and carries only
// labels of small, fixed sets: routes, statuses, outcomes, states, pool and
// lock names. Never an id, an actor or a key.
//
// The package knows nothing of HTTP handlers, stores or workers: callers
// hand it what happened through plain methods (Request, Intent, Attempt,
// LeaseLost) and wrap the intent service's ports with Planner, IntentStore
// and Locker. Every method is safe for concurrent use.
package metrics

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"studio/intent"
)

// Namespace is the prefix of every studio metric.
const Namespace = "studio"

// Outcomes of a task attempt, for Attempt.
const (
	AttemptSucceeded = "succeeded" // the result was recorded
	AttemptRetried   = "retried"   // failed, queued again after a backoff
	AttemptFailed    = "failed"    // failed for good (permanent, or the last attempt)
	AttemptCanceled  = "canceled"  // the batch was canceled while it ran
	AttemptReleased  = "released"  // handed back by a worker stopping
	AttemptLost      = "lost"      // the lease was lost: nothing recorded
)

// attemptOutcomes are pre-declared so that every series exists at zero.
var attemptOutcomes = []string{AttemptSucceeded, AttemptRetried, AttemptFailed, AttemptCanceled, AttemptReleased, AttemptLost}

// intentOutcomes are the outcomes intent.Service reports.
var intentOutcomes = []intent.Outcome{intent.OutcomeCreated, intent.OutcomeReplayed, intent.OutcomeConflict, intent.OutcomeInvalid, intent.OutcomeError}

// taskStates are the states the task gauge reports, in this order.
var taskStates = []intent.State{intent.StateQueued, intent.StateRunning, intent.StateSucceeded, intent.StateFailed, intent.StateCanceled}

// intentRoutes maps the routes that create intents to their operation: a
// body that the HTTP layer refuses (400, 413, 415) never reaches the
// service, and counts here as an invalid intent.
var intentRoutes = map[string]string{
	"/v1/generations":  intent.OpGeneration,
	"/v1/publications": intent.OpPublication,
}

// durationBuckets bound the duration histograms, from 50 µs to 10 s.
var durationBuckets = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// Metrics holds studio's registry and instruments.
type Metrics struct {
	reg *prometheus.Registry

	requests       *prometheus.CounterVec
	requestSeconds *prometheus.HistogramVec
	intents        *prometheus.CounterVec
	planSeconds    *prometheus.HistogramVec
	commitSeconds  *prometheus.HistogramVec
	attempts       *prometheus.CounterVec
	leasesLost     prometheus.Counter
	lockWait       *prometheus.HistogramVec
	lockHold       *prometheus.HistogramVec
	faults         *prometheus.CounterVec
	assetFaults    *prometheus.CounterVec
}

// New returns a registry with studio's instruments and the Go runtime and
// process collectors.
func New() *Metrics {
	hist := func(name, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: name, Help: help,
			Buckets: durationBuckets,
			// Scrapers that take native histograms get finer ones.
			NativeHistogramBucketFactor:    1.1,
			NativeHistogramMaxBucketNumber: 100,
		}, labels)
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "http_requests_total",
			Help: "HTTP requests answered, by method, route pattern and status.",
		}, []string{"method", "route", "status"}),
		requestSeconds: hist("http_request_duration_seconds",
			"Time to answer an HTTP request, by method and route pattern.", "method", "route"),
		intents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "intents_total",
			Help: "Intents by operation and outcome: created, replayed, conflict, invalid (refused by the HTTP layer or the planner), error.",
		}, []string{"operation", "outcome"}),
		planSeconds: hist("plan_duration_seconds",
			"Time to plan an intent (catalog and visibility look-ups), by outcome: ok or refused.", "outcome"),
		commitSeconds: hist("commit_duration_seconds",
			"Time of the transaction that commits an intent's tree, by outcome: created, existing (the id was bound already), conflict or error.", "outcome"),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "task_attempts_total",
			Help: "Task attempts ended, by outcome: succeeded, retried, failed, canceled, released, lost.",
		}, []string{"outcome"}),
		leasesLost: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "task_leases_lost_total",
			Help: "Task leases a worker found lost (expired or taken over) while it ran the task.",
		}),
		lockWait: hist("lock_wait_seconds",
			"Time from asking for a lock to holding it, by lock.", "lock"),
		lockHold: hist("lock_hold_seconds",
			"Time a lock was held, by lock.", "lock"),
		faults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "database_faults_total",
			Help: "Requests answered 503 or 507 for a fault of the database or its volume, by kind: " + strings.Join(FaultKinds, ", ") + ".",
		}, []string{"kind"}),
		assetFaults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "asset_store_faults_total",
			Help: "Requests answered 503 for a fault of the store of asset bytes, by kind: unavailable (down, refusing, throttling), corrupt (stored bytes that fail their SHA-256).",
		}, []string{"kind"}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.requestSeconds, m.intents, m.planSeconds, m.commitSeconds,
		m.attempts, m.leasesLost, m.lockWait, m.lockHold, m.faults, m.assetFaults,
	)
	for _, k := range FaultKinds {
		m.faults.WithLabelValues(k)
	}
	for _, k := range AssetFaultKinds {
		m.assetFaults.WithLabelValues(k)
	}
	for _, op := range []string{intent.OpGeneration} {
		for _, o := range intentOutcomes {
			m.intents.WithLabelValues(op, string(o))
		}
	}
	for _, o := range attemptOutcomes {
		m.attempts.WithLabelValues(o)
	}
	return m
}

// Registry is the registry /metrics serves; register more collectors on it.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text (or negotiated)
// format. A collector that fails is reported in the answer without failing
// the others.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	})
}

// knownMethods are the method label values; any other method a client
// sends counts as "other", so that made-up methods cannot grow the label
// set.
var knownMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
	http.MethodConnect: true, http.MethodTrace: true,
}

// MethodLabel is the method label value of a request method: the method
// when it is one of RFC 9110's (and PATCH), "other" for anything else.
func MethodLabel(method string) string {
	if knownMethods[method] {
		return method
	}
	return "other"
}

// Request counts one answered HTTP request. route is the matched route
// pattern, "" when none matched (reported as "unmatched", so that unknown
// paths cannot grow the label set); a method that is not a standard one
// counts as "other", and a status outside 100..599 as "other" too. A body
// refused on a route that creates intents also counts as an invalid intent.
func (m *Metrics) Request(method, route string, status int, d time.Duration) {
	if route == "" {
		route = "unmatched"
	}
	method = MethodLabel(method)
	code := "other"
	if status >= 100 && status <= 599 {
		code = strconv.Itoa(status)
	}
	m.requests.WithLabelValues(method, route, code).Inc()
	m.requestSeconds.WithLabelValues(method, route).Observe(d.Seconds())
	if op, ok := intentRoutes[route]; ok && method == http.MethodPost {
		switch status {
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
			m.intents.WithLabelValues(op, string(intent.OutcomeInvalid)).Inc()
		}
	}
}

// Intent counts one intent's outcome; it has the signature of
// intent.Service.Observe.
func (m *Metrics) Intent(operation string, outcome intent.Outcome) {
	m.intents.WithLabelValues(operation, string(outcome)).Inc()
}

// Attempt counts one ended task attempt (one of the Attempt* outcomes).
func (m *Metrics) Attempt(outcome string) {
	m.attempts.WithLabelValues(outcome).Inc()
}

// FaultKinds are the kind label values of studio_database_faults_total
// (store.FaultKinds; this package imports no store).
var FaultKinds = []string{"busy", "unreachable", "full", "read_only", "io"}

// AssetFaultKinds are the kind label values of
// studio_asset_store_faults_total: the store cannot be reached or refuses
// (store.FaultAssetStore), or bytes it holds fail their SHA-256.
var AssetFaultKinds = []string{AssetUnavailable, AssetCorrupt}

// The asset store's fault kinds.
const (
	AssetUnavailable = "unavailable"
	AssetCorrupt     = "corrupt"
)

// AssetFault counts one request answered for a fault of the asset store
// of kind (one of AssetFaultKinds; any other counts as "unavailable").
func (m *Metrics) AssetFault(kind string) {
	if !slices.Contains(AssetFaultKinds, kind) {
		kind = AssetUnavailable
	}
	m.assetFaults.WithLabelValues(kind).Inc()
}

// Fault counts one request answered for a fault of the database of kind
// (one of FaultKinds; any other counts as "io").
func (m *Metrics) Fault(kind string) {
	if !slices.Contains(FaultKinds, kind) {
		kind = "io"
	}
	m.faults.WithLabelValues(kind).Inc()
}

// FreeBytes reports studio_data_volume_free_bytes, read from free at each
// scrape: the bytes an unprivileged writer may still use on the volume
// holding the data directory.
func (m *Metrics) FreeBytes(free func() (uint64, error)) error {
	c := &freeCollector{free: free, desc: prometheus.NewDesc(
		prometheus.BuildFQName(Namespace, "", "data_volume_free_bytes"),
		"Free bytes of the volume holding the data directory, read at scrape time.", nil, nil)}
	if err := m.reg.Register(c); err != nil {
		return fmt.Errorf("register free bytes: %w", err)
	}
	return nil
}

type freeCollector struct {
	desc *prometheus.Desc
	free func() (uint64, error)
}

func (c *freeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *freeCollector) Collect(ch chan<- prometheus.Metric) {
	n, err := c.free()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n))
}

// LeaseLost counts one task lease found lost.
func (m *Metrics) LeaseLost() { m.leasesLost.Inc() }

// DBPool reports a database/sql pool's statistics (open, in use and idle
// connections, waits, closes) as studio_go_sql_*{db_name=name}.
func (m *Metrics) DBPool(name string, db *sql.DB) error {
	reg := prometheus.WrapRegistererWithPrefix(Namespace+"_", m.reg)
	if err := reg.Register(collectors.NewDBStatsCollector(db, name)); err != nil {
		return fmt.Errorf("register pool %q: %w", name, err)
	}
	return nil
}

// TaskCounter counts every task by state, for the tasks gauge. It runs at
// each scrape, so it must be a cheap aggregate.
type TaskCounter func(ctx context.Context) (intent.Counts, error)

// countTimeout bounds one scrape's count of tasks.
const countTimeout = 2 * time.Second

// TaskStates reports studio_tasks{state}, read from count at each scrape.
func (m *Metrics) TaskStates(count TaskCounter) error {
	c := &taskCollector{count: count, desc: prometheus.NewDesc(
		prometheus.BuildFQName(Namespace, "", "tasks"),
		"Tasks by state, counted at scrape time.", []string{"state"}, nil)}
	if err := m.reg.Register(c); err != nil {
		return fmt.Errorf("register task states: %w", err)
	}
	return nil
}

type taskCollector struct {
	desc  *prometheus.Desc
	count TaskCounter
}

func (c *taskCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *taskCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), countTimeout)
	defer cancel()
	counts, err := c.count(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, fmt.Errorf("count tasks: %w", err))
		return
	}
	values := []int{counts.Queued, counts.Running, counts.Succeeded, counts.Failed, counts.Canceled}
	for i, state := range taskStates {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(values[i]), string(state))
	}
}
