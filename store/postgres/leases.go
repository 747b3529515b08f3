package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"studio/intent"
	"studio/store"
)

// The lease queue (store.LeaseStore): one set of statements over the two
// tables of leased rows, tasks and publication_items, built from what a
// lane says of its kind (its table, its parent, whether the parent can be
// asked to cancel). The kinds supply the rest: the order in which queued
// rows are claimed (fair share for tasks, claimQueuedSQL; oldest first
// for items) and the payload a claim answers. Leases are measured by the
// database's clock, clock_timestamp(), read by the statements themselves;
// every write of a row names its fence and checks the lease is live; the
// parent's counts move in the same transaction as its rows.
//
// Locks are taken in one order so that concurrent transactions cannot
// deadlock: leased rows first (tasks before items, each in id order), then
// batch rows (in batch id order), then count rows (batch shards, then
// publications, in id order, at the commit). The exceptions never wait:
// CancelBatch locks its batch first but takes the queued tasks with SKIP
// LOCKED, and claims take rows with SKIP LOCKED. Row locks are FOR NO KEY
// UPDATE, which does not conflict with the key-share locks that
// foreign-key checks take.
//
// A task re-queued by FailLease or ReleaseLeases reads its batch's
// cancel_requested under the batch row's lock, so it cannot be re-queued
// behind a cancel that already swept the queue; a claim that meets a
// queued task of a batch asked to cancel (only left by a claim that
// rolled back) cancels it instead of running it.

// taskTx is one write transaction of the lease methods: the wall clock for
// updated_at, and the parents' counts that move.
type taskTx struct {
	s      *Store
	tx     pgx.Tx
	wall   time.Time         // s.now()
	deltas store.CountDeltas // batches' counts
	pubs   store.CountDeltas // publications' counts
	// retryAt is when a failed row is claimable again (its wake-up).
	retryAt time.Time
}

func (s *Store) beginTask(ctx context.Context) (*taskTx, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &taskTx{s: s, tx: tx, wall: stamp(s.now()), deltas: store.CountDeltas{}, pubs: store.CountDeltas{}}, nil
}

func (t *taskTx) commit(ctx context.Context) error {
	wakes := append(store.TaskWakes(t.deltas, t.retryAt), store.ItemWakes(t.pubs, t.retryAt)...)
	if err := applyBatchDeltas(ctx, t.tx, t.wall, t.deltas, t.s.payload(wakes)); err != nil {
		return err
	}
	if err := applyPublicationDeltas(ctx, t.tx, t.wall, t.pubs); err != nil {
		return err
	}
	if err := t.tx.Commit(ctx); err != nil {
		return err
	}
	// Every task whose state moved moved its batch's counts.
	t.s.wakes.hub.Publish(wakes...)
	return nil
}

// rollback ends the transaction if commit did not; its error is of no use
// after a commit or a failure already reported.
func (t *taskTx) rollback(ctx context.Context) { _ = t.tx.Rollback(ctx) }

// inLeaseTx runs f in one transaction and commits what it did with the
// parents' counts, unless it fails. The wait store.WithWait set on ctx,
// if any, bounds its waits for row and table locks too (lock_timeout, set
// by pool.BeginTx): a claim that would wait longer answers a busy fault
// instead.
func (s *Store) inLeaseTx(ctx context.Context, f func(t *taskTx) error) error {
	t, err := s.beginTask(ctx)
	if err != nil {
		return err
	}
	defer t.rollback(ctx)
	if err := f(t); err != nil {
		return err
	}
	if err := t.commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", interpret(err))
	}
	s.outage.Wrote() // the database takes our writes again: an outage is over
	return nil
}

// ttlRoundUp rounds a lease length up to whole microseconds, what
// timestamptz keeps: a lease never ends before its holder expects.
func ttlRoundUp(d time.Duration) time.Duration {
	return (d + time.Microsecond - 1).Truncate(time.Microsecond)
}

