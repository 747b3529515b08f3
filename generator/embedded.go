package generator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"image"
	"image/png"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// KindEmbedded is the catalog kind of the generators built into studio.
const KindEmbedded = "embedded"

// Ids of the embedded generators.
const (
	Sketch = "sketch" // pen strokes on light paper
	Mosaic = "mosaic" // coloured tiles
	Noop   = "noop"   // a fixed 1x1 PNG (or params.width x params.height of noise), no delay: for benchmarks
)

// EmbeddedIDs lists the ids a catalog may give generators of kind embedded.
func EmbeddedIDs() []string { return []string{Sketch, Mosaic, Noop} }

// ErrSimulated is the transient failure params.fail_attempts asks for.
var ErrSimulated = errors.New("simulated failure")

// renderFunc draws the picture of a digest at a size.
type renderFunc func(img *image.RGBA, d digest)

// embedded is a stateless in-process generator. Its reference is
// "<id>:<sha256 of the render inputs>:<width>x<height>:<delay_ms>", so Wait
// and Fetch need nothing but the reference, in any process.
type embedded struct {
	id     string
	render renderFunc
}

// NewSketch returns the sketch generator: pen strokes and hatching on light
// paper.
func NewSketch() Generator { return &embedded{id: Sketch, render: renderSketch} }

// NewMosaic returns the mosaic generator: a grid of coloured tiles with a
// motif.
func NewMosaic() Generator { return &embedded{id: Mosaic, render: renderMosaic} }

// ID implements Generator.
func (g *embedded) ID() string { return g.id }

// Submit implements Generator. It checks the params, fails the first
// params.fail_attempts attempts with a transient error, and returns the
// reference, a pure function of the job (the same Key always has the same
// job, hence the same reference).
func (g *embedded) Submit(ctx context.Context, job Job) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if job.Attempt < 1 {
		return "", Permanent(fmt.Errorf("task %s: attempt %d is not 1-based", job.Key, job.Attempt))
	}
	p, err := ParseParams(job.Params)
	if err != nil {
		return "", Permanent(fmt.Errorf("task %s: %w", job.Key, err))
	}
	if job.Attempt <= p.FailAttempts {
		return "", fmt.Errorf("task %s: %w (attempt %d of the first %d)", job.Key, ErrSimulated, job.Attempt, p.FailAttempts)
	}
	d, err := jobDigest(g.id, job)
	if err != nil {
		return "", Permanent(fmt.Errorf("task %s: %w", job.Key, err))
	}
	return ref{gen: g.id, digest: d, width: p.Width, height: p.Height, delayMS: p.DelayMS}.String(), nil
}

