// Package providertest has fake image providers for tests: an OpenAI
// Images API server and a ComfyUI server, each an httptest.Server that
// follows its provider's documented protocol, errors included, and
// records what it was asked, so that tests can count submissions.
//
// The fakes make small deterministic PNGs: ImageBytes gives the bytes a
// fake made for an image, so a test can compare an asset with them.
package providertest

import (
	"bytes"
	"crypto/sha256"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"strconv"
)

// Reply is a scripted error answer: the status, a Retry-After header
// value (empty: none), and the provider's error fields.
type Reply struct {
	Status     int
	RetryAfter string
	// Type and Code are the error's type and code (OpenAI) or type
	// (ComfyUI); Message its message.
	Type, Code, Message string
}

// makePNG draws a w x h PNG in one colour taken from seed, with a
// diagonal band, so that two seeds give different bytes.
func makePNG(seed string, w, h int) []byte {
	sum := sha256.Sum256([]byte(seed))
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	bg := color.NRGBA{sum[0], sum[1], sum[2], 0xff}
	fg := color.NRGBA{sum[3], sum[4], sum[5], 0xff}
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			c := bg
			if (x+y)%16 < 4 {
				c = fg
			}
			img.SetNRGBA(x, y, c)
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// parseSize reads "WxH" with both sides in 1..max.
func parseSize(s string, max int) (int, int, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == 'x' {
			w, err1 := strconv.Atoi(s[:i])
			h, err2 := strconv.Atoi(s[i+1:])
			if err1 != nil || err2 != nil || w < 1 || h < 1 || w > max || h > max {
				return 0, 0, false
			}
			return w, h, true
		}
	}
	return 0, 0, false
}

func writeRetryAfter(w http.ResponseWriter, r Reply) {
	if r.RetryAfter != "" {
		w.Header().Set("Retry-After", r.RetryAfter)
	}
}
