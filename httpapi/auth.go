package httpapi

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"

	"studio/intent"
)

// TokenPrefix starts every token NewToken makes, so that a leaked token is
// easy to recognise (and to search for).
const TokenPrefix = "stu_"

// maxTokenLen bounds the Authorization value hashed per request.
const maxTokenLen = 512

// NewToken returns a new bearer token: the prefix and 32 random bytes,
// base64url without padding.
func NewToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("new token: %w", err)
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// HashToken returns what the store keeps of a token: its SHA-256 in
// lowercase hex. A token has 256 random bits, so a fast hash is enough.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// bearerToken returns the token of an "Authorization: Bearer <token>"
// header. present says whether the request carried bearer credentials at
// all (RFC 6750: without them the challenge names no error).
func bearerToken(r *http.Request) (token string, present bool) {
	vals := r.Header.Values("Authorization")
	if len(vals) == 0 {
		return "", false
	}
	if len(vals) > 1 {
		return "", true
	}
	scheme, rest, _ := strings.Cut(vals[0], " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.Trim(rest, " ")
	if token == "" || len(token) > maxTokenLen || strings.ContainsAny(token, " \t") {
		return "", true
	}
	return token, true
}

// authenticate admits requests with a valid bearer token and puts the
// token's actor in their context; others get 401 with a Bearer challenge.
// Every answer behind it is Cache-Control: no-store (asset content sets its
// own).
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		token, present := bearerToken(r)
		if !present {
			w.Header().Set("WWW-Authenticate", `Bearer`)
			s.Error(w, r, intent.Errorf(intent.EUnauthorized, "A bearer token is required."))
			return
		}
		actor := ""
		if token != "" {
			var err error
			actor, err = s.store.ActorForToken(r.Context(), HashToken(token))
			if err != nil && intent.ErrorCode(err) != intent.ENotFound {
				s.Error(w, r, fmt.Errorf("authenticate: %w", err))
				return
			}
		}
		if actor == "" {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			s.Error(w, r, intent.Errorf(intent.EUnauthorized, "The bearer token is not valid."))
			return
		}
		if ctx := withActor(r.Context(), actor); ctx != r.Context() {
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(w, r)
	})
}
