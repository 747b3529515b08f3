//go:build !unix

package blob

import "os"

// On systems without flock, sweeps rely on file times alone: a sweep and a
// Put of the same unnamed file at the same instant may race.

func lockFile(f *os.File, exclusive bool) error { return nil }

func tryLockFile(f *os.File) (bool, error) { return true, nil }

func unlockFile(f *os.File) {}
