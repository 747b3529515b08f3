package client_test

import (
	"strings"
	"testing"

	"studio/client"
)

// TestFromEnv: the client reads STUDIO_SERVER (a bare HOST:PORT is http)
// and STUDIO_TOKEN, and a missing one is an error that names it.
func TestFromEnv(t *testing.T) {
	t.Setenv("STUDIO_SERVER", "")
	t.Setenv("STUDIO_URL", "")
	t.Setenv("STUDIO_TOKEN", "")
	if _, err := client.FromEnv(); err == nil || !strings.Contains(err.Error(), "STUDIO_SERVER") {
		t.Fatalf("no server: %v", err)
	}
	t.Setenv("STUDIO_SERVER", "127.0.0.1:7070")
	if _, err := client.FromEnv(); err == nil || !strings.Contains(err.Error(), "STUDIO_TOKEN") {
		t.Fatalf("no token: %v", err)
	}
	t.Setenv("STUDIO_TOKEN", "tok")
	if _, err := client.FromEnv(); err != nil {
		t.Fatalf("bare host and port: %v", err)
	}
	t.Setenv("STUDIO_SERVER", "")
	t.Setenv("STUDIO_URL", "http://127.0.0.1:7070")
	if _, err := client.FromEnv(); err != nil {
		t.Fatalf("the older STUDIO_URL: %v", err)
	}
}
