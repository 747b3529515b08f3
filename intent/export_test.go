package intent

// FingerprintDocs answers the document Fingerprint hashes for a
// generation input both ways: written by the fast path (ok false when it
// declines the input) and by the generic path.
func FingerprintDocs(actor, operation string, in GenerationInput) (fast []byte, ok bool, generic []byte, err error) {
	fast, ok = appendGenerationDoc(nil, actor, operation, &in)
	generic, err = CanonicalJSON(fingerprintDoc{Actor: actor, Operation: operation, Input: in})
	return fast, ok, generic, err
}
