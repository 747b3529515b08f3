//go:build !(linux || darwin || freebsd)

package diskfree

import "errors"

func bytes(string) (uint64, error) {
	return 0, errors.ErrUnsupported
}
