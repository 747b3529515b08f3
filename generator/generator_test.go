package generator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"studio/intent"
)

var (
	update  = flag.Bool("update", false, "rewrite testdata/*.golden")
	lookDir = flag.String("look", "", "also write sample PNGs into this directory")
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func seed(v int64) *int64 { return &v }

// baseJob is the job every test varies one field of.
func baseJob() Job {
	return Job{
		Key: "0192-task", Prompt: "a knight in the rain, side view", Collection: "walk-cycle",
		Frame: "f01", Candidate: 1, Seed: seed(7), Params: []byte(`{"height":64,"width":96}`),
		Subjects: []string{"knight"}, Attempt: 1,
	}
}

// render runs the three steps on a fresh generator.
func render(t testing.TB, id string, job Job) (string, Image) {
	t.Helper()
	g, err := New(Spec{ID: id, Kind: KindEmbedded})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ref, err := g.Submit(ctx, job)
	if err != nil {
		t.Fatalf("%s: submit: %v", id, err)
	}
	if err := g.Wait(ctx, ref); err != nil {
		t.Fatalf("%s: wait: %v", id, err)
	}
	img, err := g.Fetch(ctx, ref)
	if err != nil {
		t.Fatalf("%s: fetch: %v", id, err)
	}
	return ref, img
}

func TestDeterministic(t *testing.T) {
	t.Parallel()
	vary := []struct {
		name string
		edit func(*Job)
		same bool
	}{
		{"same job", func(*Job) {}, true},
		{"other key", func(j *Job) { j.Key = "another-task" }, true},
		{"later attempt", func(j *Job) { j.Attempt = 4 }, true},
		{"execution params", func(j *Job) { j.Params = []byte(`{"delay_ms":0,"fail_attempts":0,"height":64,"width":96}`) }, true},
		{"params spelled otherwise", func(j *Job) { j.Params = []byte(`{ "width": 96.0, "height": 6.4e1 }`) }, true},
		{"frame", func(j *Job) { j.Frame = "f02" }, false},
		{"candidate", func(j *Job) { j.Candidate = 2 }, false},
		{"collection", func(j *Job) { j.Collection = "run-cycle" }, false},
		{"prompt", func(j *Job) { j.Prompt += "." }, false},
		{"seed", func(j *Job) { j.Seed = seed(8) }, false},
		{"no seed", func(j *Job) { j.Seed = nil }, false},
		{"subjects", func(j *Job) { j.Subjects = []string{"cat"} }, false},
		{"other param", func(j *Job) { j.Params = []byte(`{"height":64,"style":"dusk","width":96}`) }, false},
	}
	for _, id := range []string{Sketch, Mosaic} {
		refA, a := render(t, id, baseJob())
		for _, v := range vary {
			t.Run(id+"/"+v.name, func(t *testing.T) {
				job := baseJob()
				v.edit(&job)
				refB, b := render(t, id, job)
				if got := bytes.Equal(a.Bytes, b.Bytes); got != v.same {
					t.Errorf("equal bytes = %v, want %v", got, v.same)
				}
				if got := refA == refB; got != v.same {
					t.Errorf("equal refs = %v, want %v (%s, %s)", got, v.same, refA, refB)
				}
			})
		}
	}
	_, s := render(t, Sketch, baseJob())
	_, m := render(t, Mosaic, baseJob())
	if bytes.Equal(s.Bytes, m.Bytes) {
		t.Error("sketch and mosaic made the same picture")
	}
}

func TestPNGOfRequestedSize(t *testing.T) {
	t.Parallel()
	cases := []struct {
		params string
		w, h   int
	}{
		{`{}`, 256, 256},
		{``, 256, 256},
		{`{"width":16,"height":16}`, 16, 16},
		{`{"width":300,"height":40}`, 300, 40},
		{`{"width":40,"height":300}`, 40, 300},
	}
	for _, id := range []string{Sketch, Mosaic} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/%s", id, c.params), func(t *testing.T) {
				job := baseJob()
				job.Params = []byte(c.params)
				_, img := render(t, id, job)
				if img.ContentType != "image/png" || img.Width != c.w || img.Height != c.h {
					t.Fatalf("image %s %dx%d, want image/png %dx%d", img.ContentType, img.Width, img.Height, c.w, c.h)
				}
				cfg, err := png.DecodeConfig(bytes.NewReader(img.Bytes))
				if err != nil {
					t.Fatal(err)
				}
				if cfg.Width != c.w || cfg.Height != c.h {
					t.Fatalf("decoded %dx%d, want %dx%d", cfg.Width, cfg.Height, c.w, c.h)
				}
				if _, err := png.Decode(bytes.NewReader(img.Bytes)); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestFramesLookDifferent checks that pictures of neighbouring frames differ
// in many pixels, not in a corner only; with -look it writes them out.
func TestFramesLookDifferent(t *testing.T) {
	t.Parallel()
	for _, id := range []string{Sketch, Mosaic} {
		var prev []byte
		for i, frame := range []string{"f01", "f02", "f03"} {
			job := baseJob()
			job.Frame = frame
			job.Params = nil
			_, img := render(t, id, job)
			decoded, err := png.Decode(bytes.NewReader(img.Bytes))
			if err != nil {
				t.Fatal(err)
			}
			pix := make([]byte, 0, 256*256*3)
			for y := range 256 {
				for x := range 256 {
					r, g, b, _ := decoded.At(x, y).RGBA()
					pix = append(pix, byte(r>>8), byte(g>>8), byte(b>>8))
				}
			}
			if prev != nil {
				diff := 0
				for k := range pix {
					if pix[k] != prev[k] {
						diff++
					}
				}
				if diff < len(pix)/10 {
					t.Errorf("%s %s: only %d of %d channel values differ from the previous frame", id, frame, diff, len(pix))
				}
			}
			prev = pix
			if *lookDir != "" {
				if err := os.WriteFile(filepath.Join(*lookDir, fmt.Sprintf("%s-%d.png", id, i)), img.Bytes, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// TestGolden pins the bytes of a few pictures: a change in rendering (or in
// the PNG encoder) would make a retry of an old task differ from its first
// try, so it must be deliberate (-update).
func TestGolden(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	for _, id := range []string{Sketch, Mosaic, Noop} {
		for _, params := range []string{`{}`, `{"height":64,"width":96}`} {
			job := baseJob()
			job.Params = []byte(params)
			ref, img := render(t, id, job)
			fmt.Fprintf(&out, "%s %s %x %s\n", id, params, sha256.Sum256(img.Bytes), ref)
		}
	}
	path := filepath.Join("testdata", "images.golden")
	if *update {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if out.String() != string(want) {
		t.Errorf("pictures changed:\n got:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestFailAttempts(t *testing.T) {
	t.Parallel()
	for _, id := range []string{Sketch, Mosaic} {
		g, _ := New(Spec{ID: id, Kind: KindEmbedded})
		var refs []string
		for attempt := 1; attempt <= 4; attempt++ {
			job := baseJob()
			job.Params = []byte(`{"fail_attempts":2}`)
			job.Attempt = attempt
			ref, err := g.Submit(context.Background(), job)
			if attempt <= 2 {
				if !errors.Is(err, ErrSimulated) || IsPermanent(err) {
					t.Errorf("%s attempt %d: err = %v, want a transient simulated failure", id, attempt, err)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s attempt %d: %v", id, attempt, err)
			}
			refs = append(refs, ref)
		}
		if len(refs) != 2 || refs[0] != refs[1] {
			t.Errorf("%s: refs of attempts 3 and 4 = %q, want two equal", id, refs)
		}
	}
}

func TestWaitHonoursDelayAndContext(t *testing.T) {
	t.Parallel()
	g := NewSketch()
	job := baseJob()
	job.Params = []byte(`{"delay_ms":60000}`)
	ref, err := g.Submit(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- g.Wait(ctx, ref) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || IsPermanent(err) {
		t.Fatalf("wait after cancel = %v, want a transient context.Canceled", err)
	}

	job.Params = []byte(`{"delay_ms":1}`)
	ref, err = g.Submit(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(context.Background(), ref); err != nil {
		t.Fatalf("wait 1ms = %v", err)
	}
	if !strings.HasSuffix(ref, ":1") {
		t.Fatalf("ref %q does not carry the delay", ref)
	}
}

func TestResumeInAnotherGenerator(t *testing.T) {
	t.Parallel()
	// A worker that takes a task over has only the stored reference.
	ref, first := render(t, Mosaic, baseJob())
	other := NewMosaic()
	if err := other.Wait(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	again, err := other.Fetch(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.Bytes, again.Bytes) {
		t.Fatal("fetch from the stored reference gave other bytes")
	}
}

func TestPermanentErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := errors.New("boom")
	if Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
	if IsPermanent(base) || IsPermanent(context.Canceled) || IsPermanent(nil) {
		t.Error("an unmarked error counts as permanent")
	}
	wrapped := fmt.Errorf("step: %w", Permanent(base))
	if !IsPermanent(wrapped) || !errors.Is(wrapped, base) || wrapped.Error() != "step: boom" {
		t.Errorf("wrapped permanent error: %v, permanent=%v", wrapped, IsPermanent(wrapped))
	}

	sketchRef, err := NewSketch().Submit(ctx, baseJob())
	if err != nil {
		t.Fatal(err)
	}
	badParams := baseJob()
	badParams.Params = []byte(`{"width":4}`)
	zeroAttempt := baseJob()
	zeroAttempt.Attempt = 0
	checks := map[string]error{}
	_, checks["bad params"] = NewSketch().Submit(ctx, badParams)
	_, checks["attempt 0"] = NewSketch().Submit(ctx, zeroAttempt)
	_, checks["garbage ref"] = NewSketch().Fetch(ctx, "nonsense")
	checks["garbage ref wait"] = NewSketch().Wait(ctx, "sketch:00:1x1:0")
	_, checks["another generator's ref"] = NewMosaic().Fetch(ctx, sketchRef)
	_, checks["unknown generator"] = mustRegistry(t).Get("watercolour")
	for name, err := range checks {
		if !IsPermanent(err) {
			t.Errorf("%s: err = %v, want permanent", name, err)
		}
	}

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := NewSketch().Submit(canceled, baseJob()); !errors.Is(err, context.Canceled) || IsPermanent(err) {
		t.Errorf("submit on a cancelled context = %v", err)
	}
}

func TestParseParams(t *testing.T) {
	t.Parallel()
	cases := []struct {
		params string
		want   Params
		fields []string
	}{
		{``, Params{256, 256, 0, 0}, nil},
		{`{}`, Params{256, 256, 0, 0}, nil},
		{`{"width":16,"height":2048,"delay_ms":60000,"fail_attempts":10}`, Params{16, 2048, 60000, 10}, nil},
		{`{"width":64.0,"height":1e2}`, Params{64, 100, 0, 0}, nil},
		{`{"style":{"nested":[1,2]},"width":32}`, Params{32, 256, 0, 0}, nil},
		{`{"width":15}`, Params{}, []string{"params.width"}},
		{`{"width":2049}`, Params{}, []string{"params.width"}},
		{`{"width":"256"}`, Params{}, []string{"params.width"}},
		{`{"width":64.5}`, Params{}, []string{"params.width"}},
		{`{"width":null}`, Params{}, []string{"params.width"}},
		{`{"height":0}`, Params{}, []string{"params.height"}},
		{`{"delay_ms":-1}`, Params{}, []string{"params.delay_ms"}},
		{`{"delay_ms":60001}`, Params{}, []string{"params.delay_ms"}},
		{`{"fail_attempts":11}`, Params{}, []string{"params.fail_attempts"}},
		{`{"fail_attempts":1e400}`, Params{}, []string{"params.fail_attempts"}},
		{`{"width":1,"height":true,"fail_attempts":-3}`, Params{}, []string{"params.width", "params.height", "params.fail_attempts"}},
		{`[1]`, Params{}, []string{"params"}},
	}
	for _, c := range cases {
		t.Run(c.params, func(t *testing.T) {
			got, err := ParseParams([]byte(c.params))
			var fields []string
			for _, f := range intent.ErrorFields(err) {
				fields = append(fields, f.Field)
				if f.Message == "" {
					t.Errorf("field %s has no message", f.Field)
				}
			}
			if fmt.Sprint(fields) != fmt.Sprint(c.fields) {
				t.Fatalf("fields = %v, want %v (err %v)", fields, c.fields, err)
			}
			if c.fields != nil {
				if intent.ErrorCode(err) != intent.EUnprocessable {
					t.Errorf("code = %q, want %q", intent.ErrorCode(err), intent.EUnprocessable)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
	if err := ValidateParams(KindEmbedded, []byte(`{"width":8}`)); intent.ErrorCode(err) != intent.EUnprocessable {
		t.Errorf("ValidateParams(embedded, width 8) = %v", err)
	}
	if err := ValidateParams("remote", []byte(`{}`)); err == nil {
		t.Error("ValidateParams of an unknown kind passed")
	}
}

func mustRegistry(t *testing.T) *Registry {
	t.Helper()
	r, err := NewRegistry(Spec{ID: Sketch, Kind: KindEmbedded}, Spec{ID: Mosaic, Kind: KindEmbedded}, Spec{ID: Noop, Kind: KindEmbedded})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	r := mustRegistry(t)
	if got := fmt.Sprint(r.IDs()); got != "[sketch mosaic noop]" {
		t.Errorf("ids = %s", got)
	}
	for _, id := range r.IDs() {
		g, err := r.Get(id)
		if err != nil || g.ID() != id {
			t.Errorf("Get(%q) = %v, %v", id, g, err)
		}
	}
	bad := map[string][]Spec{
		"duplicate":          {{ID: Sketch, Kind: KindEmbedded}, {ID: Sketch, Kind: KindEmbedded}},
		"unknown kind":       {{ID: Sketch, Kind: "remote"}},
		"unknown embedded":   {{ID: "watercolour", Kind: KindEmbedded}},
		"empty kind":         {{ID: Sketch, Kind: ""}},
		"mixed good and bad": {{ID: Mosaic, Kind: KindEmbedded}, {ID: "x", Kind: KindEmbedded}},
	}
	for name, specs := range bad {
		if _, err := NewRegistry(specs...); err == nil {
			t.Errorf("%s: NewRegistry passed", name)
		}
	}
}

func TestNoop(t *testing.T) {
	t.Parallel()
	_, img := render(t, Noop, Job{Key: "k", Attempt: 1, Params: []byte(`{"delay_ms":60000,"fail_attempts":10}`)})
	cfg, err := png.DecodeConfig(bytes.NewReader(img.Bytes))
	if err != nil || cfg.Width != 1 || cfg.Height != 1 || img.Width != 1 || img.ContentType != "image/png" {
		t.Fatalf("noop image %dx%d, %v", cfg.Width, cfg.Height, err)
	}
	img.Bytes[0] ^= 0xff // the caller owns its copy
	_, again := render(t, Noop, Job{Key: "k", Attempt: 1})
	if bytes.Equal(img.Bytes, again.Bytes) {
		t.Fatal("noop shares its bytes with callers")
	}
}

// TestConcurrentUse runs many tasks through shared generators at once: they
// hold no mutable state, so -race finds nothing and every answer is the one
// a lone call gives.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	r := mustRegistry(t)
	want := map[string][]byte{}
	for _, id := range r.IDs() {
		job := baseJob()
		job.Frame = "f09"
		_, img := render(t, id, job)
		want[id] = img.Bytes
	}
	var wg sync.WaitGroup
	errs := make(chan error, 48)
	for i := range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := r.IDs()[i%3]
			g, _ := r.Get(id)
			job := baseJob()
			job.Frame = "f09"
			job.Key = fmt.Sprint("task-", i)
			ref, err := g.Submit(context.Background(), job)
			if err == nil {
				err = g.Wait(context.Background(), ref)
			}
			var img Image
			if err == nil {
				img, err = g.Fetch(context.Background(), ref)
			}
			if err == nil && !bytes.Equal(img.Bytes, want[id]) {
				err = fmt.Errorf("%s: other bytes", id)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// The noop generator asked for a size makes a PNG of that size, whole
// and decodable, a different one per job, at no render cost.
func TestNoopSized(t *testing.T) {
	t.Parallel()
	_, a := render(t, Noop, Job{Key: "a", Frame: "f01", Attempt: 1, Params: []byte(`{"width":300,"height":200}`)})
	_, b := render(t, Noop, Job{Key: "b", Frame: "f02", Attempt: 1, Params: []byte(`{"width":300,"height":200}`)})
	for _, img := range []Image{a, b} {
		cfg, err := png.DecodeConfig(bytes.NewReader(img.Bytes))
		if err != nil || cfg.Width != 300 || cfg.Height != 200 || img.Width != 300 || img.Height != 200 {
			t.Fatalf("sized noop image %dx%d, %v", cfg.Width, cfg.Height, err)
		}
		if _, err := png.Decode(bytes.NewReader(img.Bytes)); err != nil {
			t.Fatalf("sized noop image does not decode: %v", err)
		}
		if len(img.Bytes) < 300*200 {
			t.Fatalf("sized noop image of %d bytes, want the size of its pixels", len(img.Bytes))
		}
	}
	if bytes.Equal(a.Bytes, b.Bytes) {
		t.Fatal("two frames made the same bytes")
	}
	g := NewNoop()
	if _, err := g.Submit(context.Background(), Job{Key: "c", Params: []byte(`{"width":1,"height":200}`)}); !IsPermanent(err) {
		t.Fatalf("size out of range: %v", err)
	}
}