// liveLease is the condition of every fenced write: this claim, still
// running, not expired by the database's clock. Its parameters are $1 id,
// $2 fence.
const liveLease = `id = $1 AND fence = $2 AND state = 'running' AND lease_expires_at > clock_timestamp()`

// lane is one kind of leased row: its table and parent, and the lease
// statements built from them.
type lane struct {
	kind       store.Kind
	table      string
	cancelable bool
	counts     func(*taskTx) store.CountDeltas

	claimable, findExpired, cancelExpired, failExpired, reclaim, renew, cancelLive, lockLive, fail, release string
}

// newLane builds the statements of a kind. parent is the column naming
// the parent row; canceling(row) is SQL that is true when the parent of
// row (a table name or alias) was asked to cancel; stamp is set on every
// change of a row's state.
func newLane(kind store.Kind, table, parent string, canceling func(row string) string, stamp string, counts func(*taskTx) store.CountDeltas) *lane {
	r := strings.NewReplacer("{table}", table, "{parent}", parent, "{canceling}", canceling(table),
		"{x.canceling}", canceling("x"), "{stamp}", stamp)
	end := `lease_owner = NULL, lease_expires_at = NULL, updated_at = $3{stamp}`
	return &lane{
		kind:       kind,
		table:      table,
		cancelable: canceling("x") != "false",
		counts:     counts,
		claimable: r.Replace(`SELECT EXISTS (SELECT 1 FROM {table} WHERE state = 'queued')
			OR EXISTS (SELECT 1 FROM {table} WHERE state = 'running' AND lease_expires_at <= clock_timestamp())`),
		// The claim's "now" and the expired leases by it, oldest expiry
		// first, skipping any another transaction holds.
		findExpired: r.Replace(`WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t)
			SELECT now.t, e.id, e.parent, e.fence, e.attempts, e.used, e.cancel_requested, e.lease_expires_at
			FROM now LEFT JOIN LATERAL (
				SELECT x.id, x.{parent} AS parent, x.fence, x.attempts, x.attempts - x.released AS used,
					{x.canceling} AS cancel_requested, x.lease_expires_at
				FROM {table} x
				WHERE x.state = 'running' AND x.lease_expires_at <= now.t
				ORDER BY x.lease_expires_at, x.id LIMIT $1
				FOR NO KEY UPDATE OF x SKIP LOCKED) e ON true`),
		cancelExpired: r.Replace(`UPDATE {table} SET state = 'canceled', ` + end + ` WHERE id = $1 AND fence = $2`),
		failExpired:   r.Replace(`UPDATE {table} SET state = 'failed', error = $4, ` + end + ` WHERE id = $1 AND fence = $2`),
		// A lease that expired in an outage of this process's calls is
		// taken back as if it had been released ($6 = 1).
		reclaim: r.Replace(`UPDATE {table} SET fence = fence + 1, attempts = attempts + 1, released = released + $6,
			lease_owner = $3, lease_expires_at = $4, updated_at = $5{stamp}
			WHERE id = $1 AND fence = $2 RETURNING state, id, {parent}, fence, attempts, lease_expires_at`),
		// The leases are locked in id order (the sorted input, ordinality
		// kept), then renewed.
		renew: r.Replace(`WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
			l AS (
				SELECT x.id FROM {table} x JOIN unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(id, fence, ord)
					ON x.id = u.id AND x.fence = u.fence
				WHERE x.state = 'running' AND x.lease_expires_at > (SELECT now.t FROM now) AND x.lease_owner = $3
				ORDER BY u.ord FOR NO KEY UPDATE OF x
			)
			UPDATE {table} x SET lease_expires_at = (SELECT now.t FROM now) + $4::interval FROM l WHERE x.id = l.id
			RETURNING x.id, {x.canceling}, x.lease_expires_at`),
		cancelLive: r.Replace(`UPDATE {table} SET state = 'canceled', ` + end + `
			WHERE ` + liveLease + ` AND {canceling} RETURNING {parent}`),
		lockLive: r.Replace(`SELECT {parent}, attempts - released FROM {table} WHERE ` + liveLease + ` FOR NO KEY UPDATE`),
		fail: r.Replace(`UPDATE {table} SET state = $4, error = $5, run_after = clock_timestamp() + $6::interval,
			` + end + ` WHERE id = $1 AND fence = $2`),
		release: r.Replace(`UPDATE {table} SET state = $4, released = released + 1, run_after = clock_timestamp(),
			` + end + ` WHERE id = $1 AND fence = $2`),
	}
}

