package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"studio/bench"
	"studio/store/postgres/pgtest"
)

// TestBenchJSON runs `studio bench --json` with tiny sizes and checks the
// shape of every line: the fields, their types, the floors where an
// operation has one, and storm_64's one plan per round.
func TestBenchJSON(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	opsList := "lock_handoff_memory,lock_handoff_db,commit_12,replay,storm_64,http_replay,drain,lock_hold_memory,lock_hold_db"
	want := []string{"commit_12", "replay", "storm_64", "http_replay", "drain_1", "drain_4", "lock_hold_memory", "lock_hold_db", "lock_handoff_memory", "lock_handoff_db"}
	args := []string{"bench", "--data", t.TempDir(), "--json", "--n", "4", "--tasks", "12"}
	if u := testRedisURL(t); u != "" {
		opsList = "lock_handoff,commit_12,replay,storm_64,http_replay,drain,lock_hold"
		want = slices.Insert(want, 8, "lock_hold_redis")
		want = append(want, "lock_handoff_redis")
		args = append(args, "--redis", u)
	}
	args = append(args, "--ops", opsList)
	if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), stdout.String())
	}
	noFloor := []string{"storm_64", "lock_handoff_memory", "lock_handoff_db", "lock_handoff_redis"}
	for i, line := range lines {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %d is not JSON: %q", i, line)
		}
		if r["op"] != want[i] {
			t.Errorf("line %d: op %v, want %s", i, r["op"], want[i])
		}
		for _, k := range []string{"op", "n", "median_us", "p99_us", "per_s", "floor_median_us", "ratio"} {
			if _, ok := r[k]; !ok {
				t.Errorf("%s: no %q", want[i], k)
			}
		}
		for k := range r {
			if !slices.Contains([]string{"op", "n", "median_us", "p99_us", "per_s", "floor_median_us", "ratio", "floor_per_s", "plans_per_round"}, k) {
				t.Errorf("%s: unexpected field %q", want[i], k)
			}
		}
		wantN := 4.0 // --n
		if strings.HasPrefix(want[i], "drain") {
			wantN = 12 // --tasks
		}
		if n, _ := r["n"].(float64); n != wantN {
			t.Errorf("%s: n = %v, want %v", want[i], r["n"], wantN)
		}
		med, _ := r["median_us"].(float64)
		p99, _ := r["p99_us"].(float64)
		perS, _ := r["per_s"].(float64)
		if med <= 0 || p99 < med || perS <= 0 {
			t.Errorf("%s: median %v, p99 %v, per_s %v", want[i], r["median_us"], r["p99_us"], r["per_s"])
		}
		if slices.Contains(noFloor, want[i]) {
			if r["floor_median_us"] != nil || r["ratio"] != nil {
				t.Errorf("%s has no floor, but answers %v, %v", want[i], r["floor_median_us"], r["ratio"])
			}
		} else {
			floor, _ := r["floor_median_us"].(float64)
			ratio, _ := r["ratio"].(float64)
			if floor <= 0 || ratio <= 0 {
				t.Errorf("%s: floor %v, ratio %v", want[i], r["floor_median_us"], r["ratio"])
			}
		}
		switch want[i] {
		case "storm_64":
			if r["plans_per_round"] != 1.0 {
				t.Errorf("storm_64: plans per round %v, want 1", r["plans_per_round"])
			}
		case "http_replay", "drain_1", "drain_4":
			if fp, _ := r["floor_per_s"].(float64); fp <= 0 {
				t.Errorf("http_replay: floor_per_s %v", r["floor_per_s"])
			}
		}
		if !strings.Contains(stderr.String(), want[i]+": median") {
			t.Errorf("no progress line for %s:\n%s", want[i], stderr.String())
		}
	}
}

