package locks

import "time"

// epoch anchors the package's clock.
var epoch = time.Now()

// now is the time by the monotonic clock alone: epoch's wall time moved on
// by the monotonic time since. It reads one clock where time.Now reads two
// (on Linux, a vDSO call each, about half of time.Now's cost), and it does
// not follow steps of the wall clock, which a lease, a span of time from
// when it was taken, should not follow either. Its results carry a
// monotonic reading, so comparisons with time.Now's are exact.
func now() time.Time { return epoch.Add(time.Since(epoch)) }
