package postgres

import (
	"context"
	"fmt"

	"studio/intent"
)

// CountTasks counts every task by state, for the tasks gauge of /metrics.
// It sums the counts kept on the batch rows and their shards (migration
// 0102), in one statement: one pass over batches and one over batch_counts,
// none over tasks.
func (s *Store) CountTasks(ctx context.Context) (intent.Counts, error) {
	var c intent.Counts
	err := s.pool.QueryRow(ctx, `SELECT sum(queued)::bigint, sum(running)::bigint, sum(succeeded)::bigint, sum(failed)::bigint, sum(canceled)::bigint FROM (
		SELECT COALESCE(sum(queued), 0) AS queued, COALESCE(sum(running), 0) AS running, COALESCE(sum(succeeded), 0) AS succeeded,
			COALESCE(sum(failed), 0) AS failed, COALESCE(sum(canceled), 0) AS canceled FROM batches
		UNION ALL
		SELECT COALESCE(sum(queued), 0), COALESCE(sum(running), 0), COALESCE(sum(succeeded), 0),
			COALESCE(sum(failed), 0), COALESCE(sum(canceled), 0) FROM batch_counts) t`).
		Scan(&c.Queued, &c.Running, &c.Succeeded, &c.Failed, &c.Canceled)
	if err != nil {
		return intent.Counts{}, fmt.Errorf("count tasks: %w", err)
	}
	return c, nil
}