// TestBenchTableAndOps: the table has its header and one row per
// operation; an unknown operation is a usage error.
func TestBenchTableAndOps(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"bench", "--n", "2", "--ops", "lock_hold_memory,storm"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	rows := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(rows) != 3 || !strings.HasPrefix(rows[0], "op ") || !strings.Contains(rows[0], "floor median") ||
		!strings.HasPrefix(rows[1], "storm_64 ") || !strings.HasPrefix(rows[2], "lock_hold_memory ") {
		t.Fatalf("table:\n%s", stdout.String())
	}
	if !strings.Contains(rows[1], "1 plan/round") {
		t.Errorf("storm row: %q", rows[1])
	}
	stderr.Reset()
	if code := run(context.Background(), []string{"bench", "--ops", "commit,nope"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), `no operation "nope"`) {
		t.Fatalf("unknown op: exit %d, %q", code, stderr.String())
	}
	for list, want := range map[string]int{"": len(bench.Ops()) - 2, "assets": 2, "commit": 3, "lock_hold,commit_600": 4, "drain": 2, "replay": 1} {
		ops, err := bench.Select(list)
		if err != nil || len(ops) != want {
			t.Errorf("selectOps(%q): %d ops, %v; want %d", list, len(ops), err, want)
		}
	}
}

// TestBenchPostgres runs the operations with floors against PostgreSQL
// (skipped without STUDIO_TEST_POSTGRES_URL).
func TestBenchPostgres(t *testing.T) {
	t.Parallel()
	u, _ := pgtest.Schema(t)
	var stdout, stderr bytes.Buffer
	args := []string{"bench", "--data", t.TempDir(), "--database", u, "--json", "--n", "3", "--tasks", "12", "--ops", "commit_12,replay,storm_64,drain_4,lock_hold_db"}
	if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines:\n%s", len(lines), stdout.String())
	}
	for _, line := range lines {
		var r bench.Result
		err := json.Unmarshal([]byte(line), &r)
		wantN := 3
		if r.Op == "drain_4" {
			wantN = 12
		}
		if err != nil || r.N != wantN || r.MedianUS <= 0 {
			t.Errorf("line %q: %+v, %v", line, r, err)
		}
		if r.Op != "storm_64" && (r.Ratio == nil || *r.Ratio <= 0) {
			t.Errorf("%s: no ratio", r.Op)
		}
	}
}

// TestBenchLive runs the live operations with two samples a side, on
// SQLite and (with STUDIO_TEST_POSTGRES_URL) PostgreSQL: every one
// answers latencies, the ones with a floor answer it, herd_600 counts
// the claims that found nothing on both sides.
func TestBenchLive(t *testing.T) {
	t.Parallel()
	want := []string{"dispatch", "dispatch_apart", "first_result", "first_result_apart", "event_lag", "event_lag_apart",
		"cancel_lag", "cancel_lag_apart", "herd_600"}
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var extra []string
			if name == "postgres" {
				u, _ := pgtest.Schema(t)
				extra = []string{"--database", u}
			}
			var stdout, stderr bytes.Buffer
			args := append([]string{"bench", "--data", t.TempDir(), "--json", "--n", "2", "--ops", "dispatch,first_result,event_lag,cancel_lag,herd_600"}, extra...)
			if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d\n%s", code, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			if len(lines) != len(want) {
				t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), stdout.String())
			}
			for i, line := range lines {
				var r bench.Result
				if err := json.Unmarshal([]byte(line), &r); err != nil {
					t.Fatal(err)
				}
				wantN := 2
				if r.Op == "herd_600" {
					wantN = 3 // rounds a side
				}
				if r.Op != want[i] || r.N != wantN || r.P99US < r.MedianUS {
					t.Errorf("line %d: %s", i, line)
				}
				if hasFloor := !strings.HasPrefix(r.Op, "event_lag"); (r.FloorMedianUS != nil) != hasFloor {
					t.Errorf("%s: floor %v, want one: %v", r.Op, r.FloorMedianUS, hasFloor)
				}
				if r.Op == "herd_600" && (r.EmptyPerTask == nil || r.FloorEmptyPerTask == nil) {
					t.Errorf("herd_600: %s", line)
				}
			}
		})
	}
}
