package intent

import (
	"fmt"

	"github.com/google/uuid"
)

// newID returns a UUIDv7 string: time-ordered, so ids sort by creation.
func newID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("new id: %w", err)
	}
	return id.String(), nil
}

// NewID returns a new record id (UUIDv7).
func NewID() (string, error) { return newID() }
