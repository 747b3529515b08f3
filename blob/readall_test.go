package blob_test

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"studio/blob"
)

// lenLies is a reader whose Len tells less, or more, than is left.
type lenLies struct {
	io.Reader
	n int
}

func (l lenLies) Len() int { return l.n }

func TestReadAll(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 30000)
	part := bytes.NewReader(data)
	part.Seek(100, io.SeekStart)
	for _, tc := range []struct {
		name string
		r    io.Reader
		want []byte
	}{
		{"bytes.Reader", bytes.NewReader(data), data},
		{"bytes.Reader partly read", part, data[100:]},
		{"bytes.Buffer", bytes.NewBuffer(bytes.Clone(data)), data},
		{"strings.Reader", strings.NewReader(string(data)), data},
		{"no Len", iotest.HalfReader(bytes.NewReader(data)), data},
		{"Len tells too little", lenLies{iotest.OneByteReader(bytes.NewReader(data)), 1000}, data},
		{"Len tells too much", lenLies{bytes.NewReader(data), len(data) + 5000}, data},
		{"empty", bytes.NewReader(nil), []byte{}},
	} {
		got, err := blob.ReadAll(tc.r)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !bytes.Equal(got, tc.want) {
			t.Fatalf("%s: read %d bytes, want %d", tc.name, len(got), len(tc.want))
		}
	}
	if _, err := blob.ReadAll(lenLies{iotest.ErrReader(io.ErrClosedPipe), 10}); err != io.ErrClosedPipe {
		t.Fatalf("a failing reader: err %v", err)
	}
	if _, err := blob.ReadAll(lenLies{io.MultiReader(bytes.NewReader(data[:10]), iotest.ErrReader(io.ErrClosedPipe)), 10}); err != io.ErrClosedPipe {
		t.Fatalf("a reader failing after Len's bytes: err %v", err)
	}
}
