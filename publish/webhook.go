package publish

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/go-json-experiment/json"

	"studio/internal/retryafter"
	"studio/store"
)

// DefaultWebhookTimeout bounds one delivery.
const DefaultWebhookTimeout = 30 * time.Second

// AttemptHeader carries the number of a delivery's attempt (1-based).
const AttemptHeader = "Studio-Delivery-Attempt"

// maxDeliveryAsset bounds the asset bytes one delivery carries.
const maxDeliveryAsset = 32 << 20

// Webhook is the channel that POSTs each item, as JSON with the asset's
// bytes, to one URL. Every delivery of an item carries the item's id as
// its Idempotency-Key header (a quoted string) and the same body, byte for
// byte (the attempt number goes in the Studio-Delivery-Attempt header), so
// a receiver can tell a retry from a new item, and one that compares
// payloads under a key finds them equal. A 2xx answer is success; 408, 409, 425, 429, a
// 5xx or no answer is worth a retry (the runner retries with backoff, and
// after a 429 or 503 no sooner than its Retry-After says);
// any other answer fails the item at once. A redirect (3xx) is never
// followed: it would turn the POST into a GET without the payload, or send
// the item to a host nobody configured; it fails the item with an error
// naming the status and the Location.
type Webhook struct {
	url    string
	client *http.Client
	blobs  BlobOpener
}

// NewWebhook returns a webhook channel to rawURL (http or https). A nil
// client is one with DefaultWebhookTimeout. The channel uses a copy of the
// client that never follows redirects.
func NewWebhook(rawURL string, client *http.Client, blobs BlobOpener) (*Webhook, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("new webhook: %q is not an http or https URL", rawURL)
	}
	if blobs == nil {
		return nil, errors.New("new webhook: no blobs")
	}
	if client == nil {
		client = &http.Client{Timeout: DefaultWebhookTimeout}
	}
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	client = &c
	return &Webhook{url: rawURL, client: client, blobs: blobs}, nil
}

// Delivery is the JSON body of one webhook POST.
type Delivery struct {
	ItemID        string        `json:"item_id"`
	PublicationID string        `json:"publication_id"`
	Asset         DeliveryAsset `json:"asset"`
	Prompt        string        `json:"prompt"`
	Collection    string        `json:"collection"`
	Frame         string        `json:"frame"`
	Generator     string        `json:"generator"`
	Candidate     int           `json:"candidate"`
	// Content is the asset's bytes, base64 (standard, padded).
	Content string `json:"content_base64"`
}

// DeliveryAsset describes the delivered asset.
type DeliveryAsset struct {
	ID          string `json:"id"`
	SHA256      string `json:"sha256"`
	ContentType string `json:"content_type"`
	Size        int64  `json:"size"`
	Width       int    `json:"width"`
	Height      int    `json:"height"`
}

// Publish delivers one item.
func (w *Webhook) Publish(ctx context.Context, it store.ClaimedItem) error {
	f, err := w.blobs.Open(ctx, it.Asset.SHA256)
	if err != nil {
		return fmt.Errorf("webhook: open asset %s: %w", it.Asset.ID, err)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxDeliveryAsset+1))
	f.Close()
	if err != nil {
		return fmt.Errorf("webhook: read asset %s: %w", it.Asset.ID, err)
	}
	if len(data) > maxDeliveryAsset {
		return Permanent(fmt.Errorf("webhook: asset %s is over %d bytes", it.Asset.ID, maxDeliveryAsset))
	}
	a := it.Asset
	body, err := json.Marshal(Delivery{
		ItemID: it.Lease.ID, PublicationID: it.PublicationID,
		Asset:  DeliveryAsset{ID: a.ID, SHA256: a.SHA256, ContentType: a.ContentType, Size: a.Size, Width: a.Width, Height: a.Height},
		Prompt: it.Prompt, Collection: it.Collection, Frame: it.Frame, Generator: it.Generator, Candidate: it.Candidate,
		Content: base64.StdEncoding.EncodeToString(data),
	})
	if err != nil {
		return Permanent(fmt.Errorf("webhook: encode item: %w", err))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return Permanent(fmt.Errorf("webhook: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", `"`+it.Lease.ID+`"`)
	req.Header.Set(AttemptHeader, strconv.Itoa(it.Attempt))
	req.Header.Set("User-Agent", "studio-publisher")
	resp, err := w.client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook: deliver item %s: %w", it.Lease.ID, err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		return nil
	case s >= 300 && s < 400:
		return Permanent(fmt.Errorf("webhook: the receiver answered %d (redirect to %q, not followed) to item %s",
			s, resp.Header.Get("Location"), it.Lease.ID))
	case s == http.StatusTooManyRequests, s == http.StatusServiceUnavailable:
		err := fmt.Errorf("webhook: the receiver answered %d to item %s", s, it.Lease.ID)
		if d, ok := retryafter.Parse(resp.Header.Get("Retry-After"), time.Now()); ok {
			d = min(d, MaxRetryAfter)
			return RetryLater(fmt.Errorf("%w (retry after %s)", err, d), d)
		}
		return err
	case s == http.StatusRequestTimeout, s == http.StatusConflict, s == http.StatusTooEarly, s >= 500:
		return fmt.Errorf("webhook: the receiver answered %d to item %s", s, it.Lease.ID)
	default:
		return Permanent(fmt.Errorf("webhook: the receiver refused item %s with %d", it.Lease.ID, s))
	}
}
