package cosmosemu_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/stretchr/testify/require"
)

type feedPage struct {
	status int
	etag   string
	docs   []map[string]any
}

// readFeed issues one change feed request.
func readFeed(t testing.TB, srv *cosmosemu.Server, headers map[string]string) feedPage {
	t.Helper()
	h := map[string]string{"A-IM": "Incremental feed"}
	for k, v := range headers {
		h[k] = v
	}
	r := rawRequest(t, srv, http.MethodGet, "/dbs/db/colls/c/docs", "docs", "dbs/db/colls/c", h, nil)
	p := feedPage{status: r.Status, etag: r.Header.Get("etag")}
	if r.Status == http.StatusOK {
		var body struct {
			Documents []map[string]any `json:"Documents"`
			Count     int              `json:"_count"`
		}
		require.NoError(t, json.Unmarshal(r.Body, &body))
		require.Equal(t, body.Count, len(body.Documents))
		p.docs = body.Documents
	} else {
		require.Equal(t, http.StatusNotModified, r.Status, string(r.Body))
		require.Empty(t, r.Body)
	}
	require.NotEmpty(t, p.etag)
	return p
}

func ids(docs []map[string]any) []string {
	out := make([]string, len(docs))
	for i, d := range docs {
		out[i] = d["id"].(string)
	}
	return out
}

func TestChangeFeedLatestVersion(t *testing.T) {
	t.Parallel()
	srv, _, c := newContainer(t)
	ctx := context.Background()
	pk := azcosmos.NewPartitionKeyString("p")
	pkh := map[string]string{"x-ms-documentdb-partitionkey": `["p"]`}
	for _, id := range []string{"a", "b", "c"} {
		_, err := c.CreateItem(ctx, pk, mustJSON(t, map[string]any{"id": id, "pk": "p", "v": 1}), nil)
		require.NoError(t, err)
	}
	_, err := c.UpsertItem(ctx, pk, mustJSON(t, map[string]any{"id": "a", "pk": "p", "v": 2}), nil)
	require.NoError(t, err)
	_, err = c.DeleteItem(ctx, pk, "b", nil)
	require.NoError(t, err)

	first := readFeed(t, srv, pkh)
	require.Equal(t, http.StatusOK, first.status)
	require.Equal(t, []string{"c", "a"}, ids(first.docs), "LSN order, latest version only, deletes absent")
	require.Equal(t, float64(2), first.docs[1]["v"])
	lsnC, lsnA := first.docs[0]["_lsn"].(float64), first.docs[1]["_lsn"].(float64)
	require.Less(t, lsnC, lsnA)

	again := readFeed(t, srv, map[string]string{"x-ms-documentdb-partitionkey": `["p"]`, "If-None-Match": first.etag})
	require.Equal(t, http.StatusNotModified, again.status)
	require.Equal(t, first.etag, again.etag)

	// Paging by max item count continues exactly where it stopped.
	var paged []string
	etag := ""
	for i := 0; i < 5; i++ {
		h := map[string]string{"x-ms-documentdb-partitionkey": `["p"]`, "x-ms-max-item-count": "1"}
		if etag != "" {
			h["If-None-Match"] = etag
		}
		pg := readFeed(t, srv, h)
		etag = pg.etag
		if pg.status == http.StatusNotModified {
			break
		}
		require.Len(t, pg.docs, 1)
		paged = append(paged, ids(pg.docs)...)
	}
	require.Equal(t, []string{"c", "a"}, paged)

	// From now: only later changes.
	now := readFeed(t, srv, map[string]string{"x-ms-documentdb-partitionkey": `["p"]`, "If-None-Match": "*"})
	require.Equal(t, http.StatusNotModified, now.status)
	_, err = c.UpsertItem(ctx, pk, mustJSON(t, map[string]any{"id": "c", "pk": "p", "v": 9}), nil)
	require.NoError(t, err)
	later := readFeed(t, srv, map[string]string{"x-ms-documentdb-partitionkey": `["p"]`, "If-None-Match": now.etag})
	require.Equal(t, []string{"c"}, ids(later.docs))

	// From a point in time.
	future := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	require.Equal(t, http.StatusNotModified, readFeed(t, srv, map[string]string{"x-ms-documentdb-partitionkey": `["p"]`, "If-Modified-Since": future}).status)
	past := time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	require.Equal(t, []string{"a", "c"}, ids(readFeed(t, srv, map[string]string{"x-ms-documentdb-partitionkey": `["p"]`, "If-Modified-Since": past}).docs))

	bad := rawRequest(t, srv, http.MethodGet, "/dbs/db/colls/c/docs", "docs", "dbs/db/colls/c",
		map[string]string{"A-IM": "Incremental feed", "x-ms-documentdb-partitionkey": `["p"]`, "If-None-Match": `"nope"`}, nil)
	require.Equal(t, http.StatusBadRequest, bad.Status)
}

