package client_test

import (
	"testing"

	"studio/client"
)

// TestErrorText: one rule for every problem: the detail as a sentence
// with one final period, then the fields at fault the detail does not
// state already, as "field: message", separated by "; ".
func TestErrorText(t *testing.T) {
	for _, c := range []struct {
		name string
		e    client.Error
		want string
	}{
		{"detail only", client.Error{Status: 404, Title: "Not Found", Detail: "No batch with this id."},
			"404 Not Found: No batch with this id."},
		{"a detail without its period", client.Error{Status: 409, Title: "Conflict", Detail: "the id is taken"},
			"409 Conflict: the id is taken."},
		{"a detail with two periods", client.Error{Status: 400, Title: "Bad Request", Detail: "Bad.. "},
			"400 Bad Request: Bad."},
		{"fields below a summary", client.Error{Status: 400, Title: "Bad Request", Detail: "The request body is invalid.",
			Errors: []client.FieldError{{Field: "prompt", Message: "must not be empty"}, {Field: "sets", Message: "must have 1 to 20 items."}}},
			"400 Bad Request: The request body is invalid. prompt: must not be empty; sets: must have 1 to 20 items."},
		{"one field the detail states (field: message)", client.Error{Status: 422, Title: "Unprocessable Entity",
			Detail: `providers[0]: no generator or route "oil" in the catalog.`,
			Errors: []client.FieldError{{Field: "providers[0]", Message: `no generator or route "oil" in the catalog`}}},
			`422 Unprocessable Entity: providers[0]: no generator or route "oil" in the catalog.`},
		{"one field the detail states (field message)", client.Error{Status: 422, Title: "Unprocessable Entity",
			Detail: "params.width must be an integer from 16 to 2048.",
			Errors: []client.FieldError{{Field: "params.width", Message: "must be an integer from 16 to 2048"}}},
			"422 Unprocessable Entity: params.width must be an integer from 16 to 2048."},
		{"several fields to plan", client.Error{Status: 422, Title: "Unprocessable Entity",
			Detail: "The request cannot be planned: 2 problems (see errors).",
			Errors: []client.FieldError{{Field: "providers[0]", Message: `no generator or route "oil" in the catalog`},
				{Field: "subjects[0]", Message: `subject "ghost" does not exist or is not visible to this actor`}}},
			`422 Unprocessable Entity: The request cannot be planned: 2 problems (see errors). providers[0]: no generator or route "oil" in the catalog; subjects[0]: subject "ghost" does not exist or is not visible to this actor.`},
		{"tries", client.Error{Status: 503, Title: "Service Unavailable", Detail: "The database is busy.", Tries: 6},
			"503 Service Unavailable (after 6 tries): The database is busy."},
		{"no detail", client.Error{Status: 502, Title: "Bad Gateway"}, "502 Bad Gateway"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%s:\n got  %s\n want %s", c.name, got, c.want)
		}
	}
}
