package httpapi

import (
	_ "embed"
	"fmt"
	"net/http"
	"strconv"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// openAPIDocument is the OpenAPI 3.1 description of every route, written by
// hand. TestOpenAPICoversRoutes keeps it and the router in step.
//
//go:embed openapi.json
var openAPIDocument []byte

// checkOpenAPI proves the embedded document is well-formed JSON with an
// OpenAPI version, so that a broken edit fails at start, not at a client.
func checkOpenAPI() error {
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]jsontext.Value `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		return fmt.Errorf("openapi document: %w", err)
	}
	if doc.OpenAPI == "" || len(doc.Paths) == 0 {
		return fmt.Errorf("openapi document: no openapi version or no paths")
	}
	return nil
}

// openAPI is GET /openapi.json.
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", contentTypeJSON)
	h.Set("Content-Length", strconv.Itoa(len(openAPIDocument)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDocument)
}
