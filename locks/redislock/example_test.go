package redislock_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"studio/locks"
	"studio/locks/redislock"
)

// ExampleOpen opens a lock store from a URL: every process using the same
// Redis (and prefix) shares its locks, and a release in one wakes the
// waiters of the others at once. It runs when REDIS_URL names a server
// (redis://127.0.0.1:6379/0); it prints only what goes wrong.
func ExampleOpen() {
	url := os.Getenv("REDIS_URL")
	if url == "" {
		return
	}
	ctx := context.Background()
	ls, err := redislock.Open(ctx, url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ls.Close()
	e := locks.New(ls)
	defer e.Close()

	summaries := e.Lock("summaries", locks.TTL(30*time.Second))
	err = summaries.Hold(ctx, "chat-42", func(ctx context.Context, l *locks.Lease) error {
		info, err := summaries.Inspect(ctx, "chat-42")
		if err == nil && (!info.Held || info.Holders[0].Fence != l.Fence()) {
			err = fmt.Errorf("inspect shows %+v", info)
		}
		return err // write under l.Fence() here
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output:
}
