package cosmosemu_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/stretchr/testify/require"
)

// fill grows the container to n documents: matching queue documents
// (visible, unlocked, in slots 0..99) stay at the first 10 (ids q0..q9),
// every other document is history.
func fill(b *testing.B, c *azcosmos.ContainerClient, from, n int) {
	b.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	const workers = 16
	var failed atomic.Bool
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := from + w; i < n; i += workers {
				inst := "inst" + strconv.Itoa(i%5000)
				d := map[string]any{"id": "h" + strconv.Itoa(i), "pk": inst, "instanceId": inst, "type": "history",
					"executionId": "e" + strconv.Itoa(i%5000), "seq": i, "payload": "an event of the orchestration's history"}
				if i < 10 {
					d = map[string]any{"id": "q" + strconv.Itoa(i), "pk": inst, "instanceId": inst, "type": "orch_queue",
						"dispatchSlot": i * 7, "visibleAt": 0, "lockedUntil": 0, "enqueuedAt": i}
				}
				if _, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString(inst), mustJSON(b, d), nil); err != nil && !failed.Swap(true) {
					b.Error(err)
				}
			}
		}(w)
	}
	wg.Wait()
	require.False(b, failed.Load())
}

// BenchmarkIndexedQuery measures the provider's cross-partition queries
// (the polling dispatcher's OrchCandidates and the engine's QueueHeads
// catch-up) over 1,000, 10,000 and 100,000 documents of which 10 match,
// with the secondary indexes and with Options.DisableQueryIndex. It
// reports the knobs model's simulated charge (RU/op) and the emulator's
// own charge, which counts the documents examined (emuRU/op), per query.
//
//	go test -run '^$' -bench BenchmarkIndexedQuery -benchtime 200x ./cosmosemu/
func BenchmarkIndexedQuery(b *testing.B) {
	shapes := []struct {
		name  string
		query string
	}{
		{"polling", "SELECT c.instanceId, c.enqueuedAt FROM c WHERE c.type = 'orch_queue' AND c.visibleAt <= @now AND c.lockedUntil <= @now AND c.dispatchSlot >= @lo AND c.dispatchSlot <= @hi"},
		{"catchup", "SELECT c.id, c.instanceId, c.type, c.dispatchSlot, c.visibleAt, c.lockedUntil, c.enqueuedAt FROM c WHERE (c.type = 'orch_queue' OR c.type = 'worker_queue') AND ((c.dispatchSlot >= @lo0 AND c.dispatchSlot <= @hi0)) AND c.visibleAt <= @now AND c.lockedUntil <= @now"},
	}
	params := []azcosmos.QueryParameter{{Name: "@now", Value: 1}, {Name: "@lo", Value: 0}, {Name: "@hi", Value: 99}, {Name: "@lo0", Value: 0}, {Name: "@hi0", Value: 99}}
	for _, mode := range []struct {
		name    string
		noIndex bool
	}{{"index", false}, {"scan", true}} {
		b.Run(mode.name, func(b *testing.B) {
			var emuCharge, modelCharge atomic.Uint64 // last charges, in 1/100 RU
			record := func(dst *atomic.Uint64) cosmosemu.Middleware {
				return func(next cosmosemu.Handler) cosmosemu.Handler {
					return func(ctx context.Context, req *cosmosemu.Request) *cosmosemu.Response {
						resp := next(ctx, req)
						if req.Operation == cosmosemu.OpQuery && resp != nil {
							dst.Add(uint64(resp.RequestCharge*100 + 0.5))
						}
						return resp
					}
				}
			}
			model := knobs.NewCharges(knobs.DefaultChargeModel())
			opts := cosmosemu.Options{DisableQueryIndex: mode.noIndex, Middleware: []cosmosemu.Middleware{
				record(&modelCharge), model.Middleware(), record(&emuCharge)}}
			_, _, c := newContainerWith(b, opts)
			ctx := context.Background()
			have := 0
			for _, n := range []int{1_000, 10_000, 100_000} {
				fill(b, c, have, n)
				have = n
				for _, sh := range shapes {
					b.Run(sh.name+"/docs="+strconv.Itoa(n), func(b *testing.B) {
						emuCharge.Store(0)
						modelCharge.Store(0)
						b.ResetTimer()
						for i := 0; i < b.N; i++ {
							pager := c.NewQueryItemsPager(sh.query, azcosmos.NewPartitionKey(), &azcosmos.QueryOptions{QueryParameters: params})
							got := 0
							for pager.More() {
								page, err := pager.NextPage(ctx)
								require.NoError(b, err)
								got += len(page.Items)
							}
							require.Equal(b, 10, got)
						}
						b.StopTimer()
						b.ReportMetric(float64(modelCharge.Load())/100/float64(b.N), "RU/op")
						b.ReportMetric(float64(emuCharge.Load())/100/float64(b.N), "emuRU/op")
					})
				}
			}
		})
	}
}
