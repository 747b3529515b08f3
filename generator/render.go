package generator

import (
	"encoding/binary"
	"image"
	"math"
)

// rng is xoshiro256**: small, fast and fixed here, so pictures do not change
// when a library's generator does.
type rng struct{ s [4]uint64 }

func newRNG(d digest, stream uint64) *rng {
	r := &rng{}
	for i := range r.s {
		r.s[i] = binary.LittleEndian.Uint64(d[8*i:]) ^ (stream * 0x9e3779b97f4a7c15)
	}
	if r.s == [4]uint64{} {
		r.s[0] = 1
	}
	for range 8 {
		r.next()
	}
	return r
}

func (r *rng) next() uint64 {
	s := &r.s
	out := rotl(s[1]*5, 7) * 9
	t := s[1] << 17
	s[2] ^= s[0]
	s[3] ^= s[1]
	s[1] ^= s[2]
	s[0] ^= s[3]
	s[2] ^= t
	s[3] = rotl(s[3], 45)
	return out
}

func rotl(x uint64, k uint) uint64 { return x<<k | x>>(64-k) }

// float returns a number in [0, 1).
func (r *rng) float() float64 { return float64(r.next()>>11) / (1 << 53) }

// rangef returns a number in [lo, hi).
func (r *rng) rangef(lo, hi float64) float64 { return lo + (hi-lo)*r.float() }

// intn returns a number in [0, n).
func (r *rng) intn(n int) int { return int(r.next() % uint64(n)) }

// rgb is an opaque colour.
type rgb struct{ r, g, b float64 }

// hsv turns hue (0..360), saturation and value (0..1) into a colour.
func hsv(h, s, v float64) rgb {
	h = math.Mod(h, 360)
	if h < 0 {
		h += 360
	}
	c := v * s
	x := c * (1 - math.Abs(math.Mod(h/60, 2)-1))
	m := v - c
	var r, g, b float64
	switch {
	case h < 60:
		r, g, b = c, x, 0
	case h < 120:
		r, g, b = x, c, 0
	case h < 180:
		r, g, b = 0, c, x
	case h < 240:
		r, g, b = 0, x, c
	case h < 300:
		r, g, b = x, 0, c
	default:
		r, g, b = c, 0, x
	}
	return rgb{(r + m) * 255, (g + m) * 255, (b + m) * 255}
}

// canvas draws on an RGBA image with alpha blending and soft edges.
type canvas struct {
	img  *image.RGBA
	w, h int
}

func newCanvas(img *image.RGBA) *canvas {
	b := img.Bounds()
	return &canvas{img: img, w: b.Dx(), h: b.Dy()}
}

func clamp255(v float64) uint8 {
	switch {
	case v <= 0:
		return 0
	case v >= 255:
		return 255
	}
	return uint8(v + 0.5)
}

// set writes an opaque colour.
func (c *canvas) set(x, y int, col rgb) {
	i := c.img.PixOffset(x, y)
	p := c.img.Pix[i : i+4 : i+4]
	p[0], p[1], p[2], p[3] = clamp255(col.r), clamp255(col.g), clamp255(col.b), 255
}

// blend mixes col into a pixel with opacity a (0..1).
func (c *canvas) blend(x, y int, col rgb, a float64) {
	if x < 0 || y < 0 || x >= c.w || y >= c.h || a <= 0 {
		return
	}
	if a > 1 {
		a = 1
	}
	i := c.img.PixOffset(x, y)
	p := c.img.Pix[i : i+4 : i+4]
	p[0] = clamp255(float64(p[0]) + (col.r-float64(p[0]))*a)
	p[1] = clamp255(float64(p[1]) + (col.g-float64(p[1]))*a)
	p[2] = clamp255(float64(p[2]) + (col.b-float64(p[2]))*a)
	p[3] = 255
}

// fillRect fills [x0,x1) x [y0,y1) with an opaque colour.
func (c *canvas) fillRect(x0, y0, x1, y1 int, col rgb) {
	x0, y0 = max(x0, 0), max(y0, 0)
	x1, y1 = min(x1, c.w), min(y1, c.h)
	for y := y0; y < y1; y++ {
		for x := x0; x < x1; x++ {
			c.set(x, y, col)
		}
	}
}

type pt struct{ x, y float64 }

// polyline draws a line of width wd through pts with soft edges. Long
// segments are cut into short pieces so each piece only visits pixels near
// it; a pixel belongs to the piece its projection falls in, so joints are
// not drawn twice (beyond a sliver on the inside of sharp bends).
func (c *canvas) polyline(pts []pt, wd float64, col rgb, a float64) {
	const piece = 6.0
	var pieces []pt
	for i, p := range pts {
		if i == 0 {
			pieces = append(pieces, p)
			continue
		}
		q := pts[i-1]
		n := int(math.Ceil(math.Sqrt((p.x-q.x)*(p.x-q.x)+(p.y-q.y)*(p.y-q.y)) / piece))
		for k := 1; k <= n; k++ {
			t := float64(k) / float64(n)
			pieces = append(pieces, pt{q.x + (p.x-q.x)*t, q.y + (p.y-q.y)*t})
		}
	}
	r := wd / 2
	for i := 1; i < len(pieces); i++ {
		c.segment(pieces[i-1], pieces[i], r, col, a, i == 1, i == len(pieces)-1)
	}
}

