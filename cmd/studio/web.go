package main

import (
	"context"
	"fmt"
	"net"
	"net/url"

	"studio/httpapi"
	"studio/planner"
	"studio/worker"
)

// catalogView answers GET /v1/catalog from the process's catalog, its task
// limit and the publication channels it carries out.
type catalogView struct {
	catalog  *planner.Static
	maxTasks int // the planner's Limit
	channels []string
	breakers *worker.Breakers
}

// CatalogFor implements httpapi.Catalogs.
func (v catalogView) CatalogFor(ctx context.Context, actor string) (httpapi.Catalog, error) {
	gens, err := v.catalog.Generators(ctx)
	if err != nil {
		return httpapi.Catalog{}, fmt.Errorf("catalog: %w", err)
	}
	out := httpapi.Catalog{
		Generators:    make([]httpapi.CatalogGenerator, len(gens)),
		Routes:        v.catalog.Routes(),
		Subjects:      v.catalog.SubjectsFor(actor),
		Channels:      append([]string{}, v.channels...),
		MaxBatchTasks: v.maxTasks,
	}
	health := map[string]string{}
	for _, h := range v.breakers.Health() {
		health[h.ID] = h.State
	}
	for i, g := range gens {
		out.Generators[i] = httpapi.CatalogGenerator{ID: g.ID, Kind: g.Kind, Health: health[g.ID]}
	}
	return out, nil
}

// studioURL is the web studio's address for a listener's address: an
// unspecified host (0.0.0.0, ::) becomes the loopback one, which works on
// this machine.
func studioURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String() + "/"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if ip.To4() != nil {
			host = "127.0.0.1"
		} else {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// printStudioLink tells where the web studio is. On the start that created
// the first token it prints a sign-in link that carries the token in the
// URL fragment (#token=...): browsers never send a fragment to the server,
// so the token reaches no request line, access log or proxy; the page
// moves it into sessionStorage and strips it from the address bar and the
// history at once. It shows nothing the line with the token above did not.
func (m *Main) printStudioLink() {
	if m.ln == nil {
		return
	}
	u := studioURL(m.ln.Addr())
	if m.firstToken != "" {
		fmt.Fprintf(m.Stdout, "Open the web studio, signed in as \"local\" (the link holds the token; shown only now):\n%s#token=%s\n",
			u, url.QueryEscape(m.firstToken))
		m.firstToken = ""
		return
	}
	m.Logger.Info("web studio", "url", u)
}
