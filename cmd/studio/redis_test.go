package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// testRedisURL is the Redis of the tests of the Redis lock store: the one
// STUDIO_TEST_REDIS_URL names, else the one development and CI machines
// run at 127.0.0.1:6379; "" when none answers, which fails the test under
// STUDIO_TEST_REDIS=1 (CI sets it).
func testRedisURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("STUDIO_TEST_REDIS_URL")
	if u == "" {
		u = "redis://127.0.0.1:6379/0"
	}
	o, err := redis.ParseURL(u)
	if err == nil {
		c := redis.NewClient(o)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err = c.Ping(ctx).Err()
	}
	if err != nil {
		if os.Getenv("STUDIO_TEST_REDIS") == "1" {
			t.Fatalf("STUDIO_TEST_REDIS=1 but no Redis answers at %s: %v", u, err)
		}
		t.Logf("no Redis answers at %s (%v): the Redis parts of this test do not run", u, err)
		return ""
	}
	return u
}