// segment draws one piece of a polyline; first and last say whether it owns
// the round cap before its start and after its end.
func (c *canvas) segment(p, q pt, r float64, col rgb, a float64, first, last bool) {
	dx, dy := q.x-p.x, q.y-p.y
	l2 := dx*dx + dy*dy
	x0 := int(math.Floor(min(p.x, q.x) - r - 1))
	x1 := int(math.Ceil(max(p.x, q.x) + r + 1))
	y0 := int(math.Floor(min(p.y, q.y) - r - 1))
	y1 := int(math.Ceil(max(p.y, q.y) + r + 1))
	x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, c.w-1), min(y1, c.h-1)
	for y := y0; y <= y1; y++ {
		for x := x0; x <= x1; x++ {
			px, py := float64(x)+0.5, float64(y)+0.5
			t := 0.0
			if l2 > 0 {
				t = ((px-p.x)*dx + (py-p.y)*dy) / l2
			}
			if (t < 0 && !first) || (t >= 1 && !last) {
				continue
			}
			t = math.Max(0, math.Min(1, t))
			d := math.Sqrt((px-(p.x+t*dx))*(px-(p.x+t*dx)) + (py-(p.y+t*dy))*(py-(p.y+t*dy)))
			cov := r + 0.5 - d
			if cov <= 0 {
				continue
			}
			c.blend(x, y, col, a*math.Min(cov, 1))
		}
	}
}

// bezier returns points along a quadratic Bézier curve.
func bezier(p0, p1, p2 pt, n int) []pt {
	out := make([]pt, n+1)
	for i := range out {
		t := float64(i) / float64(n)
		u := 1 - t
		out[i] = pt{u*u*p0.x + 2*u*t*p1.x + t*t*p2.x, u*u*p0.y + 2*u*t*p1.y + t*t*p2.y}
	}
	return out
}

// renderSketch draws pen strokes on light paper: a sketchbook page with
// faint rules, a few wobbly outlined shapes, hatching inside them and loose
// gesture strokes, in one ink colour.
func renderSketch(img *image.RGBA, d digest) {
	c := newCanvas(img)
	r := newRNG(d, 1)
	s := float64(min(c.w, c.h))
	unit := math.Max(s/256, 0.5)

	// Paper: warm off-white, a little darker towards the edges (smooth, so
	// the PNG stays small).
	paper := hsv(r.rangef(30, 60), r.rangef(0.04, 0.10), 0.97)
	for y := 0; y < c.h; y++ {
		dy := (float64(y)+0.5)/float64(c.h) - 0.5
		for x := 0; x < c.w; x++ {
			dx := (float64(x)+0.5)/float64(c.w) - 0.5
			n := -math.Floor(40 * (dx*dx + dy*dy))
			c.set(x, y, rgb{paper.r + n, paper.g + n, paper.b + n})
		}
	}
	// Faint rules.
	rule := hsv(205, 0.35, 0.85)
	gap := float64(c.h) / float64(10+r.intn(8))
	for y := gap; y < float64(c.h); y += gap {
		c.polyline([]pt{{0, y}, {float64(c.w), y}}, math.Max(unit, 1), rule, 0.35)
	}

	inks := []rgb{hsv(220, 0.35, 0.25), hsv(25, 0.55, 0.30), hsv(0, 0, 0.18), hsv(160, 0.40, 0.25)}
	ink := inks[r.intn(len(inks))]
	wd := math.Max(1.2*unit, 1)
	W, H := float64(c.w), float64(c.h)

	// Shapes: wobbly ellipses drawn twice, hatched inside.
	shapes := 2 + r.intn(4)
	for range shapes {
		cx, cy := r.rangef(0.2, 0.8)*W, r.rangef(0.2, 0.8)*H
		rx, ry := r.rangef(0.08, 0.25)*W, r.rangef(0.08, 0.25)*H
		rot := r.rangef(0, math.Pi)
		for pass := range 2 {
			var loop []pt
			phase := r.rangef(0, 2*math.Pi)
			wob := r.rangef(0.02, 0.08)
			for i := 0; i <= 48; i++ {
				a := phase + float64(i)/48*2*math.Pi*1.04
				k := 1 + wob*math.Sin(3*a+float64(pass))
				ex, ey := rx*k*math.Cos(a), ry*k*math.Sin(a)
				loop = append(loop, pt{cx + ex*math.Cos(rot) - ey*math.Sin(rot), cy + ex*math.Sin(rot) + ey*math.Cos(rot)})
			}
			c.polyline(loop, wd, ink, 0.75-0.25*float64(pass))
		}
		// Hatching clipped to the ellipse.
		ang := r.rangef(0, math.Pi)
		ux, uy := math.Cos(ang), math.Sin(ang)
		step := math.Max(r.rangef(4, 9)*unit, 2)
		reach := math.Max(rx, ry)
		for off := -reach; off <= reach; off += step {
			var seg []pt
			for t := -reach; t <= reach; t += reach / 16 {
				x, y := cx+ux*t-uy*off, cy+uy*t+ux*off
				// Inside test in the ellipse's own frame.
				lx := (x-cx)*math.Cos(rot) + (y-cy)*math.Sin(rot)
				ly := -(x-cx)*math.Sin(rot) + (y-cy)*math.Cos(rot)
				if (lx*lx)/(rx*rx)+(ly*ly)/(ry*ry) < 0.85 {
					seg = append(seg, pt{x, y})
				} else if len(seg) > 0 {
					break
				}
			}
			if len(seg) > 1 {
				c.polyline(seg, math.Max(wd*0.6, 1), ink, 0.45)
			}
		}
	}

	// Gesture strokes.
	strokes := 8 + r.intn(14)
	for range strokes {
		p0 := pt{r.rangef(0.05, 0.95) * W, r.rangef(0.05, 0.95) * H}
		p2 := pt{p0.x + r.rangef(-0.4, 0.4)*W, p0.y + r.rangef(-0.4, 0.4)*H}
		p1 := pt{(p0.x+p2.x)/2 + r.rangef(-0.25, 0.25)*W, (p0.y+p2.y)/2 + r.rangef(-0.25, 0.25)*H}
		c.polyline(bezier(p0, p1, p2, 24), wd*r.rangef(0.7, 1.6), ink, r.rangef(0.5, 0.9))
	}
}

