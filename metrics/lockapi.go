package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of an acquire of the lock API, and the ways a lease ends: the
// fixed label values of LockAPI's series.
var (
	lockAcquireOutcomes = []string{"acquired", "replayed", "busy", "conflict", "invalid", "error"}
	lockEndStates       = []string{"released", "expired", "lost"}
)

// LockAPI registers the lock API's instruments: studio_lock_api_acquires_total
// {outcome}, studio_lock_api_leases_ended_total{state} and the gauge
// studio_lock_api_leases_held, read from held at each scrape. It returns
// the function that counts what happened: an acquire's outcome or a lease's
// end (either may be ""). A value outside the fixed sets counts as "error"
// (acquires) or is dropped (ends), so the label sets never grow.
func (m *Metrics) LockAPI(held func() int) (observe func(acquire, ended string), err error) {
	acquires := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "lock_api_acquires_total",
		Help: "Acquires of the HTTP lock API by outcome: acquired, replayed (a retry answered its lease), busy (not free within the wait), conflict, invalid, error.",
	}, []string{"outcome"})
	ended := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "lock_api_leases_ended_total",
		Help: "Leases of the HTTP lock API that ended, by how: released by the holder, expired (no renewal within the TTL), lost (the lock store refused a renewal, or the server stopped).",
	}, []string{"state"})
	gauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "lock_api_leases_held",
		Help: "Leases of the HTTP lock API held now.",
	}, func() float64 { return float64(held()) })
	for _, c := range []prometheus.Collector{acquires, ended, gauge} {
		if err := m.reg.Register(c); err != nil {
			return nil, fmt.Errorf("register lock api metrics: %w", err)
		}
	}
	known := map[string]bool{}
	for _, o := range lockAcquireOutcomes {
		acquires.WithLabelValues(o)
		known[o] = true
	}
	ends := map[string]bool{}
	for _, s := range lockEndStates {
		ended.WithLabelValues(s)
		ends[s] = true
	}
	return func(acquire, end string) {
		if acquire != "" {
			if !known[acquire] {
				acquire = "error"
			}
			acquires.WithLabelValues(acquire).Inc()
		}
		if ends[end] {
			ended.WithLabelValues(end).Inc()
		}
	}, nil
}