// Wait implements Generator: it waits params.delay_ms, or until ctx ends.
func (g *embedded) Wait(ctx context.Context, s string) error {
	r, err := g.parseRef(s)
	if err != nil {
		return err
	}
	if r.delayMS == 0 {
		return ctx.Err()
	}
	t := time.NewTimer(time.Duration(r.delayMS) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Fetch implements Generator: it renders the picture of the reference.
func (g *embedded) Fetch(ctx context.Context, s string) (Image, error) {
	r, err := g.parseRef(s)
	if err != nil {
		return Image{}, err
	}
	if err := ctx.Err(); err != nil {
		return Image{}, err
	}
	img := image.NewRGBA(image.Rect(0, 0, r.width, r.height))
	g.render(img, r.digest)
	b, err := encodePNG(img)
	if err != nil {
		return Image{}, fmt.Errorf("encode png: %w", err)
	}
	return Image{Bytes: b, ContentType: "image/png", Width: r.width, Height: r.height}, nil
}

func (g *embedded) parseRef(s string) (ref, error) {
	r, err := parseRef(s)
	if err != nil {
		return ref{}, Permanent(err)
	}
	if r.gen != g.id {
		return ref{}, Permanent(fmt.Errorf("reference %q belongs to generator %q, not %q", s, r.gen, g.id))
	}
	return r, nil
}

// encoder is the one PNG encoder configuration: fixed, so equal images give
// equal bytes. Go's PNG encoder writes no time or other varying chunk.
var encoder = png.Encoder{CompressionLevel: png.DefaultCompression}

func encodePNG(img image.Image) ([]byte, error) {
	var buf bytes.Buffer
	if err := encoder.Encode(&buf, img); err != nil {
		return nil, fmt.Errorf("encode png: %w", err)
	}
	return buf.Bytes(), nil
}

// digest is the SHA-256 of everything a picture is rendered from.
type digest [32]byte

// jobDigest hashes the render inputs: generator, prompt, collection, frame,
// candidate, seed, subjects and params, without the members that only steer
// execution (delay_ms, fail_attempts), nor the key or the attempt: the same
// inputs in another batch give the same picture.
func jobDigest(gen string, job Job) (digest, error) {
	h := sha256.New()
	str := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	num := func(v int64) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(v))
		h.Write(n[:])
	}
	str("studio/embedded/v1")
	str(gen)
	str(job.Prompt)
	str(job.Collection)
	str(job.Frame)
	num(int64(job.Candidate))
	if job.Seed != nil {
		num(1)
		num(*job.Seed)
	} else {
		num(0)
	}
	num(int64(len(job.Subjects)))
	for _, s := range job.Subjects {
		str(s)
	}
	members, err := decodeObject(job.Params)
	if err != nil {
		return digest{}, err
	}
	keys := make([]string, 0, len(members))
	for k := range members {
		if k != "delay_ms" && k != "fail_attempts" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	num(int64(len(keys)))
	for _, k := range keys {
		v := members[k].Clone()
		if err := v.Canonicalize(); err != nil {
			return digest{}, fmt.Errorf("params.%s: %w", k, err)
		}
		str(k)
		str(string(v))
	}
	var d digest
	h.Sum(d[:0])
	return d, nil
}

// ref is a parsed reference of an embedded generator.
type ref struct {
	gen           string
	digest        digest
	width, height int
	delayMS       int
}

func (r ref) String() string {
	return fmt.Sprintf("%s:%x:%dx%d:%d", r.gen, r.digest[:], r.width, r.height, r.delayMS)
}

func parseRef(s string) (ref, error) {
	bad := func(why string) (ref, error) { return ref{}, fmt.Errorf("bad reference %q: %s", s, why) }
	parts := strings.Split(s, ":")
	if len(parts) != 4 {
		return bad("want 4 parts")
	}
	r := ref{gen: parts[0]}
	if n, err := hex.Decode(r.digest[:], []byte(parts[1])); err != nil || n != len(r.digest) || len(parts[1]) != 2*len(r.digest) {
		return bad("digest")
	}
	w, h, ok := strings.Cut(parts[2], "x")
	var err1, err2, err3 error
	r.width, err1 = strconv.Atoi(w)
	r.height, err2 = strconv.Atoi(h)
	r.delayMS, err3 = strconv.Atoi(parts[3])
	switch {
	case !ok || err1 != nil || err2 != nil || r.width < MinSize || r.width > MaxSize || r.height < MinSize || r.height > MaxSize:
		return bad("size")
	case err3 != nil || r.delayMS < 0 || r.delayMS > MaxDelayMS:
		return bad("delay")
	}
	return r, nil
}

// noop is the generator for benchmarks: no delay, next to no CPU. Its
// image is a fixed 1x1 PNG, or, when the job's params ask for a width and
// a height, a PNG of that size whose pixels (noise, stored uncompressed)
// are made once per size: images differ only by a text chunk holding the
// digest of the job's inputs (the same inputs, the same bytes, as for every
// embedded generator), so each costs a copy, not a render. Real sizes for
// the storage benchmarks, without measuring rendering.
type noop struct{}

// noopPNG is a 1x1 opaque grey PNG.
var noopPNG = func() []byte {
	img := image.NewRGBA(image.Rect(0, 0, 1, 1))
	copy(img.Pix, []byte{0x80, 0x80, 0x80, 0xff})
	b, err := encodePNG(img)
	if err != nil {
		panic(err)
	}
	return b
}()

// NewNoop returns the noop generator: every job is done at once. It reads
// only params.width and params.height (both, or neither).
func NewNoop() Generator { return noop{} }

// ID implements Generator.
func (noop) ID() string { return Noop }

// Submit implements Generator: the reference names the size and the job.
func (noop) Submit(ctx context.Context, job Job) (string, error) {
	var p struct{ Width, Height int }
	if len(job.Params) > 0 {
		if err := stdjson.Unmarshal(job.Params, &p); err != nil {
			return "", Permanent(fmt.Errorf("noop params: %w", err))
		}
	}
	if p.Width == 0 && p.Height == 0 {
		return Noop, ctx.Err()
	}
	if p.Width < MinSize || p.Width > MaxSize || p.Height < MinSize || p.Height > MaxSize {
		return "", Permanent(fmt.Errorf("noop params: size %dx%d out of range", p.Width, p.Height))
	}
	d, err := jobDigest(Noop, job)
	if err != nil {
		return "", Permanent(err)
	}
	return fmt.Sprintf("%s/%dx%d/%s", Noop, p.Width, p.Height, hex.EncodeToString(d[:])), ctx.Err()
}

// Wait implements Generator.
func (noop) Wait(ctx context.Context, ref string) error { return ctx.Err() }

// noopSized caches, per size, the pixels of sized noop images: the PNG
// without its signature and IHDR (which come first) split around the
// place where each job's text chunk goes.
var noopSized sync.Map // "WxH" -> []byte (IHDR..IEND, whole)

// sizedNoop is a WxH grey PNG of noise (one byte a pixel: 256 KiB at
// 512x512, the size of a real generated image), stored without
// compression, with a tEXt chunk holding key (the job's digest): the same
// size costs one render per process.
func sizedNoop(w, h int, key string) ([]byte, error) {
	size := fmt.Sprintf("%dx%d", w, h)
	v, ok := noopSized.Load(size)
	if !ok {
		img := image.NewGray(image.Rect(0, 0, w, h))
		r := rand.New(rand.NewPCG(uint64(w), uint64(h)))
		for i := range img.Pix {
			img.Pix[i] = byte(r.Uint32())
		}
		var buf bytes.Buffer
		if err := (&png.Encoder{CompressionLevel: png.NoCompression}).Encode(&buf, img); err != nil {
			return nil, fmt.Errorf("encode png: %w", err)
		}
		v, _ = noopSized.LoadOrStore(size, buf.Bytes())
	}
	base := v.([]byte)
	// signature (8) + IHDR chunk (4+4+13+4), then the job's tEXt chunk.
	const head = 8 + 25
	text := append([]byte("studio-job\x00"), key...)
	chunk := binary.BigEndian.AppendUint32(nil, uint32(len(text)))
	chunk = append(chunk, "tEXt"...)
	chunk = append(chunk, text...)
	chunk = binary.BigEndian.AppendUint32(chunk, crc32.ChecksumIEEE(chunk[4:]))
	out := make([]byte, 0, len(base)+len(chunk))
	out = append(out, base[:head]...)
	out = append(out, chunk...)
	return append(out, base[head:]...), nil
}

// Fetch implements Generator.
func (noop) Fetch(ctx context.Context, ref string) (Image, error) {
	if err := ctx.Err(); err != nil {
		return Image{}, err
	}
	if rest, ok := strings.CutPrefix(ref, Noop+"/"); ok {
		size, key, _ := strings.Cut(rest, "/")
		ws, hs, _ := strings.Cut(size, "x")
		w, err1 := strconv.Atoi(ws)
		h, err2 := strconv.Atoi(hs)
		if err1 != nil || err2 != nil || w < MinSize || w > MaxSize || h < MinSize || h > MaxSize {
			return Image{}, Permanent(fmt.Errorf("noop: bad reference %q", ref))
		}
		b, err := sizedNoop(w, h, key)
		if err != nil {
			return Image{}, err
		}
		return Image{Bytes: b, ContentType: "image/png", Width: w, Height: h}, nil
	}
	return Image{Bytes: slices.Clone(noopPNG), ContentType: "image/png", Width: 1, Height: 1}, nil
}
