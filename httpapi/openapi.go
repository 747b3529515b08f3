package httpapi

import (
	_ "embed"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// openAPIDocument is the OpenAPI 3.1 description of every route, written by
// hand. TestOpenAPICoversRoutes keeps it and the router in step.
//
//go:embed openapi.json
var openAPIDocument []byte

// openAPIPaths parses the document and returns its paths with their
// methods (upper case), proving it is well-formed JSON.
func openAPIPaths() (map[string][]string, error) {
	var doc struct {
		OpenAPI string                               `json:"openapi"`
		Paths   map[string]map[string]jsontext.Value `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		return nil, fmt.Errorf("openapi document: %w", err)
	}
	if doc.OpenAPI == "" {
		return nil, fmt.Errorf("openapi document: no openapi version")
	}
	out := make(map[string][]string, len(doc.Paths))
	for path, item := range doc.Paths {
		for key := range item {
			switch key {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
				out[path] = append(out[path], strings.ToUpper(key))
			}
		}
	}
	return out, nil
}

// openAPI is GET /openapi.json.
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", contentTypeJSON)
	h.Set("Content-Length", strconv.Itoa(len(openAPIDocument)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDocument)
}
