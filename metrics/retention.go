package metrics

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"studio/store"
)

// Retention reports what is kept and what retention removed: gauges of the
// rows and asset bytes kept, read from usage at scrape time, and counters
// of what deletions and prunes removed, which the returned function adds.
func (m *Metrics) Retention(usage func(context.Context) (store.Usage, error)) (removed func(store.Deleted), err error) {
	kept := &usageCollector{usage: usage, desc: prometheus.NewDesc(
		prometheus.BuildFQName(Namespace, "", "kept"),
		"Rows and bytes kept, counted at scrape time: batches, tasks, assets and asset_bytes.", []string{"what"}, nil)}
	gone := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "removed_total",
		Help: "Rows and bytes removed by batch deletions and prunes: batches, tasks, assets and asset_bytes.",
	}, []string{"what"})
	for _, c := range []prometheus.Collector{kept, gone} {
		if err := m.reg.Register(c); err != nil {
			return nil, fmt.Errorf("register retention metrics: %w", err)
		}
	}
	for _, w := range []string{"batches", "tasks", "assets", "asset_bytes"} {
		gone.WithLabelValues(w) // present at 0 from the start
	}
	return func(d store.Deleted) {
		gone.WithLabelValues("batches").Add(float64(d.Batches))
		gone.WithLabelValues("tasks").Add(float64(d.Tasks))
		gone.WithLabelValues("assets").Add(float64(d.Assets))
		gone.WithLabelValues("asset_bytes").Add(float64(d.AssetBytes))
	}, nil
}

type usageCollector struct {
	desc  *prometheus.Desc
	usage func(context.Context) (store.Usage, error)
}

func (c *usageCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *usageCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), countTimeout)
	defer cancel()
	u, err := c.usage(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, fmt.Errorf("usage: %w", err))
		return
	}
	for w, v := range map[string]int64{"batches": u.Batches, "tasks": u.Tasks, "assets": u.Assets, "asset_bytes": u.AssetBytes} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(v), w)
	}
}