// The two kinds.
var (
	taskLane = newLane(store.KindTask, "tasks", "batch_id",
		func(row string) string {
			return `(SELECT b.cancel_requested FROM batches b WHERE b.id = ` + row + `.batch_id)`
		},
		`, changed_xid = pg_current_xact_id()`, func(t *taskTx) store.CountDeltas { return t.deltas })
	itemLane = newLane(store.KindItem, "publication_items", "publication_id",
		func(string) string { return "false" }, "", func(t *taskTx) store.CountDeltas { return t.pubs })
	lanes = []*lane{taskLane, itemLane} // in lock order
)

// laneOf is the lane of a kind.
func laneOf(k store.Kind) (*lane, error) {
	for _, l := range lanes {
		if l.kind == k {
			return l, nil
		}
	}
	return nil, fmt.Errorf("no lease queue of kind %q", k)
}

// scanLeased reads claimed rows (state, then store.Claimed's columns).
// Rows that came back canceled are not claims: their parents are
// answered, for a claim that canceled them.
func scanLeased(rows pgx.Rows) (got []store.Claimed, canceled []string, err error) {
	var l store.Claimed
	var state string
	var expires *time.Time
	_, err = pgx.ForEachRow(rows, []any{&state, &l.ID, &l.Parent, &l.Fence, &l.Attempt, &expires}, func() error {
		if intent.State(state) != intent.StateRunning {
			canceled = append(canceled, l.Parent)
			return nil
		}
		l.ExpiresAt = expires.UTC()
		got = append(got, l)
		return nil
	})
	return got, canceled, err
}

// claim leases up to p.Limit rows of l's kind: running rows whose lease
// expired first, then queued ones in the kind's order (queued: it takes
// up to n rows and moves their parents' counts), and reads their payload
// (load), in one transaction. An idle worker polls: one read says whether
// a claim may find anything before a transaction is begun for it.
func claim[C any](ctx context.Context, s *Store, l *lane, p store.ClaimParams,
	queued func(t *taskTx, now, expires time.Time, n int) ([]store.Claimed, error),
	load func(ctx context.Context, t *taskTx, ls []store.Claimed) ([]C, error)) ([]C, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	var maybe bool
	if err := s.pool.QueryRow(ctx, l.claimable).Scan(&maybe); err != nil {
		return nil, err
	}
	if !maybe {
		return nil, nil
	}
	var out []C
	err := s.inLeaseTx(ctx, func(t *taskTx) error {
		now, got, err := t.reclaimExpired(ctx, l, p, &s.outage)
		if err != nil {
			return err
		}
		if n := p.Limit - len(got); n > 0 {
			fresh, err := queued(t, now, now.Add(ttlRoundUp(p.TTL)), n)
			if err != nil {
				return err
			}
			got = append(got, fresh...)
		}
		if len(got) > 0 {
			out, err = load(ctx, t, got)
		}
		return err
	})
	return out, err
}

