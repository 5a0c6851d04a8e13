package cosmosemu_test

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/stretchr/testify/require"
)

// offsetClock is a test clock: real time plus an offset tests advance.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) Now() time.Time {
	return time.Now().Add(time.Duration(c.off.Load()))
}

// twin is the same container on two emulators, one serving queries
// through its indexes and one scanning.
type twin struct {
	srvs  [2]*cosmosemu.Server
	colls [2]*azcosmos.ContainerClient
	clk   [2]*offsetClock
}

func newTwin(t *testing.T, policy *azcosmos.IndexingPolicy) *twin {
	t.Helper()
	var tw twin
	ctx := context.Background()
	for i, noIndex := range []bool{false, true} {
		tw.clk[i] = &offsetClock{}
		srv := startServer(t, cosmosemu.Options{DisableQueryIndex: noIndex, Clock: tw.clk[i]})
		client, err := srv.NewClient()
		require.NoError(t, err)
		_, err = client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "db"}, nil)
		require.NoError(t, err)
		db, err := client.NewDatabase("db")
		require.NoError(t, err)
		ttl := int32(-1)
		_, err = db.CreateContainer(ctx, azcosmos.ContainerProperties{
			ID: "c", DefaultTimeToLive: &ttl, IndexingPolicy: policy,
			PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}, Version: 2},
		}, nil)
		require.NoError(t, err)
		c, err := db.NewContainer("c")
		require.NoError(t, err)
		tw.srvs[i], tw.colls[i] = srv, c
	}
	return &tw
}

// do applies one write to both emulators and requires the same outcome.
func (tw *twin) do(t *testing.T, f func(c *azcosmos.ContainerClient) error) {
	t.Helper()
	e0, e1 := f(tw.colls[0]), f(tw.colls[1])
	require.Equal(t, statusOf(e0), statusOf(e1), "write outcome differs: %v / %v", e0, e1)
}

// pages reads a query page by page and returns every page's raw items
// and continuation.
func pages(t *testing.T, c *azcosmos.ContainerClient, q string, pk azcosmos.PartitionKey, params []azcosmos.QueryParameter, size int32) ([]string, error) {
	t.Helper()
	opts := &azcosmos.QueryOptions{PageSizeHint: size, QueryParameters: params, EnableScanInQuery: true}
	pager := c.NewQueryItemsPager(q, pk, opts)
	var out []string
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			return out, err
		}
		s := ""
		for _, it := range page.Items {
			s += string(it) + "\n"
		}
		if page.ContinuationToken != nil {
			s += "cont=" + *page.ContinuationToken
		}
		out = append(out, s)
	}
	return out, nil
}

var indexTypes = []string{"orch_queue", "worker_queue", "history", "instance", "kv"}

// randomValue is a value of a random JSON type, mostly small numbers.
func randomValue(r *rand.Rand) any {
	switch r.Intn(8) {
	case 0:
		return nil
	case 1:
		return r.Intn(2) == 0
	case 2:
		return "s" + strconv.Itoa(r.Intn(5))
	case 3:
		return []any{r.Intn(3)}
	default:
		return float64(r.Intn(10)) / 2
	}
}

func randomDoc(r *rand.Rand, id string) map[string]any {
	pk := "p" + strconv.Itoa(r.Intn(12))
	d := map[string]any{"id": id, "pk": pk, "type": indexTypes[r.Intn(len(indexTypes))]}
	for _, f := range []string{"visibleAt", "lockedUntil", "dispatchSlot", "n"} {
		if r.Intn(6) > 0 {
			d[f] = randomValue(r)
		}
	}
	if r.Intn(2) == 0 {
		d["nested"] = map[string]any{"v": randomValue(r)}
	}
	if r.Intn(3) == 0 {
		d["tags"] = []any{"t" + strconv.Itoa(r.Intn(3)), "t" + strconv.Itoa(r.Intn(3))}
	}
	if r.Intn(10) == 0 {
		d["ttl"] = 5
	}
	return d
}

