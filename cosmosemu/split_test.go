package cosmosemu_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/internal/epk"
	"github.com/stretchr/testify/require"
)

// goneCounter is middleware counting 410/1002 (PartitionKeyRangeGone)
// answers, to prove the SDK went through its refresh-and-retry path.
type goneCounter struct{ n atomic.Int64 }

func (g *goneCounter) middleware(next cosmosemu.Handler) cosmosemu.Handler {
	return func(ctx context.Context, req *cosmosemu.Request) *cosmosemu.Response {
		resp := next(ctx, req)
		if resp != nil && resp.Status == http.StatusGone && resp.SubStatus == 1002 {
			g.n.Add(1)
		}
		return resp
	}
}

// keyEPK is the EPK of a one-string key in a V2 Hash container.
func keyEPK(tb testing.TB, pk string) string {
	tb.Helper()
	e, err := epk.Compute(epk.Hash, 2, []any{pk})
	require.NoError(tb, err)
	return e
}

// rangeIndex returns the index of the range holding e.
func rangeIndex(ranges []cosmosemu.PartitionKeyRange, e string) int {
	for i, r := range ranges {
		if (epk.Range{Min: r.MinInclusive, Max: r.MaxExclusive}).Contains(e) {
			return i
		}
	}
	return -1
}

func rangeByID(tb testing.TB, ranges []cosmosemu.PartitionKeyRange, id string) cosmosemu.PartitionKeyRange {
	tb.Helper()
	for _, r := range ranges {
		if r.ID == id {
			return r
		}
	}
	tb.Fatalf("range %s not found in %v", id, ranges)
	return cosmosemu.PartitionKeyRange{}
}

// keysIn returns n keys "<prefix><i>" whose EPKs lie in r, at least one in
// each half of r around mid.
func keysIn(tb testing.TB, prefix string, r cosmosemu.PartitionKeyRange, mid string, n int) []string {
	tb.Helper()
	var lo, hi, out []string
	for i := 0; len(out) < n || len(lo) == 0 || len(hi) == 0; i++ {
		require.Less(tb, i, 100000)
		k := prefix + strconv.Itoa(i)
		e := keyEPK(tb, k)
		if !(epk.Range{Min: r.MinInclusive, Max: r.MaxExclusive}).Contains(e) {
			continue
		}
		if epk.Compare(e, mid) < 0 {
			lo = append(lo, k)
		} else {
			hi = append(hi, k)
		}
		out = append(out, k)
	}
	return out
}

func pkRangesFeed(tb testing.TB, srv *cosmosemu.Server, etag string) rawResponse {
	tb.Helper()
	h := map[string]string{"A-IM": "Incremental feed"}
	if etag != "" {
		h["If-None-Match"] = etag
	}
	return rawRequest(tb, srv, http.MethodGet, "/dbs/db/colls/c/pkranges", "pkranges", "dbs/db/colls/c", h, nil)
}

type pkRangeItem struct {
	ID      string   `json:"id"`
	Min     string   `json:"minInclusive"`
	Max     string   `json:"maxExclusive"`
	Parents []string `json:"parents"`
}

func pkRangeItems(tb testing.TB, r rawResponse) []pkRangeItem {
	tb.Helper()
	require.Equal(tb, http.StatusOK, r.Status, string(r.Body))
	var body struct {
		Ranges []pkRangeItem `json:"PartitionKeyRanges"`
	}
	require.NoError(tb, json.Unmarshal(r.Body, &body))
	return body.Ranges
}

func requireRangeGone(tb testing.TB, r rawResponse, rangeID string) {
	tb.Helper()
	require.Equal(tb, http.StatusGone, r.Status, string(r.Body))
	require.Equal(tb, "1002", r.Header.Get("x-ms-substatus"))
	require.NotEmpty(tb, r.Header.Get("x-ms-activity-id"))
	code, msg := errorCode(tb, r.Body)
	require.Equal(tb, "Gone", code)
	require.Contains(tb, msg, "PartitionKeyRange with id '"+rangeID+"'")
}