// reclaimExpired reads the database's clock (the claim's "now") and
// handles running rows whose lease expired by it, oldest expiry first, at
// most p.Limit of them, skipping any another transaction holds: canceled
// if their parent was asked to cancel, failed if they used every attempt,
// otherwise claimed again under a new fence. A lease that expired in an
// outage of this process's lease calls (store.LeaseOutage) is taken back
// as released: its try does not count against the attempts.
func (t *taskTx) reclaimExpired(ctx context.Context, l *lane, p store.ClaimParams, outage *store.LeaseOutage) (time.Time, []store.Claimed, error) {
	rows, err := t.tx.Query(ctx, l.findExpired, p.Limit)
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("find expired leases: %w", err)
	}
	type expired struct {
		id, parent      string
		fence           int64
		attempts, used  int
		cancelRequested bool
		expiredAt       time.Time
	}
	var found []expired
	var now time.Time
	var id, parent *string
	var fence *int64
	var attempts, used *int
	var cancelRequested *bool
	var expiredAt *time.Time
	if _, err := pgx.ForEachRow(rows, []any{&now, &id, &parent, &fence, &attempts, &used, &cancelRequested, &expiredAt}, func() error {
		if id != nil {
			found = append(found, expired{*id, *parent, *fence, *attempts, *used, *cancelRequested, *expiredAt})
		}
		return nil
	}); err != nil {
		return time.Time{}, nil, fmt.Errorf("find expired leases: %w", err)
	}
	expires := now.Add(ttlRoundUp(p.TTL))
	var outages []store.Window
	if len(found) > 0 {
		outages = outage.Windows(now)
	}
	var out []store.Claimed
	for _, e := range found {
		released := 0
		if store.InOutage(outages, e.expiredAt) {
			released, e.used = 1, e.used-1
		}
		switch state, msg := store.ExpiredEnd(e.cancelRequested, e.attempts, e.used, p.MaxAttempts); state {
		case intent.StateCanceled:
			if _, err := t.tx.Exec(ctx, l.cancelExpired, e.id, e.fence, t.wall); err != nil {
				return time.Time{}, nil, fmt.Errorf("cancel expired %s: %w", l.kind, err)
			}
			l.counts(t).Of(e.parent).Move(intent.StateRunning, state)
		case intent.StateFailed:
			if _, err := t.tx.Exec(ctx, l.failExpired, e.id, e.fence, t.wall, msg); err != nil {
				return time.Time{}, nil, fmt.Errorf("fail expired %s: %w", l.kind, err)
			}
			l.counts(t).Of(e.parent).Move(intent.StateRunning, state)
		default:
			rows, err := t.tx.Query(ctx, l.reclaim, e.id, e.fence, p.Owner, expires, t.wall, released)
			if err != nil {
				return time.Time{}, nil, fmt.Errorf("reclaim expired %s: %w", l.kind, err)
			}
			got, _, err := scanLeased(rows)
			if err != nil {
				return time.Time{}, nil, fmt.Errorf("reclaim expired %s: %w", l.kind, err)
			}
			out = append(out, got...)
		}
	}
	return now, out, nil
}

// ClaimTasks leases up to p.Limit tasks: expired leases first, then queued
// tasks in fair-share order (claimQueuedSQL), in one transaction.
func (s *Store) ClaimTasks(ctx context.Context, p store.ClaimParams) (_ []store.ClaimedTask, err error) {
	defer s.noteLease(ctx, time.Now(), &err)
	cs, err := claim(ctx, s, taskLane, p, func(t *taskTx, now, expires time.Time, n int) ([]store.Claimed, error) {
		rows, err := t.tx.Query(ctx, claimQueuedSQL, p.Owner, expires, t.wall, now, max(2*n, 8), n, 2*n+8, skipList(p.SkipGenerators))
		if err != nil {
			return nil, err
		}
		got, canceled, err := scanLeased(rows)
		if err != nil {
			return nil, err
		}
		for _, c := range got {
			t.deltas.Of(c.Parent).Move(intent.StateQueued, intent.StateRunning)
		}
		for _, batch := range canceled {
			t.deltas.Of(batch).Move(intent.StateQueued, intent.StateCanceled)
		}
		return got, nil
	}, loadTasks)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	return cs, nil
}

