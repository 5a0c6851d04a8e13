package cosmosemu_test

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"
)

// preload inserts n documents spread over 1000 partition keys.
func preload(b *testing.B, c *azcosmos.ContainerClient, n int) {
	b.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	const workers = 16
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += workers {
				pk := "pk" + strconv.Itoa(i%1000)
				_, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString(pk), mustJSON(b, map[string]any{"id": strconv.Itoa(i), "pk": pk, "n": i, "payload": "some text to make the document look real"}), nil)
				if err != nil {
					b.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
}

func BenchmarkPointRead(b *testing.B) {
	_, _, c := newContainer(b)
	preload(b, c, 100_000)
	ctx := context.Background()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		id := (i * 7919) % 100_000
		i++
		if _, err := c.ReadItem(ctx, azcosmos.NewPartitionKeyString("pk"+strconv.Itoa(id%1000)), strconv.Itoa(id), nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPointWrite(b *testing.B) {
	_, _, c := newContainer(b)
	ctx := context.Background()
	i := 0
	for b.Loop() {
		pk := "pk" + strconv.Itoa(i%1000)
		if _, err := c.UpsertItem(ctx, azcosmos.NewPartitionKeyString(pk), mustJSON(b, map[string]any{"id": strconv.Itoa(i % 50_000), "pk": pk, "n": i}), nil); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkBatch10(b *testing.B) {
	_, _, c := newContainer(b)
	ctx := context.Background()
	i := 0
	for b.Loop() {
		pk := "pk" + strconv.Itoa(i%100)
		batch := c.NewTransactionalBatch(azcosmos.NewPartitionKeyString(pk))
		for j := 0; j < 10; j++ {
			batch.UpsertItem(mustJSON(b, map[string]any{"id": strconv.Itoa(j), "pk": pk, "n": i}), nil)
		}
		res, err := c.ExecuteTransactionalBatch(ctx, batch, nil)
		if err != nil || !res.Success {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkSinglePartitionQuery(b *testing.B) {
	_, _, c := newContainer(b)
	preload(b, c, 20_000) // 20 documents per partition key
	ctx := context.Background()
	opts := &azcosmos.QueryOptions{QueryParameters: []azcosmos.QueryParameter{{Name: "@n", Value: 10_000}}}
	i := 0
	for b.Loop() {
		pager := c.NewQueryItemsPager("SELECT * FROM c WHERE c.n >= @n", azcosmos.NewPartitionKeyString("pk"+strconv.Itoa(i%1000)), opts)
		for pager.More() {
			if _, err := pager.NextPage(ctx); err != nil {
				b.Fatal(err)
			}
		}
		i++
	}
}

func BenchmarkChangeFeedRead(b *testing.B) {
	srv, _, c := newContainer(b)
	preload(b, c, 20_000)
	r := rawRequest(b, srv, http.MethodGet, "/dbs/db/colls/c/pkranges", "pkranges", "dbs/db/colls/c", nil, nil)
	require.Equal(b, http.StatusOK, r.Status)
	ranges, err := c.ReadFeedRanges(context.Background(), nil)
	require.NoError(b, err)
	ctx := context.Background()
	var token *string
	i := 0
	for b.Loop() {
		opts := &azcosmos.ChangeFeedOptions{MaxItemCount: 100, FeedRange: &ranges[i%len(ranges)]}
		if token != nil {
			opts = &azcosmos.ChangeFeedOptions{MaxItemCount: 100, Continuation: token}
		}
		resp, err := c.ReadChangeFeed(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		if len(resp.Items) == 0 || i%200 == 199 {
			token = nil // start over from the beginning of another range
		} else {
			tok := resp.ContinuationToken
			token = &tok
		}
		i++
	}
}