// TestSplitWireProtocol checks a split as the wire shows it: the pkranges
// feed, 410/1002 for requests naming the parent, LSNs preserved on the
// children and the parent's change-feed continuation valid on both.
func TestSplitWireProtocol(t *testing.T) {
	t.Parallel()
	srv, _, c := newContainer(t)
	ctx := context.Background()
	before, err := srv.PartitionKeyRanges("db", "c")
	require.NoError(t, err)
	require.Len(t, before, 4)
	parent := rangeByID(t, before, "1")
	const mid = "18000000000000000000000000000000"
	keys := keysIn(t, "k", parent, mid, 6)

	write := func(round int) {
		for _, k := range keys {
			_, err := c.UpsertItem(ctx, azcosmos.NewPartitionKeyString(k), mustJSON(t, map[string]any{"id": "d-" + k, "pk": k, "round": round}), nil)
			require.NoError(t, err)
		}
	}
	write(1)
	full := pkRangesFeed(t, srv, "")
	etag1 := full.Header.Get("etag")
	require.Len(t, pkRangeItems(t, full), 4)
	require.Equal(t, http.StatusNotModified, pkRangesFeed(t, srv, etag1).Status)

	// Read the parent's feed up to now; remember each document's LSN.
	parentFeed := readFeed(t, srv, map[string]string{"x-ms-documentdb-partitionkeyrangeid": "1"})
	require.Len(t, parentFeed.docs, len(keys))
	lsnByID := map[string]float64{}
	for _, d := range parentFeed.docs {
		lsnByID[d["id"].(string)] = d["_lsn"].(float64)
	}

	children, err := srv.SplitPartition(ctx, "db", "c", "1")
	require.NoError(t, err)
	require.Equal(t, []string{"4", "5"}, children)

	// pkranges: the incremental feed from the old version returns exactly
	// the children, naming their parent; a full read no longer lists it.
	inc := pkRangesFeed(t, srv, etag1)
	etag2 := inc.Header.Get("etag")
	require.NotEqual(t, etag1, etag2)
	require.Equal(t, []pkRangeItem{
		{ID: "4", Min: parent.MinInclusive, Max: mid, Parents: []string{"1"}},
		{ID: "5", Min: mid, Max: parent.MaxExclusive, Parents: []string{"1"}},
	}, pkRangeItems(t, inc))
	require.Equal(t, http.StatusNotModified, pkRangesFeed(t, srv, etag2).Status)
	all := pkRangeItems(t, pkRangesFeed(t, srv, ""))
	var ids []string
	for i, r := range all {
		ids = append(ids, r.ID)
		if i > 0 {
			require.Equal(t, all[i-1].Max, r.Min, "ranges tile the EPK space")
		}
	}
	require.Equal(t, []string{"0", "4", "5", "2", "3"}, ids)
	after, err := srv.PartitionKeyRanges("db", "c")
	require.NoError(t, err)
	require.Len(t, after, 5)

	// Every request naming the parent answers 410/1002.
	requireRangeGone(t, readFeed410(t, srv, map[string]string{"x-ms-documentdb-partitionkeyrangeid": "1", "If-None-Match": parentFeed.etag}), "1")
	requireRangeGone(t, rawRequest(t, srv, http.MethodPost, "/dbs/db/colls/c/docs", "docs", "dbs/db/colls/c", map[string]string{
		"Content-Type": "application/query+json", "x-ms-documentdb-isquery": "true", "x-ms-documentdb-partitionkeyrangeid": "1",
	}, []byte(`{"query":"SELECT * FROM c"}`)), "1")
	requireRangeGone(t, rawRequest(t, srv, http.MethodGet, "/dbs/db/colls/c/docs", "docs", "dbs/db/colls/c",
		map[string]string{"x-ms-documentdb-partitionkeyrangeid": "1"}, nil), "1")

	// Documents kept their LSNs; each child holds the keys it owns.
	for i, child := range children {
		pg := readFeed(t, srv, map[string]string{"x-ms-documentdb-partitionkeyrangeid": child})
		require.NotEmpty(t, pg.docs)
		for _, d := range pg.docs {
			require.Equal(t, lsnByID[d["id"].(string)], d["_lsn"].(float64))
			require.Equal(t, i == 0, epk.Compare(keyEPK(t, d["pk"].(string)), mid) < 0)
		}
		// Nothing new since the parent's continuation.
		require.Equal(t, http.StatusNotModified, readFeed(t, srv, map[string]string{"x-ms-documentdb-partitionkeyrangeid": child, "If-None-Match": parentFeed.etag}).status)
	}

	// New writes land on the children with LSNs after the parent's; the
	// parent's continuation on both children yields each exactly once.
	write(2)
	var resumed []string
	for _, child := range children {
		pg := readFeed(t, srv, map[string]string{"x-ms-documentdb-partitionkeyrangeid": child, "If-None-Match": parentFeed.etag})
		require.Equal(t, http.StatusOK, pg.status)
		for _, d := range pg.docs {
			require.Equal(t, float64(2), d["round"])
			require.Greater(t, d["_lsn"].(float64), lsnByID[d["id"].(string)])
			resumed = append(resumed, d["id"].(string))
		}
	}
	sort.Strings(resumed)
	var want []string
	for _, k := range keys {
		want = append(want, "d-"+k)
	}
	sort.Strings(want)
	require.Equal(t, want, resumed)

	// A write's session token names the child.
	resp, err := c.ReadItem(ctx, azcosmos.NewPartitionKeyString(keys[0]), "d-"+keys[0], nil)
	require.NoError(t, err)
	require.NotNil(t, resp.SessionToken)
	require.Regexp(t, `^[45]:-1#\d+$`, *resp.SessionToken)

	// Splitting a range that is gone, or unknown containers, fail.
	_, err = srv.SplitPartition(ctx, "db", "c", "1")
	require.ErrorIs(t, err, cosmosemu.ErrNotFound)
	_, err = srv.SplitPartition(ctx, "db", "nope", "0")
	require.ErrorIs(t, err, cosmosemu.ErrNotFound)
	_, err = srv.PartitionKeyRanges("nope", "c")
	require.ErrorIs(t, err, cosmosemu.ErrNotFound)
}

