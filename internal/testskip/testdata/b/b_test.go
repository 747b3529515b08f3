// Package b is a test package of TestAnnounceOncePerRun: its tests
// announce and skip.
package b

import (
	"testing"

	"studio/internal/testskip"
)

func TestOne(t *testing.T) {
	testskip.Announce("Widget", "set WIDGET=1 to run them")
	t.Skip("no widget")
}

func TestTwo(t *testing.T) {
	testskip.Announce("Widget", "set WIDGET=1 to run them")
	testskip.Announce("Gadget", "install gadget to run them")
	t.Skip("no widget")
}
