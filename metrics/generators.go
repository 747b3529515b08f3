package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// generatorBuckets bound the provider call histogram: from 10 ms (a poll)
// to 10 minutes (a slow generation).
var generatorBuckets = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// Generators counts the calls the remote generators make to their
// providers: studio_generator_calls_total{generator, call},
// studio_generator_errors_total{generator, class} and
// studio_generator_call_duration_seconds{generator, call}. The labels are
// catalog generator ids and the generators' fixed call and error class
// names, never a task, a prompt or a key.
//
// What tasks bought: studio_generator_images_stored_total{generator} and
// studio_generator_discarded_total{generator, reason} (paid results thrown
// away: lost by the provider, a URL gone or expired, an image refused, a
// task that ended without storing its image). The paid calls themselves
// are studio_generator_calls_total{call="generate"} (openai) and
// {call="submit"} (comfyui).
type Generators struct {
	calls     *prometheus.CounterVec
	errors    *prometheus.CounterVec
	seconds   *prometheus.HistogramVec
	stored    *prometheus.CounterVec
	discarded *prometheus.CounterVec
	remote    map[string]bool // read-only after Generators
}

// Generators registers the per-generator instruments, with every error
// class and discard reason of every listed generator at zero. Call it
// once per Metrics.
func (m *Metrics) Generators(ids, classes, reasons []string) (*Generators, error) {
	g := &Generators{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "generator_calls_total",
			Help: "Calls of remote generators to their providers, by generator and call (generate, download; submit, history, queue, view).",
		}, []string{"generator", "call"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "generator_errors_total",
			Help: "Failed provider calls, by generator and class: network, timeout, rate_limited, unavailable, rejected, auth, protocol.",
		}, []string{"generator", "class"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "generator_call_duration_seconds",
			Help:    "Time of a provider call, answered or failed, by generator and call.",
			Buckets: generatorBuckets,
		}, []string{"generator", "call"}),
		stored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "generator_images_stored_total",
			Help: "Images of remote generators stored in the blob store, by generator.",
		}, []string{"generator"}),
		discarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "generator_discarded_total",
			Help: "Paid generation results thrown away, by generator and reason: lost, gone, expired, size, unreadable, abandoned.",
		}, []string{"generator", "reason"}),
	}
	for _, c := range []prometheus.Collector{g.calls, g.errors, g.seconds, g.stored, g.discarded} {
		if err := m.reg.Register(c); err != nil {
			return nil, fmt.Errorf("register generator metrics: %w", err)
		}
	}
	for _, id := range ids {
		g.stored.WithLabelValues(id)
		for _, class := range classes {
			g.errors.WithLabelValues(id, class)
		}
		for _, r := range reasons {
			g.discarded.WithLabelValues(id, r)
		}
	}
	g.remote = map[string]bool{}
	for _, id := range ids {
		g.remote[id] = true
	}
	return g, nil
}

// Stored counts one image of a remote generator stored (the embedded
// generators, which cost nothing, are not counted).
func (g *Generators) Stored(generator string) {
	if g.remote[generator] {
		g.stored.WithLabelValues(generator).Inc()
	}
}

// Discarded counts one paid result of a remote generator thrown away.
func (g *Generators) Discarded(generator, reason string) {
	if g.remote[generator] {
		g.discarded.WithLabelValues(generator, reason).Inc()
	}
}

// Call counts one provider call: class is "" when it succeeded. It has
// the signature of generator.CallObserver.
func (g *Generators) Call(generator, call, class string, d time.Duration) {
	g.calls.WithLabelValues(generator, call).Inc()
	g.seconds.WithLabelValues(generator, call).Observe(d.Seconds())
	if class != "" {
		g.errors.WithLabelValues(generator, class).Inc()
	}
}