// readFeed410 issues a change feed request expected to fail.
func readFeed410(t testing.TB, srv *cosmosemu.Server, headers map[string]string) rawResponse {
	t.Helper()
	h := map[string]string{"A-IM": "Incremental feed"}
	for k, v := range headers {
		h[k] = v
	}
	return rawRequest(t, srv, http.MethodGet, "/dbs/db/colls/c/docs", "docs", "dbs/db/colls/c", h, nil)
}

// TestSplitSDKOperations runs point operations, batches, queries (with a
// pager spanning the split) and ReadMany through the SDK across splits of
// every range; ReadMany's cached routing map must go stale and recover
// through 410/1002.
func TestSplitSDKOperations(t *testing.T) {
	t.Parallel()
	gone := &goneCounter{}
	srv, _, c := newContainerWith(t, cosmosemu.Options{Middleware: []cosmosemu.Middleware{gone.middleware}})
	ctx := context.Background()
	const n = 120
	var idents []azcosmos.ItemIdentity
	for i := 0; i < n; i++ {
		pk := "p" + strconv.Itoa(i%24)
		_, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString(pk), mustJSON(t, map[string]any{"id": strconv.Itoa(i), "pk": pk, "n": i}), nil)
		require.NoError(t, err)
		idents = append(idents, azcosmos.ItemIdentity{ID: strconv.Itoa(i), PartitionKey: azcosmos.NewPartitionKeyString(pk)})
	}
	res, err := c.ReadManyItems(ctx, idents, nil)
	require.NoError(t, err)
	require.Len(t, res.Items, n)
	ranges, err := c.ReadFeedRanges(ctx, nil)
	require.NoError(t, err)
	require.Len(t, ranges, 4)

	pager := c.NewQueryItemsPager("SELECT c.id FROM c", azcosmos.NewPartitionKey(), &azcosmos.QueryOptions{PageSizeHint: 7})
	seen := map[string]int{}
	page, err := pager.NextPage(ctx)
	require.NoError(t, err)
	for _, it := range page.Items {
		var d map[string]any
		require.NoError(t, json.Unmarshal(it, &d))
		seen[d["id"].(string)]++
	}

	for _, id := range []string{"0", "1", "2", "3"} {
		_, err := srv.SplitPartition(ctx, "db", "c", id)
		require.NoError(t, err)
	}

	for pager.More() {
		page, err := pager.NextPage(ctx)
		require.NoError(t, err)
		for _, it := range page.Items {
			var d map[string]any
			require.NoError(t, json.Unmarshal(it, &d))
			seen[d["id"].(string)]++
		}
	}
	require.Len(t, seen, n)
	for id, k := range seen {
		require.Equal(t, 1, k, "document %s", id)
	}

	res, err = c.ReadManyItems(ctx, idents, nil)
	require.NoError(t, err)
	require.Len(t, res.Items, n)
	require.Positive(t, gone.n.Load(), "ReadMany's stale routing map must have met 410/1002")
	ranges, err = c.ReadFeedRanges(ctx, nil)
	require.NoError(t, err)
	require.Len(t, ranges, 8)

	for i := 0; i < n; i++ {
		pk := azcosmos.NewPartitionKeyString("p" + strconv.Itoa(i%24))
		id := strconv.Itoa(i)
		_, err := c.ReadItem(ctx, pk, id, nil)
		require.NoError(t, err)
		_, err = c.PatchItem(ctx, pk, id, func() azcosmos.PatchOperations {
			var ops azcosmos.PatchOperations
			ops.AppendIncrement("/n", 1000)
			return ops
		}(), nil)
		require.NoError(t, err)
	}
	pk := azcosmos.NewPartitionKeyString("p3")
	b := c.NewTransactionalBatch(pk)
	b.CreateItem(mustJSON(t, map[string]any{"id": "new", "pk": "p3"}), nil)
	b.DeleteItem("3", nil)
	bres, err := c.ExecuteTransactionalBatch(ctx, b, nil)
	require.NoError(t, err)
	require.True(t, bres.Success)

	docs, _, err := collect(t, c.NewQueryItemsPager("SELECT * FROM c", pk, nil))
	require.NoError(t, err)
	require.Len(t, docs, n/24)
	docs, _, err = collect(t, c.NewQueryItemsPager("SELECT * FROM c WHERE c.pk = 'p5' ORDER BY c.n DESC", azcosmos.NewPartitionKey(), nil))
	require.NoError(t, err)
	require.Len(t, docs, n/24)
	require.Equal(t, float64(1000+n-24+5), docs[0]["n"])
	docs, _, err = collect(t, c.NewQueryItemsPager("SELECT * FROM c WHERE c.n >= 1000", azcosmos.NewPartitionKey(), nil))
	require.NoError(t, err)
	require.Len(t, docs, n-1, "all patched documents but the one the batch deleted")
}

