package main

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"studio/metrics"
)

// pgxPoolCollector reports a PostgreSQL connection pool's statistics, read
// at each scrape, as studio_pgxpool_*: the connections open, in use and
// idle, the limit, and how often (and how long) requests for a connection
// had to wait.
type pgxPoolCollector struct {
	pool *pgxpool.Pool

	total, acquired, idle, max               *prometheus.Desc
	acquires, emptyAcquires, canceledAcquire *prometheus.Desc
	acquireSeconds                           *prometheus.Desc
}

func newPgxPoolCollector(pool *pgxpool.Pool) *pgxPoolCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "pgxpool", name), help, nil, nil)
	}
	return &pgxPoolCollector{
		pool:            pool,
		total:           d("conns", "Connections open (in use, idle and being opened)."),
		acquired:        d("acquired_conns", "Connections in use."),
		idle:            d("idle_conns", "Idle connections."),
		max:             d("max_conns", "The pool's limit."),
		acquires:        d("acquires_total", "Connections handed out."),
		emptyAcquires:   d("empty_acquires_total", "Requests for a connection that found none idle and waited."),
		canceledAcquire: d("canceled_acquires_total", "Requests for a connection given up (context ended)."),
		acquireSeconds:  d("acquire_seconds_total", "Time spent getting connections."),
	}
}

func (c *pgxPoolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.total, c.acquired, c.idle, c.max, c.acquires, c.emptyAcquires, c.canceledAcquire, c.acquireSeconds} {
		ch <- d
	}
}

func (c *pgxPoolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(c.total, float64(s.TotalConns()))
	gauge(c.acquired, float64(s.AcquiredConns()))
	gauge(c.idle, float64(s.IdleConns()))
	gauge(c.max, float64(s.MaxConns()))
	counter(c.acquires, float64(s.AcquireCount()))
	counter(c.emptyAcquires, float64(s.EmptyAcquireCount()))
	counter(c.canceledAcquire, float64(s.CanceledAcquireCount()))
	counter(c.acquireSeconds, s.AcquireDuration().Seconds())
}
