package blob

import "time"

// SetClock sets the clock of s, for the conformance tests of package
// blob_test.
func SetClock(s *FS, now func() time.Time) { s.now = now }