// TestSplitUnderConcurrentWrites splits ranges while writers upsert: no
// acknowledged write is lost, whichever side of the split it landed on.
func TestSplitUnderConcurrentWrites(t *testing.T) {
	t.Parallel()
	srv, _, c := newContainer(t)
	ctx := context.Background()
	const writers, keys = 4, 16
	last := make([][]int, writers)
	progress := make(chan struct{}, writers)
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		last[w] = make([]int, keys)
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 1; !stop.Load() || i <= 2*keys; i++ {
				k := i % keys
				pk := fmt.Sprintf("w%d-k%d", w, k)
				body, _ := json.Marshal(map[string]any{"id": "x", "pk": pk, "v": i})
				_, err := c.UpsertItem(ctx, azcosmos.NewPartitionKeyString(pk), body, nil)
				if err != nil {
					errs <- err
					return
				}
				last[w][k] = i
				if i == keys {
					progress <- struct{}{}
				}
			}
		}(w)
	}
	for w := 0; w < writers; w++ {
		<-progress
	}
	// Split repeatedly while the writers run.
	for round := 0; round < 3; round++ {
		ranges, err := srv.PartitionKeyRanges("db", "c")
		require.NoError(t, err)
		for _, r := range ranges {
			_, err := srv.SplitPartition(ctx, "db", "c", r.ID)
			require.NoError(t, err)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for w := 0; w < writers; w++ {
		for k := 0; k < keys; k++ {
			pk := fmt.Sprintf("w%d-k%d", w, k)
			resp, err := c.ReadItem(ctx, azcosmos.NewPartitionKeyString(pk), "x", nil)
			require.NoError(t, err)
			var d map[string]any
			require.NoError(t, json.Unmarshal(resp.Value, &d))
			require.Equal(t, float64(last[w][k]), d["v"], "key %s", pk)
		}
	}
	ranges, err := srv.PartitionKeyRanges("db", "c")
	require.NoError(t, err)
	require.Len(t, ranges, 32)
}

// TestSplitChangeFeedByFeedRange reads the change feed of one range through
// the SDK by its feed range while writers write; the range splits between
// two reads. Resuming the continuation taken before the split returns
// every change exactly once, in LSN order per partition key.
func TestSplitChangeFeedByFeedRange(t *testing.T) {
	t.Parallel()
	gone := &goneCounter{}
	srv, _, c := newContainerWith(t, cosmosemu.Options{Middleware: []cosmosemu.Middleware{gone.middleware}})
	ctx := context.Background()
	ranges, err := srv.PartitionKeyRanges("db", "c")
	require.NoError(t, err)
	parent := rangeByID(t, ranges, "2")
	keys := keysIn(t, "cf", parent, "28000000000000000000000000000000", 8)
	other := keysIn(t, "other", rangeByID(t, ranges, "0"), "08000000000000000000000000000000", 2)

	const perPhase = 15
	phase1, split, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	writeErr := make(chan error, 1)
	go func() {
		defer close(done)
		for i := 0; i < 2*perPhase; i++ {
			if i == perPhase {
				close(phase1)
				<-split
			}
			for _, k := range append(append([]string(nil), keys...), other...) {
				body, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("%s-%03d", k, i), "pk": k, "n": i})
				if _, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString(k), body, nil); err != nil {
					writeErr <- err
					return
				}
			}
		}
	}()

	type change struct {
		n   int
		lsn float64
	}
	got := map[string][]change{}
	count := map[string]int{}
	opts := &azcosmos.ChangeFeedOptions{FeedRange: &azcosmos.FeedRange{MinInclusive: parent.MinInclusive, MaxExclusive: parent.MaxExclusive}, MaxItemCount: 4}
	read := func() int {
		resp, err := c.ReadChangeFeed(ctx, opts)
		require.NoError(t, err)
		for _, raw := range resp.Items {
			var d map[string]any
			require.NoError(t, json.Unmarshal(raw, &d))
			id, pk := d["id"].(string), d["pk"].(string)
			count[id]++
			got[pk] = append(got[pk], change{n: int(d["n"].(float64)), lsn: d["_lsn"].(float64)})
		}
		tok := resp.ContinuationToken
		require.NotEmpty(t, tok)
		opts = &azcosmos.ChangeFeedOptions{Continuation: &tok, MaxItemCount: 4}
		return len(resp.Items)
	}

	// Read concurrently with the first phase of writes, keeping the token.
	reads := 0
	for running := true; running; reads++ {
		select {
		case <-phase1:
			running = false
		default:
		}
		read()
	}
	require.Positive(t, reads)
	ids, err := srv.SplitPartition(ctx, "db", "c", "2")
	require.NoError(t, err)
	close(split)

	// Read on with the pre-split token while the writers continue, then
	// drain: a call that finds nothing in any child means caught up.
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		read()
	}
	for read() > 0 {
	}
	select {
	case err := <-writeErr:
		require.NoError(t, err)
	default:
	}
	require.Positive(t, gone.n.Load(), "the pre-split token must have met 410/1002 on the parent")

	for _, k := range other {
		require.Empty(t, got[k], "key %s is outside the feed range", k)
	}
	for _, k := range keys {
		ch := got[k]
		require.Len(t, ch, 2*perPhase, "key %s", k)
		for i, x := range ch {
			require.Equal(t, i, x.n, "key %s: changes in write order", k)
			if i > 0 {
				require.Greater(t, x.lsn, ch[i-1].lsn, "key %s: LSN order", k)
			}
		}
	}
	for id, k := range count {
		require.Equal(t, 1, k, "change %s delivered %d times", id, k)
	}
	var tok struct {
		Continuation []struct {
			Min string `json:"minInclusive"`
		} `json:"continuation"`
	}
	require.NoError(t, json.Unmarshal([]byte(*opts.Continuation), &tok))
	require.Len(t, tok.Continuation, 2, "the token now tracks both children %v", ids)
}

