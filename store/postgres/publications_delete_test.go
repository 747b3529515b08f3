package postgres_test

import (
	"context"
	neturl "net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"studio/intent"
	"studio/store/postgres/pgtest"
	"studio/store/storetest"
)

// TestPublicationOfABatchBeingDeleted: another process deletes a batch
// (its transaction locked the batch row and deleted it, as DeleteBatch
// does, and has not committed) while a publication of it is created. The
// publication's insert saw the batch in its snapshot and waits for the
// row; once the delete commits, its key check fails. The answer is the
// 422 of a batch that is not the actor's, as when the service's check
// finds none, not a 500; nothing of the publication is left.
func TestPublicationOfABatchBeingDeleted(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	app := "pub-del-" + schema
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	s := open(t, u.String())
	ctx := context.Background()
	batchID, assets := storetest.BatchWithAssets(t, s, "alice", "pub-del-batch", 2)

	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, q := range []string{
		`SELECT 1 FROM batches WHERE id = $1 FOR UPDATE`,
		`DELETE FROM assets WHERE task_id IN (SELECT id FROM tasks WHERE batch_id = $1)`,
		`DELETE FROM tasks WHERE batch_id = $1`,
		`DELETE FROM batch_counts WHERE batch_id = $1`,
		`DELETE FROM batches WHERE id = $1`,
	} {
		if _, err := tx.Exec(ctx, q, batchID); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	done := make(chan error, 1)
	go func() {
		_, _, err := s.CreateIntent(ctx, storetest.PublicationIntent(t, "alice", "pub-del-1", "fp-pub-del-1", batchID, assets, intent.ChannelGallery))
		done <- err
	}()
	// The insert waits for the batch row the delete holds.
	for {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the publication did not wait for the deleting transaction: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if code := intent.ErrorCode(err); code != intent.EUnprocessable {
		t.Fatalf("the publication of a batch deleted meanwhile: %v (code %s), want %s", err, code, intent.EUnprocessable)
	}
	if msg := intent.ErrorMessage(err); msg != "No batch of yours has the id "+batchID+"." {
		t.Fatalf("detail %q", msg)
	}
	var pubs, items, bindings int
	if err := admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM publications), (SELECT count(*) FROM publication_items),
		(SELECT count(*) FROM intents WHERE request_id = 'pub-del-1')`).Scan(&pubs, &items, &bindings); err != nil {
		t.Fatal(err)
	}
	if pubs+items+bindings != 0 {
		t.Fatalf("left behind: %d publications, %d items, %d bindings", pubs, items, bindings)
	}
}
