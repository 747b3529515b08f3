// Package pglisten keeps one PostgreSQL connection LISTENing on a channel,
// made again after a failure: the feed of the stores' wake-ups
// (store/postgres) and of the lock store's releases (locks/pglock). It
// lives under locks/ because the lock packages depend on nothing else of
// studio (TestStandaloneDependencies), while studio's stores may use them.
package pglisten

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// The wait before a new connection after a failure: backoffMin, doubled
// after each failure up to backoffMax, and back to backoffMin once a
// LISTEN succeeds.
const (
	backoffMin = 100 * time.Millisecond
	backoffMax = 5 * time.Second
)

// Run LISTENs on channel until ctx ends, passing the payload of every
// notification to notified. It takes no connection of a pool (that would
// hold one for good): it opens its own from cfg (a copy of it each time).
// A lost connection is made again after a backoff; what was sent while
// it was down is missed, which the caller covers: up is called with the
// connection's backend pid after each LISTEN, the first one included.
func Run(ctx context.Context, cfg *pgx.ConnConfig, channel string, up func(pid uint32), notified func(payload string)) {
	backoff := backoffMin
	for ctx.Err() == nil {
		err := listen(ctx, cfg, channel, func(pid uint32) {
			backoff = backoffMin
			up(pid)
		}, notified)
		if ctx.Err() != nil || err == nil {
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, backoffMax)
	}
}

// listen runs one listening connection until it fails or ctx ends.
func listen(ctx context.Context, cfg *pgx.ConnConfig, channel string, up func(pid uint32), notified func(payload string)) error {
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	up(conn.PgConn().PID())
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		notified(n.Payload)
	}
}