// TestCrossPartitionQueryRangeByRange checks the fan-out order (range by
// range in EPK order, creation order within a range) and that a
// continuation pointing into a range resumes on its children after a split.
func TestCrossPartitionQueryRangeByRange(t *testing.T) {
	t.Parallel()
	srv, _, c := newContainer(t)
	ctx := context.Background()
	const n = 80
	for i := 0; i < n; i++ {
		pk := "q" + strconv.Itoa(i%16)
		_, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString(pk), mustJSON(t, map[string]any{"id": strconv.Itoa(i), "pk": pk, "n": i}), nil)
		require.NoError(t, err)
	}
	ranges, err := srv.PartitionKeyRanges("db", "c")
	require.NoError(t, err)
	// checkOrder requires docs in EPK order of ranges and, unless
	// rangesOnly, in creation order within each range.
	checkOrder := func(docs []map[string]any, ranges []cosmosemu.PartitionKeyRange, rangesOnly bool) {
		t.Helper()
		prevRange, prevN := -1, -1
		for _, d := range docs {
			r := rangeIndex(ranges, keyEPK(t, d["pk"].(string)))
			nn := int(d["n"].(float64))
			require.GreaterOrEqual(t, r, prevRange, "ranges in EPK order")
			if r == prevRange && !rangesOnly {
				require.Greater(t, nn, prevN, "creation order within range %d", r)
			}
			prevRange, prevN = r, nn
		}
	}
	docs, pages, err := collect(t, c.NewQueryItemsPager("SELECT * FROM c", azcosmos.NewPartitionKey(), &azcosmos.QueryOptions{PageSizeHint: 6}))
	require.NoError(t, err)
	require.Len(t, docs, n)
	require.Equal(t, n/6+1, pages)
	checkOrder(docs, ranges, false)

	// Stop in the middle of the range the first page ends in, split that
	// range, resume.
	pager := c.NewQueryItemsPager("SELECT * FROM c", azcosmos.NewPartitionKey(), &azcosmos.QueryOptions{PageSizeHint: 3})
	page, err := pager.NextPage(ctx)
	require.NoError(t, err)
	var first []map[string]any
	for _, it := range page.Items {
		var d map[string]any
		require.NoError(t, json.Unmarshal(it, &d))
		first = append(first, d)
	}
	require.Len(t, first, 3)
	parent := ranges[rangeIndex(ranges, keyEPK(t, first[2]["pk"].(string)))]
	_, err = srv.SplitPartition(ctx, "db", "c", parent.ID)
	require.NoError(t, err)
	// Concurrent writes: a new document and an update of a returned one.
	_, err = c.CreateItem(ctx, azcosmos.NewPartitionKeyString("q0"), mustJSON(t, map[string]any{"id": "late", "pk": "q0", "n": 1000}), nil)
	require.NoError(t, err)
	_, err = c.UpsertItem(ctx, azcosmos.NewPartitionKeyString(first[0]["pk"].(string)), mustJSON(t, map[string]any{"id": first[0]["id"], "pk": first[0]["pk"], "n": first[0]["n"], "touched": true}), nil)
	require.NoError(t, err)
	rest := first
	for pager.More() {
		page, err := pager.NextPage(ctx)
		require.NoError(t, err)
		for _, it := range page.Items {
			var d map[string]any
			require.NoError(t, json.Unmarshal(it, &d))
			rest = append(rest, d)
		}
	}
	seen := map[string]int{}
	for _, d := range rest {
		seen[d["id"].(string)]++
	}
	for i := 0; i < n; i++ {
		require.Equal(t, 1, seen[strconv.Itoa(i)], "document %d", i)
	}
	require.LessOrEqual(t, seen["late"], 1)
	// Still range by range; the parent's remaining documents come child by
	// child, each in creation order.
	var stable, inParent, elsewhere []map[string]any
	parentRange := epk.Range{Min: parent.MinInclusive, Max: parent.MaxExclusive}
	for i, d := range rest {
		if d["id"] == "late" {
			continue
		}
		stable = append(stable, d)
		switch {
		case !parentRange.Contains(keyEPK(t, d["pk"].(string))):
			elsewhere = append(elsewhere, d)
		case i >= len(first):
			inParent = append(inParent, d)
		}
	}
	after, err := srv.PartitionKeyRanges("db", "c")
	require.NoError(t, err)
	checkOrder(stable, ranges, true)
	checkOrder(elsewhere, ranges, false)
	checkOrder(inParent, after, false)
	require.NotEmpty(t, inParent)

	// A continuation of a range-scoped query (as ReadMany pages) answers
	// 410/1002 once its range is gone.
	scoped := func(rangeID, cont string) rawResponse {
		h := map[string]string{
			"Content-Type": "application/query+json", "x-ms-documentdb-isquery": "true",
			"x-ms-documentdb-partitionkeyrangeid": rangeID, "x-ms-max-item-count": "1",
		}
		if cont != "" {
			h["x-ms-continuation"] = cont
		}
		return rawRequest(t, srv, http.MethodPost, "/dbs/db/colls/c/docs", "docs", "dbs/db/colls/c", h, []byte(`{"query":"SELECT * FROM c"}`))
	}
	target := after[len(after)-1]
	r1 := scoped(target.ID, "")
	require.Equal(t, http.StatusOK, r1.Status, string(r1.Body))
	cont := r1.Header.Get("x-ms-continuation")
	require.NotEmpty(t, cont)
	_, err = srv.SplitPartition(ctx, "db", "c", target.ID)
	require.NoError(t, err)
	requireRangeGone(t, scoped(target.ID, cont), target.ID)

	// A continuation of another query is rejected.
	bad := rawRequest(t, srv, http.MethodPost, "/dbs/db/colls/c/docs", "docs", "dbs/db/colls/c", map[string]string{
		"Content-Type": "application/query+json", "x-ms-documentdb-isquery": "true", "x-ms-documentdb-query-enablecrosspartition": "true",
		"x-ms-continuation": cont,
	}, []byte(`{"query":"SELECT * FROM c"}`))
	require.Equal(t, http.StatusBadRequest, bad.Status)
}