func TestChangeFeedBatchNotSplit(t *testing.T) {
	t.Parallel()
	srv, _, c := newContainer(t)
	ctx := context.Background()
	pk := azcosmos.NewPartitionKeyString("p")
	b := c.NewTransactionalBatch(pk)
	for i := 0; i < 5; i++ {
		b.CreateItem(mustJSON(t, map[string]any{"id": strconv.Itoa(i), "pk": "p"}), nil)
	}
	res, err := c.ExecuteTransactionalBatch(ctx, b, nil)
	require.NoError(t, err)
	require.True(t, res.Success)
	pg := readFeed(t, srv, map[string]string{"x-ms-documentdb-partitionkey": `["p"]`, "x-ms-max-item-count": "2"})
	require.Len(t, pg.docs, 5, "one transaction is never split across pages")
	require.Equal(t, http.StatusNotModified, readFeed(t, srv, map[string]string{"x-ms-documentdb-partitionkey": `["p"]`, "If-None-Match": pg.etag}).status)
}

func TestChangeFeedThroughSDK(t *testing.T) {
	t.Parallel()
	_, _, c := newContainer(t)
	ctx := context.Background()
	const n = 40
	for i := 0; i < n; i++ {
		pk := fmt.Sprintf("pk%d", i)
		_, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString(pk), mustJSON(t, map[string]any{"id": strconv.Itoa(i), "pk": pk}), nil)
		require.NoError(t, err)
	}
	ranges, err := c.ReadFeedRanges(ctx, nil)
	require.NoError(t, err)
	require.Len(t, ranges, 4)

	drain := func(token *string) (map[string]bool, string) {
		seen := map[string]bool{}
		opts := &azcosmos.ChangeFeedOptions{MaxItemCount: 7, FeedRange: &azcosmos.FeedRange{MinInclusive: "", MaxExclusive: "FF"}}
		if token != nil {
			opts = &azcosmos.ChangeFeedOptions{MaxItemCount: 7, Continuation: token}
		}
		var last string
		empty := 0
		for i := 0; i < 100 && empty < len(ranges); i++ {
			resp, err := c.ReadChangeFeed(ctx, opts)
			require.NoError(t, err)
			last = resp.ContinuationToken
			if len(resp.Items) == 0 {
				empty++
			} else {
				empty = 0
			}
			for _, it := range resp.Items {
				var d map[string]any
				require.NoError(t, json.Unmarshal(it, &d))
				seen[d["id"].(string)] = true
			}
			tok := last
			opts = &azcosmos.ChangeFeedOptions{MaxItemCount: 7, Continuation: &tok}
		}
		return seen, last
	}
	seen, token := drain(nil)
	require.Len(t, seen, n)
	_, err = c.UpsertItem(ctx, azcosmos.NewPartitionKeyString("pk3"), mustJSON(t, map[string]any{"id": "3", "pk": "pk3", "x": 1}), nil)
	require.NoError(t, err)
	seen, _ = drain(&token)
	require.Equal(t, map[string]bool{"3": true}, seen)
}

