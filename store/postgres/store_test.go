package postgres_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"studio/store"
	"studio/store/postgres"
	"studio/store/postgres/pgtest"
	"studio/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// open opens a store on the schema-scoped URL, closed when t ends.
func open(t testing.TB, url string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), postgres.Config{URL: url, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openSchema opens a second store on an existing store's schema, with its
// own pool, as another process would.
func openSchema(t testing.TB, schema string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), postgres.Config{URL: pgtest.URL(t), Schema: schema, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) store.Store {
			u, _ := pgtest.Schema(t)
			return open(t, u)
		},
		Twin: func(t *testing.T, s store.Store) store.Store {
			return openSchema(t, s.(*postgres.Store).Schema())
		},
	})
}
