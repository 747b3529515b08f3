package main

import (
	"bytes"
	"strings"
	"testing"

	apiclient "studio/client"
)

// TestWaitPrintsEachErrorOnce: following a batch whose tasks fail with
// one cause (texts that differ only in the attempt and the ids) and one
// other prints each cause once, then a summary with the number of tasks
// that had each; on a terminal only the summary, after the bar.
func TestWaitPrintsEachErrorOnce(t *testing.T) {
	errs := []struct{ task, msg string }{
		{"t1", `attempt 1: submit: generator "comfy": prompt 01920000-0000-7000-8000-000000000001 failed: out of memory`},
		{"t1", `attempt 2: submit: generator "comfy": prompt 01920000-0000-7000-8000-000000000001 failed: out of memory`},
		{"t2", `attempt 1: submit: generator "comfy": prompt 01920000-0000-7000-8000-000000000002 failed: out of memory`},
		{"t3", `attempt 1: submit: generator "comfy": prompt 01920000-0000-7000-8000-000000000003 failed: out of memory`},
		{"t4", `attempt 1: fetch: generator "gpt": image download: the image is not PNG, JPEG or WebP (12 bytes)`},
		{"t5", `attempt 2: submit: task 01920000-0000-7000-8000-000000000005: simulated failure (attempt 2 of the first 10)`},
		{"t6", `attempt 3: submit: task 01920000-0000-7000-8000-000000000006: simulated failure (attempt 3 of the first 10)`},
	}
	for _, terminal := range []bool{false, true} {
		var out bytes.Buffer
		p := newWaitProgress(&out, terminal)
		b := apiclient.Batch{ID: "b", TaskCount: 4}
		for _, e := range errs {
			msg := e.msg
			p.update(apiclient.Progress{Batch: b, Task: &apiclient.Task{ID: e.task, State: apiclient.StateFailed, Error: &msg}})
		}
		p.finish()
		got := out.String()
		if n := strings.Count(got, "failed: out of memory"); n != map[bool]int{false: 2, true: 1}[terminal] {
			t.Errorf("terminal %v: the out-of-memory error is printed %d times:\n%s", terminal, n, got)
		}
		for _, want := range []string{
			`  3 x submit: generator "comfy": prompt <id> failed: out of memory`,
			`  1 x fetch: generator "gpt": image download: the image is not PNG, JPEG or WebP (12 bytes)`,
			`  2 x submit: task <id>: simulated failure (attempt N of the first 10)`,
		} {
			if !strings.Contains(got, want) {
				t.Errorf("terminal %v: the summary lacks %q:\n%s", terminal, want, got)
			}
		}
	}
}
