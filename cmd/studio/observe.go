package main

import (
	"log/slog"
)

// readableDurations writes every duration attribute as milliseconds under
// the key with "_ms" added ("duration" becomes "duration_ms": 1.234), the
// same in JSON and text, instead of nanoseconds in JSON.
func readableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.Float64(a.Key+"_ms", float64(a.Value.Duration().Microseconds())/1000)
	}
	return a
}
