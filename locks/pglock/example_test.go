package pglock_test

import (
	"context"
	"fmt"
	"os"

	"studio/locks"
	"studio/locks/pglock"
)

// ExampleOpen opens a lock store from a URL: every process using the same
// database (and schema) shares its locks, and a release in one wakes the
// waiters of the others at once. It runs when DATABASE_URL names a
// server (its tables go in the first schema of the search_path); it
// prints only what goes wrong.
func ExampleOpen() {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return
	}
	ctx := context.Background()
	ls, err := pglock.Open(ctx, url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ls.Close()
	e := locks.New(ls)
	defer e.Close()

	nightly := e.Lock("nightly")
	err = nightly.Hold(ctx, "billing", func(ctx context.Context, l *locks.Lease) error {
		info, err := nightly.Inspect(ctx, "billing")
		if err == nil && (!info.Held || info.Holders[0].Fence != l.Fence()) {
			err = fmt.Errorf("inspect shows %+v", info)
		}
		return err
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output:
}
