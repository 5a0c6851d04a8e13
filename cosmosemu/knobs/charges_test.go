package knobs_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The documented table values, computed by the model.
func TestChargeModelTable(t *testing.T) {
	t.Parallel()
	m := knobs.DefaultChargeModel()
	assert.Equal(t, 1.0, m.PointReadCharge(0))
	assert.Equal(t, 1.0, m.PointReadCharge(1024))
	assert.Equal(t, 10.0, m.PointReadCharge(100*1024))
	assert.Equal(t, 5.0, m.WriteCharge(200))
	assert.Equal(t, 50.0, m.WriteCharge(100*1024))
	assert.Equal(t, 2.3, m.QueryPageCharge(0, 60))
	assert.Equal(t, 3.3, m.QueryPageCharge(10, 900))

	req := func(op cosmosemu.OperationType, rt cosmosemu.ResourceType) *cosmosemu.Request {
		r, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
		return &cosmosemu.Request{Operation: op, ResourceType: rt, HTTP: r}
	}
	resp := func(status int, body string) *cosmosemu.Response {
		return &cosmosemu.Response{Status: status, Header: http.Header{}, Body: []byte(body)}
	}
	assert.Equal(t, 1.0, m.Charge(req(cosmosemu.OpRead, cosmosemu.ResourceDocument), resp(http.StatusNotModified, "")))
	assert.Equal(t, 1.0, m.Charge(req(cosmosemu.OpChangeFeed, cosmosemu.ResourceDocument), resp(http.StatusNotModified, "")))
	assert.Equal(t, 1.0, m.Charge(req(cosmosemu.OpRead, cosmosemu.ResourceDocument), resp(http.StatusNotFound, "{}")))
	assert.Equal(t, 1.0, m.Charge(req(cosmosemu.OpReadFeed, cosmosemu.ResourcePartitionKeyRange), resp(http.StatusOK, "{}")))
	assert.Equal(t, 5.0, m.Charge(req(cosmosemu.OpDelete, cosmosemu.ResourceDocument), resp(http.StatusNoContent, "")))
	assert.Equal(t, 2.5, m.Charge(req(cosmosemu.OpQuery, cosmosemu.ResourceDocument), resp(http.StatusOK, `{"Documents":[{},{}],"_count":2}`)))
	assert.Equal(t, 0.0, m.Charge(req(cosmosemu.OpCreate, cosmosemu.ResourceDocument), resp(http.StatusTooManyRequests, "{}")))

	// Batch: a failed batch prices the failing operation 1 and the others 0.
	b := req(cosmosemu.OpBatch, cosmosemu.ResourceDocument)
	b.HTTP.Header.Set("Prefer", "return=minimal")
	failed := resp(http.StatusMultiStatus, `[{"statusCode":424,"requestCharge":0},{"statusCode":409,"requestCharge":1}]`)
	assert.Equal(t, 1.0, m.Charge(b, failed))
	mixed := resp(http.StatusOK, `[{"statusCode":201,"requestCharge":9},{"statusCode":200,"requestCharge":9,"resourceBody":{"id":"a"}},{"statusCode":204,"requestCharge":9},{"statusCode":200,"requestCharge":9}]`)
	assert.Equal(t, 16.0, m.Charge(b, mixed), "create 5 + read 1 + delete 5 + replace 5")
	assert.Contains(t, string(mixed.Body), `"requestCharge":1`)
}

