package main

import (
	"context"
	"io"
	"log/slog"
	"time"

	"studio/blob"
	"studio/httpapi"
	"studio/intent"
	"studio/locks"
	"studio/metrics"
	"studio/store"
	"studio/worker"
)

// wrappers puts the process's cross-cutting concerns (metrics, log lines,
// the lock engine) around the parts that serve requests and run work: every
// such wrapper is made here, and nowhere else.
type wrappers struct {
	log     *slog.Logger
	metrics *metrics.Metrics
	locks   *locks.Engine
}

// intentStore times commits.
func (w wrappers) intentStore(s intent.IntentStore) intent.IntentStore {
	return w.metrics.IntentStore(s)
}

// planner times and logs plans.
func (w wrappers) planner(p intent.Planner) intent.Planner {
	return w.metrics.Planner(loggedPlanner{p, w.log})
}

// locker is the lock engine as the intent service's Locker, timed under
// the lock's name.
func (w wrappers) locker(name string) intent.Locker {
	return w.metrics.Locker(name, locks.Keyed{E: w.locks})
}

// generations logs every batch created or replayed.
func (w wrappers) generations(s *intent.Service) httpapi.Generations {
	return loggedService{s, w.log}
}

// requests feeds each answered request to the metrics.
func (w wrappers) requests() func(httpapi.RequestRecord) {
	return func(r httpapi.RequestRecord) {
		w.metrics.Request(r.Method, r.Route, r.Status, r.Duration)
		switch r.Fault {
		case "":
		case string(store.FaultAssetStore):
			w.metrics.AssetFault(metrics.AssetUnavailable)
		case httpapi.FaultAssetCorrupt:
			w.metrics.AssetFault(metrics.AssetCorrupt)
		default:
			w.metrics.Fault(r.Fault)
		}
	}
}

// attempts counts each task attempt's outcome, and lost leases apart.
func (w wrappers) attempts() func(worker.Outcome) {
	return func(outcome worker.Outcome) {
		w.metrics.Attempt(string(outcome))
		if outcome == worker.OutcomeLost {
			w.metrics.LeaseLost()
		}
	}
}

// loggedPlanner logs every plan made (at debug level): how many tasks, how
// long it took.
type loggedPlanner struct {
	p   intent.Planner
	log *slog.Logger
}

func (l loggedPlanner) PlanGeneration(ctx context.Context, actor string, in *intent.GenerationInput) ([]intent.PlannedTask, error) {
	start := time.Now()
	tasks, err := l.p.PlanGeneration(ctx, actor, in)
	l.log.Debug("planned", "actor", actor, "tasks", len(tasks), "ok", err == nil, "duration_ms", msSince(start))
	return tasks, err
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
	if err == nil {
		s.logBatch(ctx, res, actor, requestID, start)
	}
	return res, err
}

// ReplayGeneration runs the service and logs the batch it replays.
func (s loggedService) ReplayGeneration(ctx context.Context, actor, requestID, fp string) (intent.GenerationResult, bool, error) {
	start := time.Now()
	res, ok, err := s.Service.ReplayGeneration(ctx, actor, requestID, fp)
	if ok && err == nil {
		s.logBatch(ctx, res, actor, requestID, start)
	}
	return res, ok, err
}

func (s loggedService) logBatch(ctx context.Context, res intent.GenerationResult, actor, requestID string, start time.Time) {
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
}

// blobWriter adapts the blob store to the Uploads port.
type blobWriter struct{ b blob.Store }

func (w blobWriter) Put(ctx context.Context, r io.Reader) (string, int64, error) {
	info, err := w.b.Put(ctx, r)
	return info.SHA256, info.Size, err
}

// msSince is the time since start in milliseconds, for log lines.
func msSince(start time.Time) float64 {
	return float64(time.Since(start).Microseconds()) / 1000
}