// randomQuery returns a query of a shape the provider sends (or a
// neighbour of one) with its parameters, and whether it needs a
// partition key (ORDER BY, aggregates).
func randomQuery(r *rand.Rand) (string, []azcosmos.QueryParameter, bool) {
	params := []azcosmos.QueryParameter{
		{Name: "@now", Value: float64(r.Intn(10)) / 2},
		{Name: "@lo", Value: r.Intn(5)},
		{Name: "@hi", Value: 1 + r.Intn(5)},
		{Name: "@t", Value: indexTypes[r.Intn(len(indexTypes))]},
		{Name: "@ids", Value: []any{1, 2.5, "s1", nil}},
		{Name: "@s", Value: "s" + strconv.Itoa(r.Intn(5))},
	}
	typ := "c.type = '" + indexTypes[r.Intn(len(indexTypes))] + "'"
	conds := []string{
		typ,
		"c.type = @t",
		"(c.type = 'orch_queue' OR c.type = 'worker_queue')",
		"c.visibleAt <= @now AND c.lockedUntil <= @now",
		"(c.visibleAt > @now OR c.lockedUntil > @now)",
		"c.dispatchSlot >= @lo AND c.dispatchSlot <= @hi",
		"((c.dispatchSlot >= @lo AND c.dispatchSlot <= @hi) OR (c.dispatchSlot >= 4 AND c.dispatchSlot <= 4.5))",
		"c.n BETWEEN @lo AND @hi",
		"c.n > 2", "2 < c.n", "c.n < @s", "c.n >= 's2'", "c.n = null", "c.n = true", "c.n <= false",
		"c.n IN (1, 'x', null, 3.5)",
		"ARRAY_CONTAINS(@ids, c.n)",
		"c.nested.v = 1", "c['nested']['v'] >= 1",
		"c.id = '" + strconv.Itoa(r.Intn(60)) + "'",
		"NOT (c.type = 'history')",
		"IS_DEFINED(c.tags)",
		"c.pk = 'p" + strconv.Itoa(r.Intn(12)) + "'",
		"c.n = @ids",
		"true",
	}
	where := conds[r.Intn(len(conds))]
	for n := r.Intn(3); n > 0; n-- {
		op := " AND "
		if r.Intn(4) == 0 {
			op = " OR "
		}
		where = "(" + where + ")" + op + conds[r.Intn(len(conds))]
	}
	switch r.Intn(8) {
	case 0:
		return "SELECT c.id, t FROM c JOIN t IN c.tags WHERE " + where + " AND t != 't1'", params, false
	case 1:
		return "SELECT VALUE COUNT(1) FROM c WHERE " + where, params, true
	case 2:
		return "SELECT c.id, c.n FROM c WHERE " + where + " ORDER BY c.n DESC", params, true
	case 3:
		return "SELECT TOP 3 c.id FROM c WHERE " + where, params, true
	}
	return "SELECT c.id, c.type, c.n, c.visibleAt FROM c WHERE " + where, params, false
}

