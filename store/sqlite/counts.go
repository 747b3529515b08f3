package sqlite

import (
	"context"
	"fmt"

	"studio/intent"
)

// CountTasks counts every task by state, for the tasks gauge of /metrics.
// It sums the counts kept on the batch rows: one pass over batches, none
// over tasks.
func (s *Store) CountTasks(ctx context.Context) (intent.Counts, error) {
	var c intent.Counts
	err := s.read(ctx, func(t *tx) error {
		return t.queryRow(`SELECT COALESCE(SUM(queued), 0), COALESCE(SUM(running), 0),
		COALESCE(SUM(succeeded), 0), COALESCE(SUM(failed), 0), COALESCE(SUM(canceled), 0) FROM batches`).
			Scan(&c.Queued, &c.Running, &c.Succeeded, &c.Failed, &c.Canceled)
	})
	if err != nil {
		return intent.Counts{}, fmt.Errorf("count tasks: %w", err)
	}
	return c, nil
}
