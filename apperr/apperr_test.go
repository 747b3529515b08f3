package apperr_test

import (
	"errors"
	"fmt"
	"testing"

	"studio/apperr"
)

// The code, message and fields of an *Error are found through wrapping;
// any other error is internal, with a message that tells nothing.
func TestCodeMessageFields(t *testing.T) {
	e := &apperr.Error{Code: apperr.EInvalid, Message: "bad", Fields: []apperr.FieldError{{Field: "f", Message: "m"}}}
	wrapped := fmt.Errorf("decode: %w", e)
	if apperr.Code(wrapped) != apperr.EInvalid || apperr.Message(wrapped) != "bad" || len(apperr.Fields(wrapped)) != 1 {
		t.Fatalf("wrapped: %q %q %v", apperr.Code(wrapped), apperr.Message(wrapped), apperr.Fields(wrapped))
	}
	other := errors.New("disk on fire")
	if apperr.Code(other) != apperr.EInternal || apperr.Message(other) != "Internal error." || apperr.Fields(other) != nil {
		t.Fatalf("other: %q %q %v", apperr.Code(other), apperr.Message(other), apperr.Fields(other))
	}
	if apperr.Code(nil) != "" || apperr.Message(nil) != "" {
		t.Fatal("nil has a code or a message")
	}
	if got := apperr.Errorf(apperr.ELocked, "key %s", "k").Error(); got != "locked: key k" {
		t.Fatalf("Error() = %q", got)
	}
}