// renderMosaic draws a grid of coloured tiles set in dark grout: a palette
// around one hue, a motif (rings, bands or a diamond) choosing each tile's
// colour, and a little variation per tile; some tiles are split on a
// diagonal.
func renderMosaic(img *image.RGBA, d digest) {
	c := newCanvas(img)
	r := newRNG(d, 3)
	W, H := float64(c.w), float64(c.h)

	base := r.rangef(0, 360)
	spread := []float64{0, 30, 180, 210, -30, 150}
	palette := make([]rgb, 5)
	for i := range palette {
		palette[i] = hsv(base+spread[r.intn(len(spread))]+r.rangef(-12, 12), r.rangef(0.45, 0.85), r.rangef(0.55, 0.95))
	}
	grout := hsv(base, 0.15, 0.16)
	c.fillRect(0, 0, c.w, c.h, grout)

	across := 8 + r.intn(13)
	tile := math.Max(math.Min(W, H)/float64(across), 4)
	gw := math.Max(math.Round(tile/12), 1)
	cx, cy := r.rangef(0.25, 0.75)*W, r.rangef(0.25, 0.75)*H
	motif := r.intn(3)
	freq := r.rangef(0.6, 1.6)
	ang := r.rangef(0, math.Pi)

	for ty := 0; float64(ty)*tile < H; ty++ {
		for tx := 0; float64(tx)*tile < W; tx++ {
			x0, y0 := float64(tx)*tile, float64(ty)*tile
			mx, my := (x0+tile/2-cx)/tile, (y0+tile/2-cy)/tile
			var v float64
			switch motif {
			case 0: // rings
				v = math.Sqrt(mx*mx+my*my) * freq
			case 1: // bands
				v = (mx*math.Cos(ang) + my*math.Sin(ang)) * freq
			default: // diamond
				v = (math.Abs(mx) + math.Abs(my)) * freq * 0.7
			}
			idx := int(math.Floor(v+r.rangef(-0.3, 0.3))) % len(palette)
			if idx < 0 {
				idx += len(palette)
			}
			col := palette[idx]
			k := r.rangef(0.85, 1.15)
			col = rgb{col.r * k, col.g * k, col.b * k}
			ix0, iy0 := int(x0+gw), int(y0+gw)
			ix1, iy1 := int(x0+tile-gw), int(y0+tile-gw)
			if r.intn(7) == 0 {
				// A tile split on its diagonal into two colours.
				other := palette[(idx+1+r.intn(len(palette)-1))%len(palette)]
				for y := max(iy0, 0); y < min(iy1, c.h); y++ {
					for x := max(ix0, 0); x < min(ix1, c.w); x++ {
						if float64(x-ix0) > float64(y-iy0) {
							c.set(x, y, col)
						} else {
							c.set(x, y, other)
						}
					}
				}
				continue
			}
			c.fillRect(ix0, iy0, ix1, iy1, col)
			// A soft highlight in one corner, like glaze.
			hl := int(math.Max(tile/4, 1))
			for y := iy0; y < min(iy0+hl, iy1, c.h); y++ {
				for x := ix0; x < min(ix0+hl, ix1, c.w); x++ {
					c.blend(x, y, rgb{255, 255, 255}, 0.18)
				}
			}
		}
	}
}
