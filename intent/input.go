package intent

import "github.com/go-json-experiment/json/jsontext"

// GenerationInput is the normalized body of POST /v1/generations without its
// request id: strictly decoded, validated, with every default applied. Its
// canonical JSON (with actor and operation) is what the fingerprint hashes,
// and it is what a batch stores for its workers as the batch spec.
type GenerationInput struct {
	Prompt     string     `json:"prompt"`
	Sets       []FrameSet `json:"sets"`
	Providers  []string   `json:"providers"`
	Candidates int        `json:"candidates"`
	Subjects   []string   `json:"subjects"`
	// Seed is absent (nil) unless the caller gave one.
	Seed *int64 `json:"seed,omitempty"`
	// Params is a JSON object in canonical form (RFC 8785).
	Params jsontext.Value `json:"params"`
}

// FrameSet is one collection of frames to render.
type FrameSet struct {
	Collection string   `json:"collection"`
	Frames     []string `json:"frames"`
}

// PublicationInput is the normalized body of POST /v1/publications without its
// request id.
type PublicationInput struct {
	BatchID  string   `json:"batch_id"`
	AssetIDs []string `json:"asset_ids"`
	Channel  string   `json:"channel"`
}
