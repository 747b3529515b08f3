package main

import (
	"context"
	"net"
	"slices"
	"testing"

	"studio/planner"
)

func TestStudioURL(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"127.0.0.1:7070": "http://127.0.0.1:7070/",
		"0.0.0.0:80":     "http://127.0.0.1:80/",
		"[::]:7070":      "http://[::1]:7070/",
		"[::1]:9":        "http://[::1]:9/",
		"10.1.2.3:7070":  "http://10.1.2.3:7070/",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := studioURL(a); got != want {
			t.Errorf("%s: %s; want %s", addr, got, want)
		}
	}
}

func TestCatalogView(t *testing.T) {
	t.Parallel()
	c, err := planner.ParseCatalog([]byte(`{
		"generators": [{"id": "sketch", "kind": "embedded"}, {"id": "mosaic", "kind": "embedded"}],
		"routes": {"auto": ["mosaic"]},
		"subjects": [{"id": "ghost", "actors": ["alice"]}, {"id": "cat", "public": true}]
	}`))
	if err != nil {
		t.Fatal(err)
	}
	v := catalogView{catalog: c, maxTasks: planner.New(c).Limit(), channels: []string{"gallery", "webhook"}}
	got, err := v.CatalogFor(context.Background(), "bob")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Subjects, []string{"cat"}) || got.MaxBatchTasks != planner.DefaultMaxTasks ||
		len(got.Generators) != 2 || got.Generators[1].ID != "mosaic" || !slices.Equal(got.Routes["auto"], []string{"mosaic"}) ||
		!slices.Equal(got.Channels, []string{"gallery", "webhook"}) {
		t.Fatalf("bob's catalog: %+v", got)
	}
	v.maxTasks = 40
	if got, _ := v.CatalogFor(context.Background(), "alice"); !slices.Equal(got.Subjects, []string{"ghost", "cat"}) || got.MaxBatchTasks != 40 {
		t.Fatalf("alice's catalog: %+v", got)
	}
}