// The simulated charges reach the SDK as x-ms-request-charge.
func TestChargesThroughSDK(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: knobs.Config{Charges: knobs.DefaultChargeModel()}})
	ctx := context.Background()
	pk := azcosmos.NewPartitionKeyString("p")
	m := knobs.DefaultChargeModel()

	cr, err := e.create(t, "small")
	require.NoError(t, err)
	assert.Equal(t, float32(5), cr.RequestCharge, "create of a small item")

	rd, err := e.read("small")
	require.NoError(t, err)
	assert.Equal(t, float32(1), rd.RequestCharge, "point read of a small item")

	up, err := e.c.UpsertItem(ctx, pk, doc(t, "small", "p", map[string]any{"v": 2}), nil)
	require.NoError(t, err)
	assert.Equal(t, float32(5), up.RequestCharge)

	rp, err := e.c.ReplaceItem(ctx, pk, "small", doc(t, "small", "p", map[string]any{"v": 3}), nil)
	require.NoError(t, err)
	assert.Equal(t, float32(5), rp.RequestCharge)

	var patch azcosmos.PatchOperations
	patch.AppendSet("/v", 4)
	pr, err := e.c.PatchItem(ctx, pk, "small", patch, nil)
	require.NoError(t, err)
	assert.Equal(t, float32(5), pr.RequestCharge)

	// A ~99 KiB item: 50 RU to write (100 KiB request rounded up), and its
	// read is priced on the stored size.
	big := doc(t, "big", "p", map[string]any{"pad": strings.Repeat("x", 100*1024-300)})
	require.LessOrEqual(t, len(big), 100*1024)
	bw, err := e.c.CreateItem(ctx, pk, big, nil)
	require.NoError(t, err)
	assert.Equal(t, float32(50), bw.RequestCharge)
	br, err := e.read("big")
	require.NoError(t, err)
	assert.InDelta(t, m.PointReadCharge(len(br.Value)), float64(br.RequestCharge), 0.001)
	assert.InDelta(t, 10, float64(br.RequestCharge), 0.001)

	// Query page: 2.3 + 0.1 per item (small page).
	for _, id := range []string{"q1", "q2", "q3"} {
		_, err := e.c.CreateItem(ctx, azcosmos.NewPartitionKeyString("q"), doc(t, id, "q", nil), nil)
		require.NoError(t, err)
	}
	pager := e.c.NewQueryItemsPager("SELECT * FROM c", azcosmos.NewPartitionKeyString("q"), nil)
	page, err := pager.NextPage(ctx)
	require.NoError(t, err)
	require.Len(t, page.Items, 3)
	assert.InDelta(t, 2.6, float64(page.RequestCharge), 0.001)

	// A cross-partition page pays the base for every physical partition it
	// scans: one item found, four ranges scanned.
	xp := e.c.NewQueryItemsPager("SELECT * FROM c WHERE c.id = 'q1'", azcosmos.NewPartitionKey(), nil)
	xpage, err := xp.NextPage(ctx)
	require.NoError(t, err)
	require.Len(t, xpage.Items, 1)
	assert.InDelta(t, 2.4+3*2.3, float64(xpage.RequestCharge), 0.001)

	// Transactional batch: the sum of its operations, per-operation charges
	// rewritten.
	batch := e.c.NewTransactionalBatch(azcosmos.NewPartitionKeyString("b"))
	for _, id := range []string{"b1", "b2", "b3"} {
		batch.CreateItem(doc(t, id, "b", nil), nil)
	}
	bres, err := e.c.ExecuteTransactionalBatch(ctx, batch, nil)
	require.NoError(t, err)
	require.True(t, bres.Success)
	assert.Equal(t, float32(15), bres.RequestCharge)
	for _, r := range bres.OperationResults {
		assert.Equal(t, float32(5), r.RequestCharge)
	}

	// An error answered by the emulator costs 1 RU.
	_, err = e.read("missing")
	re := responseError(t, err)
	assert.Equal(t, http.StatusNotFound, re.StatusCode)
	assert.Equal(t, "1.00", re.RawResponse.Header.Get("x-ms-request-charge"))

	dr, err := e.c.DeleteItem(ctx, pk, "small", nil)
	require.NoError(t, err)
	assert.Equal(t, float32(5), dr.RequestCharge)

	// Metadata: 1 RU.
	rc, err := e.c.Read(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, float32(1), rc.RequestCharge)

	// Disabling the model restores the emulator's own charges.
	e.k.Charges().SetModel(nil)
	assert.Nil(t, e.k.Charges().Model())
	own, err := e.create(t, "own")
	require.NoError(t, err)
	assert.NotEqual(t, float32(5), own.RequestCharge)
}

// Change feed pages are priced like query pages; "nothing new" (304) costs
// 1 RU.
func TestChargesChangeFeed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: knobs.Config{Charges: knobs.DefaultChargeModel()}})
	ctx := context.Background()
	for _, id := range []string{"q1", "q2", "q3"} {
		_, err := e.c.CreateItem(ctx, azcosmos.NewPartitionKeyString("q"), doc(t, id, "q", nil), nil)
		require.NoError(t, err)
	}
	ranges, err := e.c.ReadFeedRanges(ctx, nil)
	require.NoError(t, err)
	seen := 0
	for _, fr := range ranges {
		fr := fr
		cf, err := e.c.ReadChangeFeed(ctx, &azcosmos.ChangeFeedOptions{FeedRange: &fr})
		require.NoError(t, err)
		if cf.Count == 0 {
			assert.InDelta(t, 1, float64(cf.RequestCharge), 0.001, "304: nothing new")
			continue
		}
		seen += cf.Count
		assert.Equal(t, 3, cf.Count)
		assert.InDelta(t, 2.6, float64(cf.RequestCharge), 0.001)
		cont := cf.ContinuationToken
		again, err := e.c.ReadChangeFeed(ctx, &azcosmos.ChangeFeedOptions{Continuation: &cont})
		require.NoError(t, err)
		assert.Equal(t, 0, again.Count)
		assert.InDelta(t, 1, float64(again.RequestCharge), 0.001, "304: nothing new")
	}
	assert.Equal(t, 3, seen)
}