// TestQueryPagingAcrossSplitsUnderConcurrentWrites pages a cross-partition
// query while writers insert, replace and delete and ranges split between
// pages: every document that exists for the whole paging is returned
// exactly once, and nothing is returned twice.
func TestQueryPagingAcrossSplitsUnderConcurrentWrites(t *testing.T) {
	t.Parallel()
	srv, _, c := newContainer(t)
	ctx := context.Background()
	const stable = 120
	for i := 0; i < stable; i++ {
		pk := "p" + strconv.Itoa(i%20)
		_, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString(pk), mustJSON(t, map[string]any{"id": "s" + strconv.Itoa(i), "pk": pk}), nil)
		require.NoError(t, err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				pk := "p" + strconv.Itoa(i%20)
				key := azcosmos.NewPartitionKeyString(pk)
				id := fmt.Sprintf("w%d-%d", w, i)
				body, _ := json.Marshal(map[string]any{"id": id, "pk": pk})
				_, _ = c.CreateItem(ctx, key, body, nil)
				body, _ = json.Marshal(map[string]any{"id": "s" + strconv.Itoa((i/20*20+i%20)%stable), "pk": pk, "touched": i})
				_, _ = c.UpsertItem(ctx, key, body, nil)
				if i%2 == 0 {
					_, _ = c.DeleteItem(ctx, key, id, nil)
				}
			}
		}(w)
	}
	pager := c.NewQueryItemsPager("SELECT c.id FROM c", azcosmos.NewPartitionKey(), &azcosmos.QueryOptions{PageSizeHint: 7})
	counts := map[string]int{}
	for page := 0; pager.More(); page++ {
		resp, err := pager.NextPage(ctx)
		require.NoError(t, err)
		for _, it := range resp.Items {
			var d map[string]any
			require.NoError(t, json.Unmarshal(it, &d))
			counts[d["id"].(string)]++
		}
		if page%2 == 0 && page < 24 {
			ranges, err := srv.PartitionKeyRanges("db", "c")
			require.NoError(t, err)
			_, err = srv.SplitPartition(ctx, "db", "c", ranges[page%len(ranges)].ID)
			require.NoError(t, err)
		}
	}
	stop.Store(true)
	wg.Wait()
	for id, n := range counts {
		require.Equal(t, 1, n, "document %s returned %d times", id, n)
	}
	for i := 0; i < stable; i++ {
		require.Equal(t, 1, counts["s"+strconv.Itoa(i)], "stable document s%d", i)
	}
	ranges, err := srv.PartitionKeyRanges("db", "c")
	require.NoError(t, err)
	require.Greater(t, len(ranges), 4)
}