// loadTasks reads the claimed tasks' payload: what the generator needs,
// and its batch's spec, one slice per batch.
func loadTasks(ctx context.Context, t *taskTx, ls []store.Claimed) ([]store.ClaimedTask, error) {
	out, byID := store.ClaimedTasks(ls)
	rows, err := t.tx.Query(ctx, `SELECT t.id, t.actor, t.collection, t.frame, t.generator, t.candidate, t.step, t.provider_ref, b.spec
		FROM tasks t JOIN batches b ON b.id = t.batch_id WHERE t.id = ANY ($1)`, store.ClaimedIDs(ls))
	if err != nil {
		return nil, fmt.Errorf("read claimed tasks: %w", err)
	}
	specs := map[string][]byte{}
	var c store.ClaimedTask
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&id, &c.Actor, &c.Collection, &c.Frame, &c.Generator, &c.Candidate, &c.Step, &c.ProviderRef, &c.Spec}, func() error {
		o := byID[id]
		o.Actor, o.Collection, o.Frame, o.Generator, o.Candidate, o.Step, o.ProviderRef = c.Actor, c.Collection, c.Frame, c.Generator, c.Candidate, c.Step, c.ProviderRef
		spec, ok := specs[o.BatchID]
		if !ok {
			spec = c.Spec
			specs[o.BatchID] = spec
		}
		o.Spec = spec
		c.Spec = nil // a fresh slice for the next row
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read claimed tasks: %w", err)
	}
	return out, nil
}

// claimItemsSQL leases the oldest ready queued items, each taken with FOR
// NO KEY UPDATE SKIP LOCKED so concurrent claimers take different items.
// Parameters: $1 owner, $2 expires, $3 wall, $4 now, $5 n.
const claimItemsSQL = `UPDATE publication_items SET state = 'running', fence = fence + 1, attempts = attempts + 1,
		lease_owner = $1, lease_expires_at = $2, updated_at = $3
	WHERE id IN (SELECT id FROM publication_items WHERE state = 'queued' AND run_after <= $4
		ORDER BY id LIMIT $5 FOR NO KEY UPDATE SKIP LOCKED)
	RETURNING state, id, publication_id, fence, attempts, lease_expires_at`

// ClaimItems leases up to p.Limit publication items: expired leases
// first, then queued items oldest first, in one transaction.
func (s *Store) ClaimItems(ctx context.Context, p store.ClaimParams) (_ []store.ClaimedItem, err error) {
	defer s.noteLease(ctx, time.Now(), &err)
	cs, err := claim(ctx, s, itemLane, p, func(t *taskTx, now, expires time.Time, n int) ([]store.Claimed, error) {
		rows, err := t.tx.Query(ctx, claimItemsSQL, p.Owner, expires, t.wall, now, n)
		if err != nil {
			return nil, err
		}
		got, _, err := scanLeased(rows)
		if err != nil {
			return nil, err
		}
		for _, c := range got {
			t.pubs.Of(c.Parent).Move(intent.StateQueued, intent.StateRunning)
		}
		// RETURNING keeps no order: answer in id (creation) order.
		slices.SortFunc(got, func(a, b store.Claimed) int { return strings.Compare(a.ID, b.ID) })
		return got, nil
	}, loadItems)
	if err != nil {
		return nil, fmt.Errorf("claim items: %w", err)
	}
	return cs, nil
}

// loadItems reads the claimed items' payload: each with its publication,
// its asset and the task that made it.
func loadItems(ctx context.Context, t *taskTx, ls []store.Claimed) ([]store.ClaimedItem, error) {
	items, err := queryItems(ctx, t.tx, `i.id = ANY ($1)`, store.ClaimedIDs(ls))
	if err != nil {
		return nil, fmt.Errorf("read claimed items: %w", err)
	}
	return store.ClaimedItems(ls, items), nil
}

// byLane orders item indexes by lane (in lock order) and id, so
// transactions that write several rows lock them in one order.
func byLane(n int, lease func(i int) store.Lease) ([]int, error) {
	idx := make([]int, n)
	rank := make([]int, n)
	for i := range idx {
		idx[i] = i
		l, err := laneOf(lease(i).Kind)
		if err != nil {
			return nil, err
		}
		rank[i] = slices.Index(lanes, l)
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		if rank[a] != rank[b] {
			return rank[a] - rank[b]
		}
		return strings.Compare(lease(a).ID, lease(b).ID)
	})
	return idx, nil
}

