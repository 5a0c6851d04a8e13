package knobs_test

import (
	"context"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Counters count requests and charges per operation, resource type and
// container, including faults.
func TestCountersPerOperation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: knobs.Config{Charges: knobs.DefaultChargeModel()}})
	e.k.Counters().Reset()
	assert.Equal(t, knobs.Stat{}, e.k.Counters().Snapshot().Total)

	for _, id := range []string{"a", "b", "c"} {
		_, err := e.create(t, id)
		require.NoError(t, err)
	}
	for range 2 {
		_, err := e.read("a")
		require.NoError(t, err)
	}
	_, err := e.read("missing")
	require.Error(t, err)
	pager := e.c.NewQueryItemsPager("SELECT * FROM c", azcosmos.NewPartitionKeyString("p"), nil)
	_, err = pager.NextPage(context.Background())
	require.NoError(t, err)
	_, err = e.k.Faults().Add(knobs.FaultRule{Kind: knobs.FaultUnavailable, Operations: []cosmosemu.OperationType{cosmosemu.OpDelete}, Count: 1})
	require.NoError(t, err)
	_, err = e.c.DeleteItem(context.Background(), azcosmos.NewPartitionKeyString("p"), "a", nil)
	require.Error(t, err)

	snap := e.k.Counters().Snapshot()
	create := snap.ByOperation[cosmosemu.OpCreate]
	assert.Equal(t, int64(3), create.Requests)
	assert.Equal(t, 15.0, create.RequestCharge)
	read := snap.ByOperation[cosmosemu.OpRead]
	assert.GreaterOrEqual(t, read.Requests, int64(3), "document reads (the SDK may also read metadata)")
	del := snap.ByOperation[cosmosemu.OpDelete]
	assert.Equal(t, knobs.Stat{Requests: 1, Faulted: 1, Errors: 1}, del)
	query := snap.ByOperation[cosmosemu.OpQuery]
	assert.Equal(t, int64(1), query.Requests)
	assert.InDelta(t, 2.6, query.RequestCharge, 1e-9)

	docs := snap.ByResource[cosmosemu.ResourceDocument]
	assert.Equal(t, int64(3+3+1+1), docs.Requests)
	assert.InDelta(t, 15+1+1+1+2.6, docs.RequestCharge, 1e-9)
	assert.Equal(t, int64(2), docs.Errors, "404 read and injected 503")
	assert.GreaterOrEqual(t, snap.ByContainer["db/c"].Requests, docs.Requests)
	assert.GreaterOrEqual(t, snap.Total.Requests, docs.Requests)
	assert.Equal(t, int64(1), snap.Total.Faulted)

	e.k.Counters().Reset()
	snap = e.k.Counters().Snapshot()
	assert.Empty(t, snap.ByOperation)
	assert.Equal(t, knobs.Stat{}, snap.Total)
}

// Concurrent recording and snapshots are race-free and lose nothing.
func TestCountersConcurrent(t *testing.T) {
	t.Parallel()
	c := knobs.NewCounters()
	h := c.Middleware()(func(ctx context.Context, req *cosmosemu.Request) *cosmosemu.Response {
		return &cosmosemu.Response{Status: 200, RequestCharge: 1.25}
	})
	const workers, per = 8, 1000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &cosmosemu.Request{Operation: cosmosemu.OpRead, ResourceType: cosmosemu.ResourceDocument, Database: "db", Container: []string{"c1", "c2"}[w%2]}
			for range per {
				h(context.Background(), req)
				if w == 0 {
					_ = c.Snapshot()
				}
			}
		}()
	}
	wg.Wait()
	snap := c.Snapshot()
	assert.Equal(t, int64(workers*per), snap.Total.Requests)
	assert.Equal(t, float64(workers*per)*1.25, snap.Total.RequestCharge)
	assert.Equal(t, int64(workers*per/2), snap.ByContainer["db/c1"].Requests)
}
