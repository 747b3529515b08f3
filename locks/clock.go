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

// mono is a time by the monotonic clock: nanoseconds since epoch. The
// engine keeps its times so: reading one is a clock read and nothing
// else, and a lease's times take 8 bytes each.
type mono int64

// monoNow is the time now, as mono.
func monoNow() mono { return mono(time.Since(epoch)) }

// add is m plus d.
func (m mono) add(d time.Duration) mono { return m + mono(d) }

// time is m as a time.Time on now's clock.
func (m mono) time() time.Time { return epoch.Add(time.Duration(m)) }

// until is how long from now until m.
func (m mono) until() time.Duration { return time.Duration(m - monoNow()) }
