package cosmosemu_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"
)

func TestBatchSemantics(t *testing.T) {
	t.Parallel()
	srv, _, c := newContainer(t)
	ctx := context.Background()
	pk := azcosmos.NewPartitionKeyString("b")
	seed, err := c.CreateItem(ctx, pk, mustJSON(t, map[string]any{"id": "seed", "pk": "b", "v": 0}), nil)
	require.NoError(t, err)

	t.Run("success", func(t *testing.T) {
		b := c.NewTransactionalBatch(pk)
		b.CreateItem(mustJSON(t, map[string]any{"id": "n1", "pk": "b"}), nil)
		b.UpsertItem(mustJSON(t, map[string]any{"id": "n2", "pk": "b"}), nil)
		b.ReadItem("seed", nil)
		etag := seed.ETag
		b.ReplaceItem("seed", mustJSON(t, map[string]any{"id": "seed", "pk": "b", "v": 1}), &azcosmos.TransactionalBatchItemOptions{IfMatchETag: &etag})
		p := azcosmos.PatchOperations{}
		p.AppendIncrement("/v", 1)
		b.PatchItem("seed", p, nil)
		b.DeleteItem("n2", nil)
		res, err := c.ExecuteTransactionalBatch(ctx, b, nil)
		require.NoError(t, err)
		require.True(t, res.Success)
		got := []int32{}
		for _, r := range res.OperationResults {
			got = append(got, r.StatusCode)
		}
		require.Equal(t, []int32{201, 201, 200, 200, 200, 204}, got)
		require.NotNil(t, res.OperationResults[2].ResourceBody, "reads carry a body")
		read, err := c.ReadItem(ctx, pk, "seed", nil)
		require.NoError(t, err)
		var doc map[string]any
		require.NoError(t, json.Unmarshal(read.Value, &doc))
		require.Equal(t, float64(2), doc["v"])
		_, err = c.ReadItem(ctx, pk, "n2", nil)
		require.Equal(t, http.StatusNotFound, statusOf(err))
	})

	t.Run("failure applies nothing", func(t *testing.T) {
		b := c.NewTransactionalBatch(pk)
		b.CreateItem(mustJSON(t, map[string]any{"id": "f1", "pk": "b"}), nil)
		stale := azcore.ETag(`"stale"`)
		b.DeleteItem("seed", nil)
		b.ReplaceItem("n1", mustJSON(t, map[string]any{"id": "n1", "pk": "b"}), &azcosmos.TransactionalBatchItemOptions{IfMatchETag: &stale})
		b.CreateItem(mustJSON(t, map[string]any{"id": "f2", "pk": "b"}), nil)
		res, err := c.ExecuteTransactionalBatch(ctx, b, nil)
		require.NoError(t, err)
		require.False(t, res.Success)
		require.Equal(t, http.StatusMultiStatus, res.RawResponse.StatusCode)
		got := []int32{}
		for _, r := range res.OperationResults {
			got = append(got, r.StatusCode)
		}
		require.Equal(t, []int32{424, 424, 412, 424}, got)
		_, err = c.ReadItem(ctx, pk, "f1", nil)
		require.Equal(t, http.StatusNotFound, statusOf(err))
		_, err = c.ReadItem(ctx, pk, "seed", nil)
		require.NoError(t, err)
	})

	t.Run("wrong partition key in body", func(t *testing.T) {
		b := c.NewTransactionalBatch(pk)
		b.CreateItem(mustJSON(t, map[string]any{"id": "w", "pk": "other"}), nil)
		res, err := c.ExecuteTransactionalBatch(ctx, b, nil)
		require.NoError(t, err)
		require.False(t, res.Success)
		require.Equal(t, int32(http.StatusBadRequest), res.OperationResults[0].StatusCode)
	})

	t.Run("more than 100 operations", func(t *testing.T) {
		ops := make([]map[string]any, 101)
		for i := range ops {
			ops[i] = map[string]any{"operationType": "Read", "id": "seed"}
		}
		r := rawRequest(t, srv, http.MethodPost, "/dbs/db/colls/c/docs", "docs", "dbs/db/colls/c",
			map[string]string{"x-ms-documentdb-partitionkey": `["b"]`, "x-ms-cosmos-is-batch-request": "True", "x-ms-cosmos-batch-atomic": "True"}, mustJSON(t, ops))
		require.Equal(t, http.StatusBadRequest, r.Status)
		_, msg := errorCode(t, r.Body)
		require.Contains(t, msg, "Batch request has more operations than what is supported.")
	})
}

// TestBatchAtomicUnderConcurrency runs batches that set two documents to the
// same value while readers check they never observe the pair torn.
func TestBatchAtomicUnderConcurrency(t *testing.T) {
	t.Parallel()
	_, _, c := newContainer(t)
	ctx := context.Background()
	pk := azcosmos.NewPartitionKeyString("pair")
	for _, id := range []string{"left", "right"} {
		_, err := c.CreateItem(ctx, pk, mustJSON(t, map[string]any{"id": id, "pk": "pair", "v": 0}), nil)
		require.NoError(t, err)
	}
	const writers, rounds = 4, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers*rounds+64)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				v := w*1000 + i
				b := c.NewTransactionalBatch(pk)
				b.UpsertItem(mustJSON(t, map[string]any{"id": "left", "pk": "pair", "v": v}), nil)
				b.UpsertItem(mustJSON(t, map[string]any{"id": "right", "pk": "pair", "v": v}), nil)
				if i%5 == 0 { // a failing batch must leave no trace
					b.CreateItem(mustJSON(t, map[string]any{"id": "left", "pk": "pair"}), nil)
				}
				res, err := c.ExecuteTransactionalBatch(ctx, b, nil)
				if err != nil {
					errs <- err
					return
				}
				if res.Success == (i%5 == 0) {
					errs <- fmt.Errorf("batch %d/%d success=%v", w, i, res.Success)
				}
			}
		}(w)
	}
	done := make(chan struct{})
	var rwg sync.WaitGroup
	rwg.Add(1)
	go func() {
		defer rwg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			pager := c.NewQueryItemsPager("SELECT c.id, c.v FROM c", pk, nil)
			vals := map[string]float64{}
			for pager.More() {
				page, err := pager.NextPage(ctx)
				if err != nil {
					errs <- err
					return
				}
				for _, it := range page.Items {
					var d struct {
						ID string  `json:"id"`
						V  float64 `json:"v"`
					}
					_ = json.Unmarshal(it, &d)
					vals[d.ID] = d.V
				}
			}
			if vals["left"] != vals["right"] {
				errs <- fmt.Errorf("torn read: %v", vals)
				return
			}
		}
	}()
	wg.Wait()
	close(done)
	rwg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
