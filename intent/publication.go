package intent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
)

// PublicationStore is what CreatePublication needs beyond IntentStore: the
// check of the assets named, and the read of a publication.
type PublicationStore interface {
	// CheckPublicationAssets says whether batchID is one of the actor's
	// batches and which of assetIDs are not assets made by it (all of them
	// when the batch is not the actor's), in the order given.
	CheckPublicationAssets(ctx context.Context, actor, batchID string, assetIDs []string) (PublicationCheck, error)
	// GetPublication reads one of the actor's publications (ENotFound
	// otherwise).
	GetPublication(ctx context.Context, actor, id string) (Publication, error)
}

// PublicationCheck is the answer of CheckPublicationAssets.
type PublicationCheck struct {
	// BatchFound is true when the batch is the actor's.
	BatchFound bool
	// Foreign lists the asset ids that are not the batch's.
	Foreign []string
}

// PublicationResult is the answer to a publication intent.
type PublicationResult struct {
	Publication Publication
	// Replayed is true when the request id was already bound to this
	// input: nothing was written, and Publication is the record made then.
	Replayed bool
	// Fingerprint is the input's: ReplayPublication takes it to answer a
	// retry of the same input without the input.
	Fingerprint string
}

// maxNamedInDetail bounds how many refused asset ids a 422 detail lists
// (its field errors name up to MaxFieldErrors).
const maxNamedInDetail = 20

// NormalizePublication validates a publication input built in Go and
// applies its defaults, exactly as DecodePublication does for a body.
func NormalizePublication(in PublicationInput) (PublicationInput, error) {
	doc := map[string]any{"batch_id": in.BatchID, "asset_ids": in.AssetIDs}
	if in.Channel != "" {
		doc["channel"] = in.Channel
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return PublicationInput{}, Errorf(EInvalid, "The input is invalid: %v.", err)
	}
	_, _, out, err := DecodePublication(b)
	return out, err
}

// CreatePublication runs a publication input under the actor's request id:
// the same check -> plan -> commit as CreateGeneration, under the same lock
// and through the same CreateIntent, so one request id names one record
// whichever operation used it first. Planning checks the channel is carried
// out here and that every asset was made by the actor's batch
// (EUnprocessable naming the others); the commit writes the publication and
// one queued item per asset in one transaction.
func (s *Service) CreatePublication(ctx context.Context, actor, requestID string, in PublicationInput) (res PublicationResult, err error) {
	defer func() { s.observe(OpPublication, res.Replayed, err) }()
	if s.Publications == nil {
		return res, errors.New("create publication: the service has no publication store")
	}
	if err := ValidateRequestID(requestID); err != nil {
		return res, err
	}
	if in, err = NormalizePublication(in); err != nil {
		return res, err
	}
	fp, err := Fingerprint(actor, OpPublication, in)
	if err != nil {
		return res, err
	}
	b, created, err := s.bind(ctx, actor, requestID, OpPublication, fp, func(ctx context.Context, now time.Time) (NewIntent, error) {
		if err := s.planPublication(ctx, actor, &in); err != nil {
			return NewIntent{}, err
		}
		np := &NewPublication{BatchID: in.BatchID, Channel: in.Channel, CreatedAt: now, Items: make([]NewPublicationItem, len(in.AssetIDs))}
		var err error
		if np.ID, err = newID(); err != nil {
			return NewIntent{}, err
		}
		for i, a := range in.AssetIDs {
			id, err := newID()
			if err != nil {
				return NewIntent{}, err
			}
			np.Items[i] = NewPublicationItem{ID: id, AssetID: a}
		}
		return NewIntent{Publication: np}, nil
	})
	if err != nil {
		return res, err
	}
	p, err := s.Publications.GetPublication(ctx, actor, b.ResourceID)
	if err != nil {
		return res, fmt.Errorf("read publication: %w", err)
	}
	return PublicationResult{Publication: p, Replayed: !created, Fingerprint: fp}, nil
}

// ReplayPublication is ReplayGeneration for publications: the
// publication bound to requestID when it is bound with fingerprint fp
// (PublicationResult.Fingerprint); otherwise ok is false, and the caller
// goes on to CreatePublication.
func (s *Service) ReplayPublication(ctx context.Context, actor, requestID, fp string) (res PublicationResult, ok bool, err error) {
	if s.Publications == nil {
		return res, false, nil
	}
	b, ok := s.replay(ctx, actor, requestID, OpPublication, fp)
	if !ok {
		return res, false, nil
	}
	defer func() { s.observe(OpPublication, true, err) }()
	p, err := s.Publications.GetPublication(ctx, actor, b.ResourceID)
	if err != nil {
		return res, true, fmt.Errorf("read publication: %w", err)
	}
	return PublicationResult{Publication: p, Replayed: true, Fingerprint: fp}, true, nil
}

// GetPublication reads one of the actor's publications.
func (s *Service) GetPublication(ctx context.Context, actor, id string) (Publication, error) {
	if s.Publications == nil {
		return Publication{}, errors.New("get publication: the service has no publication store")
	}
	return s.Publications.GetPublication(ctx, actor, id)
}

// planPublication refuses (EUnprocessable) a channel not carried out here
// and assets that are not the actor's batch's.
func (s *Service) planPublication(ctx context.Context, actor string, in *PublicationInput) error {
	channels := s.Channels
	if len(channels) == 0 {
		channels = []string{ChannelGallery}
	}
	if !slices.Contains(channels, in.Channel) {
		return &Error{Code: EUnprocessable, Message: fmt.Sprintf("The %s channel is not configured on this server.", in.Channel),
			Fields: []FieldError{{Field: "channel", Message: "is not configured on this server"}}}
	}
	check, err := s.Publications.CheckPublicationAssets(ctx, actor, in.BatchID, in.AssetIDs)
	if err != nil {
		return fmt.Errorf("check publication assets: %w", err)
	}
	if !check.BatchFound {
		return &Error{Code: EUnprocessable, Message: fmt.Sprintf("No batch of yours has the id %s.", in.BatchID),
			Fields: []FieldError{{Field: "batch_id", Message: "is not one of your batches"}}}
	}
	if len(check.Foreign) == 0 {
		return nil
	}
	return foreignAssets(in, check.Foreign)
}

// foreignAssets is the 422 that names the assets not made by the batch.
func foreignAssets(in *PublicationInput, foreign []string) error {
	e := &Error{Code: EUnprocessable}
	bad := map[string]bool{}
	for _, id := range foreign {
		bad[id] = true
	}
	for i, id := range in.AssetIDs {
		if bad[id] && len(e.Fields) < MaxFieldErrors {
			e.Fields = append(e.Fields, FieldError{Field: fmt.Sprintf("asset_ids[%d]", i), Message: "is not an asset made by this batch"})
		}
	}
	named := foreign
	if len(named) > maxNamedInDetail {
		named = named[:maxNamedInDetail]
	}
	noun := "asset is"
	if len(foreign) > 1 {
		noun = "assets are"
	}
	e.Message = fmt.Sprintf("%d %s not made by batch %s: %s", len(foreign), noun, in.BatchID, strings.Join(named, ", "))
	if n := len(foreign) - len(named); n > 0 {
		e.Message += fmt.Sprintf(" and %d more", n)
	}
	e.Message += "."
	return e
}
