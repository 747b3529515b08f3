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
// waiters of the others at once. (Without a server at hand it prints
// nothing; it is compiled, not run.)
func ExampleOpen() {
	ctx := context.Background()
	ls, err := pglock.Open(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ls.Close()
	e := locks.New(ls)
	defer e.Close()

	err = e.Lock("nightly").Hold(ctx, "billing", func(ctx context.Context, l *locks.Lease) error {
		fmt.Println("fence", l.Fence())
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
}
