package locks

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine (a renewal, a waiter,
// a timer's callback) outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
