package planner

import (
	"slices"
	"testing"
)

func TestSubjectsForAndRoutes(t *testing.T) {
	t.Parallel()
	c, err := ParseCatalog([]byte(`{
		"generators": [{"id": "sketch", "kind": "embedded"}, {"id": "mosaic", "kind": "embedded"}],
		"routes": {"auto": ["sketch", "mosaic"], "fast": ["mosaic"]},
		"subjects": [{"id": "knight", "public": true}, {"id": "ghost", "actors": ["alice"]}, {"id": "cat", "public": true}]
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.SubjectsFor("alice"); !slices.Equal(got, []string{"knight", "ghost", "cat"}) {
		t.Errorf("alice sees %v", got)
	}
	if got := c.SubjectsFor("bob"); !slices.Equal(got, []string{"knight", "cat"}) {
		t.Errorf("bob sees %v", got)
	}
	r := c.Routes()
	if len(r) != 2 || !slices.Equal(r["auto"], []string{"sketch", "mosaic"}) || !slices.Equal(r["fast"], []string{"mosaic"}) {
		t.Errorf("routes %v", r)
	}
	r["auto"][0] = "changed"
	if c.Routes()["auto"][0] != "sketch" {
		t.Error("Routes hands out the catalog's own slices")
	}
}
