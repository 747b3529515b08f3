// Package diskfree answers how many bytes the volume holding a path has
// free for an unprivileged writer, for the readiness check and the
// metrics of the data volume.
package diskfree

// Bytes answers the free bytes of the volume holding path, as an
// unprivileged process may use them (blocks reserved for the superuser
// left out).
func Bytes(path string) (uint64, error) { return bytes(path) }