// TestIndexMatchesScan checks that queries served through the indexes
// return exactly what a scan returns (same items, order, page breaks and
// continuations), across random documents, random queries of the
// provider's shapes and every kind of write made after the indexes were
// built: create, replace, upsert, patch, delete, transactional batch,
// time-to-live expiry and a partition split.
func TestIndexMatchesScan(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		policy *azcosmos.IndexingPolicy
		seed   int64
	}{
		{"default policy", nil, 1},
		{"default policy, other seed", nil, 2},
		{"type excluded", &azcosmos.IndexingPolicy{Automatic: true, IndexingMode: azcosmos.IndexingModeConsistent,
			IncludedPaths: []azcosmos.IncludedPath{{Path: "/*"}}, ExcludedPaths: []azcosmos.ExcludedPath{{Path: "/type/?"}}}, 3},
		{"indexing none", &azcosmos.IndexingPolicy{IndexingMode: azcosmos.IndexingModeNone}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tw := newTwin(t, tc.policy)
			r := rand.New(rand.NewSource(tc.seed))
			ctx := context.Background()
			next := 0
			create := func() {
				d := randomDoc(r, strconv.Itoa(next))
				next++
				body := mustJSON(t, d)
				tw.do(t, func(c *azcosmos.ContainerClient) error {
					_, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString(d["pk"].(string)), body, nil)
					return err
				})
			}
			check := func(round int) {
				for i := 0; i < 40; i++ {
					q, params, needPK := randomQuery(r)
					pk := azcosmos.NewPartitionKey()
					if needPK || r.Intn(4) == 0 {
						pk = azcosmos.NewPartitionKeyString("p" + strconv.Itoa(r.Intn(12)))
					}
					size := int32(1 + r.Intn(7))
					if r.Intn(3) == 0 {
						size = -1
					}
					got, err1 := pages(t, tw.colls[0], q, pk, params, size)
					want, err2 := pages(t, tw.colls[1], q, pk, params, size)
					require.Equal(t, statusOf(err2), statusOf(err1), "round %d: %s: %v / %v", round, q, err1, err2)
					require.Equal(t, want, got, "round %d: %s %v", round, q, pk)
				}
			}
			for i := 0; i < 60; i++ {
				create()
			}
			check(0)
			for round := 1; round <= 4; round++ {
				for i := 0; i < 40; i++ {
					id := strconv.Itoa(r.Intn(next))
					d := randomDoc(r, id)
					pk := azcosmos.NewPartitionKeyString(d["pk"].(string))
					body := mustJSON(t, d)
					switch r.Intn(7) {
					case 0:
						create()
					case 1:
						tw.do(t, func(c *azcosmos.ContainerClient) error {
							_, err := c.UpsertItem(ctx, pk, body, nil)
							return err
						})
					case 2:
						tw.do(t, func(c *azcosmos.ContainerClient) error {
							_, err := c.ReplaceItem(ctx, pk, id, body, nil)
							return err
						})
					case 3:
						tw.do(t, func(c *azcosmos.ContainerClient) error {
							_, err := c.DeleteItem(ctx, pk, id, nil)
							return err
						})
					case 4:
						v := randomValue(r)
						tw.do(t, func(c *azcosmos.ContainerClient) error {
							var ops azcosmos.PatchOperations
							ops.AppendSet("/visibleAt", v)
							ops.AppendSet("/type", indexTypes[int(next)%len(indexTypes)])
							_, err := c.PatchItem(ctx, pk, id, ops, nil)
							return err
						})
					case 5:
						d2 := randomDoc(r, strconv.Itoa(next))
						next++
						d2["pk"] = d["pk"]
						b2 := mustJSON(t, d2)
						tw.do(t, func(c *azcosmos.ContainerClient) error {
							b := c.NewTransactionalBatch(pk)
							b.UpsertItem(body, nil)
							b.CreateItem(b2, nil)
							resp, err := c.ExecuteTransactionalBatch(ctx, b, nil)
							if err == nil && !resp.Success {
								return fmt.Errorf("batch failed")
							}
							return err
						})
					default:
						tw.do(t, func(c *azcosmos.ContainerClient) error {
							b := c.NewTransactionalBatch(pk)
							b.DeleteItem(id, nil)
							_, err := c.ExecuteTransactionalBatch(ctx, b, nil)
							return err
						})
					}
				}
				switch round {
				case 2: // time to live: items with ttl 5 expire and are purged by writes
					for _, clk := range tw.clk {
						clk.off.Add(int64(10 * time.Second))
					}
					for i := 0; i < 10; i++ {
						create()
					}
				case 3:
					for _, srv := range tw.srvs {
						_, err := srv.SplitPartition(ctx, "db", "c", "1")
						require.NoError(t, err)
					}
				}
				check(round)
			}
		})
	}
}
