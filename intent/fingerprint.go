package intent

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// fingerprintDoc is what a fingerprint hashes. Its member names are part of
// every stored fingerprint: renaming one would turn every retry into a
// conflict.
type fingerprintDoc struct {
	Actor     string `json:"actor"`
	Operation string `json:"operation"`
	Input     any    `json:"input"`
}

// Fingerprint is the lowercase hex SHA-256 of the RFC 8785 canonical JSON of
// {"actor": actor, "operation": operation, "input": input}. input should be
// normalized (decoded, validated, defaults applied) so that key order,
// whitespace and omitted defaults of the request never change it.
func Fingerprint(actor, operation string, input any) (string, error) {
	b, err := CanonicalJSON(fingerprintDoc{Actor: actor, Operation: operation, Input: input})
	if err != nil {
		return "", fmt.Errorf("fingerprint: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}
