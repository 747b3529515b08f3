package redislock_test

import (
	"context"
	"fmt"
	"time"

	"studio/locks"
	"studio/locks/redislock"
)

// Every process opening the same Redis (and prefix) shares its locks; a
// release wakes the waiters of the others at once. Compiled, not run: it
// needs a Redis.
func ExampleOpen() {
	ctx := context.Background()
	ls, err := redislock.Open(ctx, "redis://127.0.0.1:6379/0")
	if err != nil {
		panic(err)
	}
	defer ls.Close()
	e := locks.New(ls)
	defer e.Close()

	summaries := e.Lock("summaries", locks.TTL(30*time.Second))
	_ = summaries.Hold(ctx, "chat-42", func(ctx context.Context, l *locks.Lease) error {
		fmt.Println("writing under fence", l.Fence())
		return nil
	})
}
