package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// PrintTable writes the results of ops (one each, in the same order) as a
// table for people.
func PrintTable(w io.Writer, ops []Op, results []*Result) {
	rows := [][]string{{"op", "n", "median", "p99", "per s", "floor median", "ratio", "target", ""}}
	for i, r := range results {
		floor, ratio, verdict := "-", "-", ""
		if r.FloorMedianUS != nil {
			floor = fmtUS(*r.FloorMedianUS)
		}
		if r.Ratio != nil {
			ratio = fmt.Sprintf("%.2fx", *r.Ratio)
		}
		if r.PlansPerRound != nil {
			ratio = fmt.Sprintf("%g plan/round", *r.PlansPerRound)
		}
		if r.EmptyPerTask != nil && r.FloorEmptyPerTask != nil {
			ratio = fmt.Sprintf("%.3f empty claims/task (floor %.3f)", *r.EmptyPerTask, *r.FloorEmptyPerTask)
		}
		if ops[i].goal != nil {
			verdict = "missed"
			if ops[i].Met(r) {
				verdict = "met"
			}
		}
		if r.WALBytesPerTask != nil && r.FloorWALBytesPerTask != nil {
			// Throughput against a baseline store: its rate is the floor.
			floor = fmtRate(*r.FloorPerS) + "/s"
			ratio += fmt.Sprintf(", WAL/task %s vs %s", fmtBytes(*r.WALBytesPerTask), fmtBytes(*r.FloorWALBytesPerTask))
			if r.WorkerCPUPerTaskUS != nil && r.FloorWorkerCPUPerTaskUS != nil {
				ratio += fmt.Sprintf(", worker CPU/task %s vs %s", fmtUS(*r.WorkerCPUPerTaskUS), fmtUS(*r.FloorWorkerCPUPerTaskUS))
			}
		}
		rows = append(rows, []string{ops[i].Name, fmt.Sprint(r.N), fmtUS(r.MedianUS), fmtUS(r.P99US), fmtRate(r.PerS), floor, ratio, ops[i].Target, verdict})
	}
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for j, c := range row {
			widths[j] = max(widths[j], utf8.RuneCountInString(c))
		}
	}
	for _, row := range rows {
		var line strings.Builder
		for j, c := range row {
			pad := strings.Repeat(" ", widths[j]-utf8.RuneCountInString(c))
			switch j {
			case 0, len(row) - 2, len(row) - 1: // text: left
				line.WriteString(c + pad)
			default: // figures: right
				line.WriteString(pad + c)
			}
			line.WriteString("  ")
		}
		fmt.Fprintln(w, strings.TrimRight(line.String(), " "))
	}
}

func fmtUS(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.2f ms", v/1000)
	case v >= 10:
		return fmt.Sprintf("%.0f µs", v)
	default:
		return fmt.Sprintf("%.2f µs", v)
	}
}

func fmtBytes(v float64) string {
	if v >= 10000 {
		return fmt.Sprintf("%.0f KB", v/1000)
	}
	return fmt.Sprintf("%.0f B", v)
}

func fmtRate(v float64) string {
	if v >= 10000 {
		return fmt.Sprintf("%.0fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

// progress shows on stderr which operation runs: a line per operation, and
// on a terminal a percentage while it runs.
type progress struct {
	w     io.Writer
	tty   bool
	mu    sync.Mutex
	label string
	last  time.Time
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) begin(i, n int, op string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label = fmt.Sprintf("[%d/%d] %s", i, n, op)
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s ...", p.label)
	}
}

func (p *progress) tick(done, of int) {
	if !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < 100*time.Millisecond && done < of {
		return
	}
	p.last = time.Now()
	fmt.Fprintf(p.w, "\r\033[K%s %3d%%", p.label, 100*done/max(1, of))
}

func (p *progress) end(r *Result, took time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	ratio := ""
	if r.Ratio != nil {
		ratio = fmt.Sprintf(", %.2fx its floor", *r.Ratio)
	}
	fmt.Fprintf(p.w, "%s: median %s%s (%.1fs)\n", p.label, fmtUS(r.MedianUS), ratio, took.Seconds())
}

func (p *progress) fail() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, "%s: failed\n", p.label)
}
