package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"studio/httpapi"
	"studio/intent"
	"studio/metrics"
	"studio/store/postgres"
)

// newMetrics makes the process's registry and the collectors that read the
// store: its connection pools and its tasks by state, where the store can
// tell them.
func (m *Main) newMetrics() (*metrics.Metrics, error) {
	mx := metrics.New()
	if s, ok := m.store.(interface {
		DB() *sql.DB
		ReadDB() *sql.DB
	}); ok {
		if err := mx.DBPool("write", s.DB()); err != nil {
			return nil, err
		}
		if err := mx.DBPool("read", s.ReadDB()); err != nil {
			return nil, err
		}
	}
	if s, ok := m.store.(*postgres.Store); ok {
		if err := mx.Registry().Register(newPgxPoolCollector(s.Pool())); err != nil {
			return nil, fmt.Errorf("register the PostgreSQL pool: %w", err)
		}
	}
	if s, ok := m.store.(interface {
		CountTasks(context.Context) (intent.Counts, error)
	}); ok {
		if err := mx.TaskStates(s.CountTasks); err != nil {
			return nil, err
		}
	}
	return mx, nil
}

// observeRequests feeds each answered request to the metrics.
func observeRequests(mx *metrics.Metrics) func(httpapi.RequestRecord) {
	return func(r httpapi.RequestRecord) { mx.Request(r.Method, r.Route, r.Status, r.Duration) }
}

// loggedService is the intent service with one log line per batch created
// or replayed (conflicts and refusals show in the request line). It embeds
// the service, so every other method passes through unchanged.
type loggedService struct {
	*intent.Service
	log *slog.Logger
}

// CreateGeneration runs the service and logs the batch it answers with.
func (s loggedService) CreateGeneration(ctx context.Context, actor, requestID string, in intent.GenerationInput) (intent.GenerationResult, error) {
	start := time.Now()
	res, err := s.Service.CreateGeneration(ctx, actor, requestID, in)
	if err != nil {
		return res, err
	}
	msg := "batch created"
	if res.Replayed {
		msg = "batch replayed"
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, msg,
		slog.String("batch_id", res.Batch.ID),
		slog.String("actor", actor),
		slog.String("request_id", requestID),
		slog.Int("tasks", res.Batch.TaskCount),
		slog.Float64("duration_ms", msSince(start)))
	return res, nil
}

// readableDurations writes every duration attribute as milliseconds under
// the key with "_ms" added ("duration" becomes "duration_ms": 1.234), the
// same in JSON and text, instead of nanoseconds in JSON.
func readableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.Float64(a.Key+"_ms", float64(a.Value.Duration().Microseconds())/1000)
	}
	return a
}
