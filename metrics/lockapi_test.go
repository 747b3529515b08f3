package metrics_test

import (
	"testing"

	"studio/metrics"
	"studio/metrics/metricstest"
)

func TestLockAPI(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	held := 3
	observe, err := m.LockAPI(func() int { return held })
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, m)
	before := metricstest.Get(t, url)
	if !before.Has("studio_lock_api_acquires_total") || before.Value("studio_lock_api_acquires_total", "outcome", "busy") != 0 {
		t.Fatal("acquire series not declared at zero")
	}
	observe("acquired", "")
	observe("acquired", "")
	observe("busy", "")
	observe("some-key-or-id", "") // never a new label value
	observe("", "expired")
	observe("", "held") // not an end: dropped
	held = 5
	after := metricstest.Get(t, url)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"studio_lock_api_acquires_total", []string{"outcome", "acquired"}, 2},
		{"studio_lock_api_acquires_total", []string{"outcome", "busy"}, 1},
		{"studio_lock_api_acquires_total", []string{"outcome", "error"}, 1},
		{"studio_lock_api_acquires_total", []string{"outcome", "some-key-or-id"}, 0},
		{"studio_lock_api_leases_ended_total", []string{"state", "expired"}, 1},
		{"studio_lock_api_leases_ended_total", []string{"state", "held"}, 0},
		{"studio_lock_api_leases_held", nil, 5},
	} {
		if got := after.Value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if _, err := m.LockAPI(func() int { return 0 }); err == nil {
		t.Error("registering twice did not fail")
	}
}