// TestChangeFeedConcurrentWriters polls every range while writers hammer
// several partition keys; per key the observed write sequence must be
// strictly increasing (no reordering) and the final drain must end on every
// document's last version (nothing skipped).
func TestChangeFeedConcurrentWriters(t *testing.T) {
	t.Parallel()
	srv, _, c := newContainer(t)
	ctx := context.Background()
	r := rawRequest(t, srv, http.MethodGet, "/dbs/db/colls/c/pkranges", "pkranges", "dbs/db/colls/c", nil, nil)
	require.Equal(t, http.StatusOK, r.Status)
	var pkr struct {
		PartitionKeyRanges []struct {
			ID string `json:"id"`
		} `json:"PartitionKeyRanges"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &pkr))

	const keys, writesPerKey, docsPerKey = 12, 120, 4
	final := make([]map[string]float64, keys) // per key: doc id -> last seq written
	var wg sync.WaitGroup
	errs := make(chan error, keys+len(pkr.PartitionKeyRanges))
	for k := 0; k < keys; k++ {
		final[k] = map[string]float64{}
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			pkv := fmt.Sprintf("key-%d", k)
			pk := azcosmos.NewPartitionKeyString(pkv)
			for s := 1; s <= writesPerKey; s++ {
				id := fmt.Sprintf("d%d", s%docsPerKey)
				var err error
				if s%10 == 0 {
					b := c.NewTransactionalBatch(pk)
					b.UpsertItem(mustJSON(t, map[string]any{"id": id, "pk": pkv, "seq": s}), nil)
					var res azcosmos.TransactionalBatchResponse
					res, err = c.ExecuteTransactionalBatch(ctx, b, nil)
					if err == nil && !res.Success {
						err = fmt.Errorf("batch failed")
					}
				} else {
					_, err = c.UpsertItem(ctx, pk, mustJSON(t, map[string]any{"id": id, "pk": pkv, "seq": s}), nil)
				}
				if err != nil {
					errs <- err
					return
				}
				final[k][id] = float64(s)
			}
		}(k)
	}
	stop := make(chan struct{})
	type obs struct {
		lastSeq map[string]float64            // per key
		docs    map[string]map[string]float64 // per key, per id
	}
	results := make([]obs, len(pkr.PartitionKeyRanges))
	var rwg sync.WaitGroup
	for i, rg := range pkr.PartitionKeyRanges {
		rwg.Add(1)
		go func(i int, rangeID string) {
			defer rwg.Done()
			o := obs{lastSeq: map[string]float64{}, docs: map[string]map[string]float64{}}
			etag := ""
			stopping := false
			for {
				select {
				case <-stop:
					stopping = true
				default:
				}
				h := map[string]string{"x-ms-documentdb-partitionkeyrangeid": rangeID, "x-ms-max-item-count": "5"}
				if etag != "" {
					h["If-None-Match"] = etag
				}
				pg := readFeed(t, srv, h)
				etag = pg.etag
				for _, d := range pg.docs {
					key, id, seq := d["pk"].(string), d["id"].(string), d["seq"].(float64)
					if seq <= o.lastSeq[key] {
						errs <- fmt.Errorf("range %s key %s: seq %v after %v", rangeID, key, seq, o.lastSeq[key])
						return
					}
					o.lastSeq[key] = seq
					if o.docs[key] == nil {
						o.docs[key] = map[string]float64{}
					}
					o.docs[key][id] = seq
				}
				if pg.status == http.StatusNotModified && stopping {
					results[i] = o
					return
				}
			}
		}(i, rg.ID)
	}
	wg.Wait()
	close(stop)
	rwg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for k := 0; k < keys; k++ {
		key := fmt.Sprintf("key-%d", k)
		found := false
		for _, o := range results {
			if got, ok := o.docs[key]; ok {
				require.False(t, found, "key %s seen in two ranges", key)
				found = true
				require.Equal(t, final[k], got, "key %s final versions", key)
			}
		}
		require.True(t, found, "key %s never seen", key)
	}
}

func TestPartitionKeyRangesFeed(t *testing.T) {
	t.Parallel()
	srv, _, _ := newContainer(t)
	r := rawRequest(t, srv, http.MethodGet, "/dbs/db/colls/c/pkranges", "pkranges", "dbs/db/colls/c",
		map[string]string{"A-IM": "Incremental feed", "x-ms-max-item-count": "-1"}, nil)
	require.Equal(t, http.StatusOK, r.Status)
	var body struct {
		PartitionKeyRanges []struct {
			ID, MinInclusive, MaxExclusive string
		} `json:"PartitionKeyRanges"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &body))
	require.Len(t, body.PartitionKeyRanges, 4)
	require.Equal(t, "", body.PartitionKeyRanges[0].MinInclusive)
	require.Equal(t, "FF", body.PartitionKeyRanges[3].MaxExclusive)
	for i := 1; i < 4; i++ {
		require.Equal(t, body.PartitionKeyRanges[i-1].MaxExclusive, body.PartitionKeyRanges[i].MinInclusive)
	}
	again := rawRequest(t, srv, http.MethodGet, "/dbs/db/colls/c/pkranges", "pkranges", "dbs/db/colls/c",
		map[string]string{"A-IM": "Incremental feed", "If-None-Match": r.Header.Get("etag")}, nil)
	require.Equal(t, http.StatusNotModified, again.Status)
}