// RenewLeases extends the owner's live leases, one statement per kind.
func (s *Store) RenewLeases(ctx context.Context, p store.RenewParams) (_ store.RenewResult, err error) {
	defer s.noteLease(ctx, time.Now(), &err)
	var res store.RenewResult
	if err := p.Check(); err != nil {
		return res, fmt.Errorf("renew leases: %w", err)
	}
	if len(p.Leases) == 0 {
		return res, nil
	}
	order, err := byLane(len(p.Leases), func(i int) store.Lease { return p.Leases[i] })
	if err != nil {
		return res, fmt.Errorf("renew leases: %w", err)
	}
	renewed := map[store.Lease]bool{} // lease (fence 0) -> canceling
	var expires time.Time
	err = s.inLeaseTx(ctx, func(t *taskTx) error {
		for _, l := range lanes {
			var ids []string
			var fences []int64
			for _, i := range order {
				if p.Leases[i].Kind == l.kind {
					ids, fences = append(ids, p.Leases[i].ID), append(fences, p.Leases[i].Fence)
				}
			}
			if len(ids) == 0 {
				continue
			}
			rows, err := t.tx.Query(ctx, l.renew, ids, fences, p.Owner, ttlRoundUp(p.TTL))
			if err != nil {
				return err
			}
			var id string
			var canceling bool
			if _, err := pgx.ForEachRow(rows, []any{&id, &canceling, &expires}, func() error {
				renewed[store.Lease{Kind: l.kind, ID: id}] = canceling
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return store.RenewResult{}, fmt.Errorf("renew leases: %w", err)
	}
	for _, l := range p.Leases {
		canceling, ok := renewed[store.Lease{Kind: l.Kind, ID: l.ID}]
		switch {
		case !ok:
			res.Lost = append(res.Lost, l.ID)
		case canceling:
			res.Canceled = append(res.Canceled, l.ID)
		}
	}
	if len(renewed) > 0 {
		res.ExpiresAt = expires.UTC()
	}
	return res, nil
}

// completeTaskSQL ends one live lease of a task, fenced: canceled when its
// batch was asked to cancel, else succeeded, naming the asset already
// stored for the task, if any, else the new one, which it inserts only
// when the task succeeded naming it. It answers the task's batch, asset
// and new state, or no row when the lease is not live. Parameters: $1
// task, $2 fence, $3 wall, $4 asset id, $5 sha256, $6 content type, $7
// size, $8 width, $9 height.
const completeTaskSQL = `WITH done AS (
		UPDATE tasks SET state = CASE WHEN ` + taskCanceling + ` THEN 'canceled' ELSE 'succeeded' END,
			error = CASE WHEN ` + taskCanceling + ` THEN error END,
			asset_id = CASE WHEN ` + taskCanceling + ` THEN asset_id
				ELSE COALESCE((SELECT a.id FROM assets a WHERE a.task_id = tasks.id), $4) END,
			lease_owner = NULL, lease_expires_at = NULL, updated_at = $3, changed_xid = pg_current_xact_id()
		WHERE ` + liveLease + `
		RETURNING id, batch_id, actor, asset_id, state
	), ins AS (
		INSERT INTO assets (id, actor, task_id, sha256, content_type, size, width, height, created_at)
		SELECT $4, done.actor, done.id, $5::text, $6::text, $7::bigint, $8::integer, $9::integer, $3 FROM done
		WHERE done.state = 'succeeded' AND done.asset_id = $4
	)
	SELECT batch_id, COALESCE(asset_id, ''), state FROM done`

// taskCanceling is true once the task's batch was asked to cancel.
const taskCanceling = `(SELECT b.cancel_requested FROM batches b WHERE b.id = tasks.batch_id)`

// completeItemSQL ends one live lease of an item with success, in the
// shape of completeTaskSQL's answer. Parameters: $1 item, $2 fence, $3
// wall.
const completeItemSQL = `UPDATE publication_items SET state = 'succeeded', error = NULL,
	lease_owner = NULL, lease_expires_at = NULL, updated_at = $3 WHERE ` + liveLease + `
	RETURNING publication_id, '', state`

// CompleteLeases ends leases with success, fenced (a task with its asset,
// or canceled when its batch was asked to cancel): one statement per
// lease, all sent in one round trip, in lock order.
func (s *Store) CompleteLeases(ctx context.Context, cs []store.Completion) (_ []store.CompletionResult, err error) {
	defer s.noteLease(ctx, time.Now(), &err)
	if len(cs) == 0 {
		return nil, nil
	}
	if err := store.CheckCompletions(cs); err != nil {
		return nil, fmt.Errorf("complete leases: %w", err)
	}
	order, err := byLane(len(cs), func(i int) store.Lease { return cs[i].Lease })
	if err != nil {
		return nil, fmt.Errorf("complete leases: %w", err)
	}
	out := make([]store.CompletionResult, len(cs))
	err = s.inLeaseTx(ctx, func(t *taskTx) error {
		var b pgx.Batch
		for _, i := range order {
			c := cs[i]
			if c.Kind == store.KindTask {
				a := c.Asset
				b.Queue(completeTaskSQL, c.ID, c.Fence, t.wall, a.ID, a.SHA256, a.ContentType, a.Size, a.Width, a.Height)
			} else {
				b.Queue(completeItemSQL, c.ID, c.Fence, t.wall)
			}
		}
		br := t.tx.SendBatch(ctx, &b)
		for _, i := range order {
			l, _ := laneOf(cs[i].Kind)
			var parent, assetID, state string
			err := br.QueryRow().Scan(&parent, &assetID, &state)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				out[i].Err = store.ErrLeaseLost
				continue
			case err != nil:
				_ = br.Close()
				return fmt.Errorf("complete %s %s: %w", l.kind, cs[i].ID, interpret(err))
			}
			d := l.counts(t).Of(parent)
			if intent.State(state) == intent.StateCanceled {
				out[i].Err = store.ErrTaskCanceled
				d.Move(intent.StateRunning, intent.StateCanceled)
				continue
			}
			out[i].AssetID = assetID
			d.Move(intent.StateRunning, intent.StateSucceeded)
		}
		return interpret(br.Close())
	})
	if err != nil {
		return nil, fmt.Errorf("complete leases: %w", err)
	}
	return out, nil
}

// lockBatches locks the batch rows in id order and answers which were
// asked to cancel.
func (t *taskTx) lockBatches(ctx context.Context, ids []string) (map[string]bool, error) {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	rows, err := t.tx.Query(ctx, `SELECT id, cancel_requested FROM batches WHERE id = ANY ($1) ORDER BY id FOR NO KEY UPDATE`, ids)
	if err != nil {
		return nil, fmt.Errorf("lock batches: %w", err)
	}
	canceling := map[string]bool{}
	var id string
	var c bool
	if _, err := pgx.ForEachRow(rows, []any{&id, &c}, func() error {
		canceling[id] = c
		return nil
	}); err != nil {
		return nil, fmt.Errorf("lock batches: %w", err)
	}
	return canceling, nil
}

// endLeases ends live leases (FailLease, ReleaseLeases): it locks the
// rows in lock order, then the parents that can cancel (batches), reads
// whether they were asked to, and moves each row to the state next
// answers (from the attempts it used and whether its parent is
// canceling) with the lane's statement of end (fail or release), whose
// parameters after $1 id, $2 fence, $3 wall, $4 state are extra(i).
func (t *taskTx) endLeases(ctx context.Context, leases []store.Lease, end func(l *lane) string,
	next func(i, used int, canceling bool) intent.State, extra func(i int) []any) ([]error, []intent.State, error) {
	order, err := byLane(len(leases), func(i int) store.Lease { return leases[i] })
	if err != nil {
		return nil, nil, err
	}
	errs := make([]error, len(leases))
	states := make([]intent.State, len(leases))
	type live struct {
		l      *lane
		parent string
		used   int
	}
	found := map[int]live{}
	var batches []string
	for _, i := range order {
		ls := leases[i]
		l, _ := laneOf(ls.Kind)
		var lv live
		err := t.tx.QueryRow(ctx, l.lockLive, ls.ID, ls.Fence).Scan(&lv.parent, &lv.used)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			errs[i] = store.ErrLeaseLost
			continue
		case err != nil:
			return nil, nil, fmt.Errorf("%s %s: %w", l.kind, ls.ID, err)
		}
		lv.l = l
		found[i] = lv
		if l.cancelable {
			batches = append(batches, lv.parent)
		}
	}
	canceling := map[string]bool{}
	if len(batches) > 0 {
		if canceling, err = t.lockBatches(ctx, batches); err != nil {
			return nil, nil, err
		}
	}
	for _, i := range order {
		lv, ok := found[i]
		if !ok {
			continue
		}
		state := next(i, lv.used, lv.l.cancelable && canceling[lv.parent])
		args := append([]any{leases[i].ID, leases[i].Fence, t.wall, state}, extra(i)...)
		if _, err := t.tx.Exec(ctx, end(lv.l), args...); err != nil {
			return nil, nil, fmt.Errorf("%s %s: %w", lv.l.kind, leases[i].ID, err)
		}
		lv.l.counts(t).Of(lv.parent).Move(intent.StateRunning, state)
		states[i] = state
	}
	return errs, states, nil
}

// FailLease ends a failed attempt: queued again after the backoff, or
// failed, or canceled when its batch was asked to cancel. The row is
// locked, then its batch's, and only then is cancel_requested read: a
// cancel either committed before (the task ends canceled) or waits for
// this transaction and then finds the task queued and cancels it.
func (s *Store) FailLease(ctx context.Context, f store.Failure) (_ intent.State, err error) {
	defer s.noteLease(ctx, time.Now(), &err)
	var state intent.State
	err = s.inLeaseTx(ctx, func(t *taskTx) error {
		errs, states, err := t.endLeases(ctx, []store.Lease{f.Lease}, func(l *lane) string { return l.fail },
			func(_, used int, canceling bool) intent.State {
				return store.StateAfterFailure(canceling, f.Permanent, used, f.MaxAttempts)
			},
			func(int) []any { return []any{f.Error, ttlRoundUp(max(f.Backoff, 0))} })
		if err != nil {
			return err
		}
		state = states[0]
		t.retryAt = time.Now().Add(f.Backoff)
		return errs[0]
	})
	if errors.Is(err, store.ErrLeaseLost) {
		return "", store.ErrLeaseLost
	}
	if err != nil {
		return "", fmt.Errorf("fail lease: %w", err)
	}
	return state, nil
}

// ReleaseLeases hands leases back: queued at once, or canceled. As in
// FailLease, the rows are locked, then their batches, and only then is
// cancel_requested read.
func (s *Store) ReleaseLeases(ctx context.Context, leases []store.Lease) (_ []error, err error) {
	defer s.noteLease(ctx, time.Now(), &err)
	if len(leases) == 0 {
		return nil, nil
	}
	var out []error
	err = s.inLeaseTx(ctx, func(t *taskTx) (err error) {
		out, _, err = t.endLeases(ctx, leases, func(l *lane) string { return l.release },
			func(_, _ int, canceling bool) intent.State {
				if canceling {
					return intent.StateCanceled
				}
				return intent.StateQueued
			},
			func(int) []any { return nil })
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("release leases: %w", err)
	}
	return out, nil
}

// noteLease records a lease call that began at start and ended with *err
// in s.outage (deferred by each lease method): a fault opens an outage
// window; inLeaseTx's commits close it.
func (s *Store) noteLease(ctx context.Context, start time.Time, err *error) {
	s.outage.Note(ctx, start, *err)
}
