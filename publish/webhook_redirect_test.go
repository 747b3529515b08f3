package publish_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"studio/intent"
	"studio/leasequeue"
)

// TestWebhookNeverFollowsRedirects: a receiver answering 302 or 307 fails
// the attempt with an error that names the status and the Location; the
// redirect's target is never asked (a 302 followed would land a GET
// without the payload and mark the item succeeded; a 307 followed would
// send the item to a host nobody configured).
func TestWebhookNeverFollowsRedirects(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			var landed atomic.Int64
			landing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				landed.Add(1)
				w.WriteHeader(http.StatusOK)
			}))
			t.Cleanup(landing.Close)
			target := landing.URL + "/elsewhere"
			redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, target, status)
			}))
			t.Cleanup(redirect.Close)

			e := newEnv(t)
			p, _ := e.publishToWebhook(redirect.URL, 2, leasequeue.Options{})
			if p.State != intent.StateFailed {
				t.Fatalf("publication %+v, want failed", p)
			}
			if n := landed.Load(); n != 0 {
				t.Fatalf("the redirect target was asked %d times", n)
			}
			for _, it := range e.items(p.ID) {
				if !strings.Contains(it.Error, strconv.Itoa(status)) || !strings.Contains(it.Error, target) {
					t.Fatalf("item error %q names neither the status %d nor the Location %s", it.Error, status, target)
				}
			}
		})
	}
}
