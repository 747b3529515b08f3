package intent_test

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"

	"studio/intent"
)

// pngClaiming is a PNG whose header claims w x h pixels, followed by a
// tiny (wrong) image data chunk and the end chunk: every chunk's CRC is
// right, so only a decoder that reads past the header can tell.
func pngClaiming(w, h uint32) []byte {
	chunk := func(typ string, data []byte) []byte {
		var b bytes.Buffer
		binary.Write(&b, binary.BigEndian, uint32(len(data)))
		b.WriteString(typ)
		b.Write(data)
		crc := crc32.NewIEEE()
		crc.Write([]byte(typ))
		crc.Write(data)
		binary.Write(&b, binary.BigEndian, crc.Sum32())
		return b.Bytes()
	}
	var ihdr bytes.Buffer
	binary.Write(&ihdr, binary.BigEndian, w)
	binary.Write(&ihdr, binary.BigEndian, h)
	ihdr.Write([]byte{8, 6, 0, 0, 0}) // 8-bit RGBA
	out := []byte("\x89PNG\r\n\x1a\n")
	out = append(out, chunk("IHDR", ihdr.Bytes())...)
	out = append(out, chunk("IDAT", []byte{0x78, 0x9c, 0x63, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01})...)
	return append(out, chunk("IEND", nil)...)
}

// TestUploadPixelLimit: an image whose header claims more pixels than the
// limit is refused (413) without being decoded; the limit is the
// Uploads' MaxPixels, DefaultMaxUploadPixels when unset.
func TestUploadPixelLimit(t *testing.T) {
	t.Parallel()
	r := newUploadRig(t)
	_, err := r.upload(t, "alice", "", "image/png", pngClaiming(1_000_000, 1_000_000))
	if code := intent.ErrorCode(err); code != intent.ETooLarge {
		t.Fatalf("a 1,000,000 x 1,000,000 PNG: %v (code %q), want %q", err, code, intent.ETooLarge)
	}
	if msg := intent.ErrorMessage(err); !bytes.Contains([]byte(msg), []byte("1000000x1000000")) {
		t.Errorf("the refusal %q does not name the size", msg)
	}
	r.up.MaxPixels = 6 * 5
	if _, err := r.upload(t, "alice", "", "image/png", pngBytes(t, 7, 5, 1)); intent.ErrorCode(err) != intent.ETooLarge {
		t.Fatalf("7x5 over a limit of 30 pixels: %v", err)
	}
	if _, err := r.upload(t, "alice", "", "image/png", pngBytes(t, 6, 5, 1)); err != nil {
		t.Fatalf("6x5 at a limit of 30 pixels: %v", err)
	}
	if n := r.countAssets(t); n != 1 {
		t.Fatalf("%d assets, want the one within the limit", n)
	}
}

// TestUploadMustDecode: images whose header is fine but whose data is not
// are refused (415): a header with broken data, a truncated PNG and a
// truncated JPEG.
func TestUploadMustDecode(t *testing.T) {
	t.Parallel()
	r := newUploadRig(t)
	png := pngBytes(t, 64, 64, 3)
	jpg := jpegBytes(t, 64, 64)
	for name, tc := range map[string]struct {
		typ  string
		body []byte
	}{
		"png header, broken data": {"image/png", pngClaiming(16, 16)},
		"png cut short":           {"image/png", png[:len(png)/2]},
		"jpeg cut short":          {"image/jpeg", jpg[:len(jpg)/2]},
	} {
		if _, err := r.upload(t, "alice", "", tc.typ, tc.body); intent.ErrorCode(err) != intent.EUnsupportedMedia {
			t.Errorf("%s: %v, want %s", name, err, intent.EUnsupportedMedia)
		}
	}
	if n := r.countAssets(t); n != 0 {
		t.Fatalf("%d assets stored from images that do not decode", n)
	}
	if _, err := r.upload(t, "alice", "", "image/png", png); err != nil {
		t.Fatalf("a whole PNG: %v", err)
	}
}
