package generator

import (
	"context"
	"image"
	"testing"
)

// BenchmarkFetch256 renders and encodes one 256x256 picture per op. The
// floor is the part no picture avoids: encoding a 256x256 image with the
// same encoder (a flat one, which compresses best, and a busy one, which
// compresses worst). Compare sketch and mosaic with both.
func BenchmarkFetch256(b *testing.B) {
	ctx := context.Background()
	for _, id := range []string{Sketch, Mosaic, Noop} {
		g, err := New(Spec{ID: id, Kind: KindEmbedded})
		if err != nil {
			b.Fatal(err)
		}
		job := baseJob()
		job.Params = nil
		ref, err := g.Submit(ctx, job)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(id, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := g.Fetch(ctx, ref); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	flat := image.NewRGBA(image.Rect(0, 0, 256, 256))
	for i := range flat.Pix {
		flat.Pix[i] = 0xe0
	}
	busy := image.NewRGBA(image.Rect(0, 0, 256, 256))
	r := newRNG(digest{1}, 9)
	for i := range busy.Pix {
		busy.Pix[i] = byte(r.next())
	}
	for name, img := range map[string]*image.RGBA{"floor-encode-flat": flat, "floor-encode-noise": busy} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := encodePNG(img); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSubmit is the cost of the first step: parsing params and hashing
// the job.
func BenchmarkSubmit(b *testing.B) {
	g := NewSketch()
	job := baseJob()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Submit(context.Background(), job); err != nil {
			b.Fatal(err)
		}
	}
}
