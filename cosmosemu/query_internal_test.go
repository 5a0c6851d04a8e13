package cosmosemu

import (
	"context"
	"encoding/json"
	"math/rand"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"
)

// onePartition starts an emulator whose containers have a single physical
// partition, on clock clk, and creates database "db" with container "c"
// partitioned on paths (MultiHash when more than one) with time-to-live on
// (-1: only items with their own ttl expire). It returns the server, the
// container client and the emulator's container.
func onePartition(tb testing.TB, clk Clock, paths ...string) (*Server, *azcosmos.ContainerClient, *container) {
	tb.Helper()
	ctx := context.Background()
	srv, err := Start(ctx, Options{Clock: clk, PartitionCount: 1})
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, srv.Close()) })
	client, err := srv.NewClient()
	require.NoError(tb, err)
	_, err = client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "db"}, nil)
	require.NoError(tb, err)
	db, err := client.NewDatabase("db")
	require.NoError(tb, err)
	def := azcosmos.PartitionKeyDefinition{Paths: paths, Version: 2}
	if len(paths) > 1 {
		def.Kind = azcosmos.PartitionKeyKindMultiHash
	}
	ttl := int32(-1)
	_, err = db.CreateContainer(ctx, azcosmos.ContainerProperties{ID: "c", PartitionKeyDefinition: def, DefaultTimeToLive: &ttl}, nil)
	require.NoError(tb, err)
	cc, err := db.NewContainer("c")
	require.NoError(tb, err)
	coll, aerr := srv.store.container("db", "c")
	require.Nil(tb, aerr)
	require.Len(tb, coll.partitions(), 1)
	return srv, cc, coll
}

// createDocs creates docs (each with its "pk" and, when the container
// has it, "tenant" as partition key) with a few concurrent writers.
func createDocs(tb testing.TB, cc *azcosmos.ContainerClient, docs []map[string]any) {
	tb.Helper()
	const workers = 8
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < len(docs); i += workers {
				d := docs[i]
				pk := azcosmos.NewPartitionKeyString(d["pk"].(string))
				if t, ok := d["tenant"].(string); ok {
					pk = azcosmos.NewPartitionKeyString(t).AppendString(d["pk"].(string))
				}
				body, err := json.Marshal(d)
				if err == nil {
					_, err = cc.CreateItem(context.Background(), pk, body, nil)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(tb, err)
	}
}

// variedDoc is document i of logical partition pk, with values of every
// JSON type at the paths the test queries filter on.
func variedDoc(r *rand.Rand, pk string, i int) map[string]any {
	types := []string{"history", "history", "history", "orch_queue", "worker_queue", "instance"}
	d := map[string]any{"id": pk + "-" + strconv.Itoa(i), "pk": pk, "i": i, "type": types[r.Intn(len(types))],
		"s": string(rune('a'+r.Intn(4))) + strconv.Itoa(r.Intn(10))}
	switch r.Intn(10) {
	case 0:
		d["n"] = nil
	case 1:
		d["n"] = r.Intn(2) == 0
	case 2:
		d["n"] = "s" + strconv.Itoa(r.Intn(5))
	case 3:
		d["n"] = []any{r.Intn(5)}
	case 4: // missing
	default:
		d["n"] = float64(r.Intn(20)) / 2
	}
	if r.Intn(3) > 0 {
		d["tag"] = "t" + strconv.Itoa(r.Intn(4))
	}
	if r.Intn(2) == 0 {
		d["nested"] = map[string]any{"v": r.Intn(6)}
	}
	if r.Intn(4) == 0 {
		d["arr"] = []any{1, "two", 3}
	}
	if r.Intn(60) == 0 {
		d["rare"] = true
	}
	if r.Intn(8) == 0 {
		d["ttl"] = 5
	}
	return d
}

// queryPage is what a query page shows: its items, its continuation and
// its charge, which counts the documents the query examined (retrieved).
type queryPage struct {
	Items  []string
	Cont   string
	Charge float32
}

// readQuery runs a query to the end with pages of at most size items,
// failing if it has not ended after 2,000 pages.
func readQuery(t *testing.T, cc *azcosmos.ContainerClient, q string, pk azcosmos.PartitionKey, params []azcosmos.QueryParameter, size int32) []queryPage {
	t.Helper()
	opts := &azcosmos.QueryOptions{PageSizeHint: size, QueryParameters: params, EnableScanInQuery: true}
	pager := cc.NewQueryItemsPager(q, pk, opts)
	var out []queryPage
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		require.NoError(t, err, q)
		qp := queryPage{Charge: page.RequestCharge}
		for _, it := range page.Items {
			qp.Items = append(qp.Items, string(it))
		}
		if page.ContinuationToken != nil {
			qp.Cont = *page.ContinuationToken
		}
		out = append(out, qp)
		require.Less(t, len(out), 2000, "%s: the query does not end", q)
	}
	return out
}

// TestSingleKeyQueryMatchesPhysicalSelection checks that a query on one
// partition key value, whose candidates come from its logical partition,
// answers exactly as when they come from the whole physical partition
// (store.noLogicalSelect): the same items, continuations and charges
// (hence documents examined), page by page, for every query shape, with
// expired items still stored and with pages small enough that queries
// resume from a continuation (docsIn's from).
func TestSingleKeyQueryMatchesPhysicalSelection(t *testing.T) {
	t.Parallel()
	clk := &stepClock{now: time.Unix(1_700_000_000, 0)}
	srv, cc, coll := onePartition(t, clk, "/pk")
	r := rand.New(rand.NewSource(7))
	var docs []map[string]any
	for k := 0; k < 40; k++ {
		pk := "p" + strconv.Itoa(k)
		for i := 0; i < 5+k%7*4; i++ {
			docs = append(docs, variedDoc(r, pk, i))
		}
	}
	for i := 0; i < 600; i++ { // a large logical partition, as the leases'
		docs = append(docs, variedDoc(r, "lease", i))
	}
	createDocs(t, cc, docs)
	// Items with a ttl expire; without a write since, they stay stored
	// and queries must skip them.
	clk.advance(10 * time.Second)
	p, view := coll.partitions()[0], coll.ttlView()
	p.mu.RLock()
	lp, expired := p.logical[`["p6"]`], 0
	for _, d := range lp.docs {
		if view.hidden(d) {
			expired++
		}
	}
	p.mu.RUnlock()
	require.Len(t, lp.docs, 29, "the target logical partition holds its documents, expired or not")
	require.Positive(t, expired, "some of them expired")

	p6, lease := azcosmos.NewPartitionKeyString("p6"), azcosmos.NewPartitionKeyString("lease")
	params := []azcosmos.QueryParameter{
		{Name: "@t", Value: "orch_queue"},
		{Name: "@tags", Value: []any{"t1", "t3", 2, nil}},
		{Name: "@lo", Value: 1},
		{Name: "@hi", Value: 4},
		{Name: "@none", Value: []any{}},
	}
	tests := []struct {
		name  string
		query string
		pk    azcosmos.PartitionKey
	}{
		{"no where", "SELECT * FROM c", p6},
		{"equality", "SELECT * FROM c WHERE c.type = 'history'", p6},
		{"equality parameter", "SELECT c.id, c.n FROM c WHERE c.type = @t", p6},
		{"range", "SELECT * FROM c WHERE c.n > 2 AND c.n <= 7", p6},
		{"range on strings", "SELECT * FROM c WHERE c.n >= 's2'", p6},
		{"range on booleans", "SELECT * FROM c WHERE c.n <= false", p6},
		{"between", "SELECT * FROM c WHERE c.n BETWEEN @lo AND @hi", p6},
		{"null", "SELECT * FROM c WHERE c.n = null", p6},
		{"in", "SELECT * FROM c WHERE c.tag IN ('t1', 't3', 2, null)", p6},
		{"array contains", "SELECT * FROM c WHERE ARRAY_CONTAINS(@tags, c.tag)", p6},
		{"or", "SELECT * FROM c WHERE c.type = 'orch_queue' OR c.n < 1", p6},
		{"and of equality and nested range", "SELECT * FROM c WHERE c.type = 'history' AND c.nested.v >= 3", p6},
		{"array contains nothing", "SELECT * FROM c WHERE ARRAY_CONTAINS(@none, c.tag)", p6},
		{"selective filter", "SELECT * FROM c WHERE c.rare = true", p6},
		{"not servable by the index", "SELECT * FROM c WHERE STARTSWITH(c.s, 'a')", p6},
		{"partly servable", "SELECT * FROM c WHERE c.type = 'history' AND NOT IS_DEFINED(c.tag)", p6},
		{"or with an unservable side", "SELECT * FROM c WHERE c.type = 'history' OR STARTSWITH(c.s, 'b')", p6},
		{"join", "SELECT c.id, x FROM c JOIN x IN c.arr WHERE c.type = 'history'", p6},
		{"order by", "SELECT * FROM c WHERE c.type = 'history' ORDER BY c.i DESC", p6},
		{"aggregate", "SELECT VALUE COUNT(1) FROM c WHERE c.n >= 2", p6},
		{"top", "SELECT TOP 3 * FROM c WHERE c.type = 'history'", p6},
		{"key pinned by the filter", "SELECT * FROM c WHERE c.pk = 'p6' AND c.n > 1", azcosmos.NewPartitionKey()},
		{"absent key", "SELECT * FROM c WHERE c.type = 'history'", azcosmos.NewPartitionKeyString("nope")},
		{"large partition, selective", "SELECT * FROM c WHERE c.rare = true", lease},
		{"large partition, selective and", "SELECT * FROM c WHERE c.rare = true AND c.type = 'history'", lease},
		{"large partition, common", "SELECT * FROM c WHERE c.type = 'history'", lease},
		{"large partition, no where", "SELECT c.id FROM c", lease},
	}
	for _, tc := range tests {
		for _, size := range []int32{3, 1000} {
			run := func(physical bool) []queryPage {
				srv.store.noLogicalSelect.Store(physical)
				return readQuery(t, cc, tc.query, tc.pk, params, size)
			}
			want := run(true)
			got := run(false)
			require.Equal(t, want, got, "%s (%s), page size %d", tc.name, tc.query, size)
			require.NotEmpty(t, got, tc.name)
		}
	}
}

// TestSingleKeyQueryHierarchical checks a full hierarchical key (one
// logical partition) and a prefix (several) against physical selection.
func TestSingleKeyQueryHierarchical(t *testing.T) {
	t.Parallel()
	srv, cc, _ := onePartition(t, nil, "/tenant", "/pk")
	r := rand.New(rand.NewSource(11))
	var docs []map[string]any
	for k := 0; k < 12; k++ {
		for i := 0; i < 10; i++ {
			d := variedDoc(r, "p"+strconv.Itoa(k%4), 100*k+i)
			d["tenant"] = "t" + strconv.Itoa(k%3)
			docs = append(docs, d)
		}
	}
	createDocs(t, cc, docs)
	full := azcosmos.NewPartitionKeyString("t1").AppendString("p1")
	prefix := azcosmos.NewPartitionKeyString("t1")
	tests := []struct {
		name  string
		query string
		pk    azcosmos.PartitionKey
	}{
		{"full key, no where", "SELECT * FROM c", full},
		{"full key, equality", "SELECT * FROM c WHERE c.type = 'history'", full},
		{"full key, range", "SELECT * FROM c WHERE c.n >= 1", full},
		{"full key, order by", "SELECT * FROM c WHERE c.n >= 1 ORDER BY c.i", full},
		{"prefix, equality", "SELECT * FROM c WHERE c.type = 'history'", prefix},
	}
	for _, tc := range tests {
		run := func(physical bool) []queryPage {
			srv.store.noLogicalSelect.Store(physical)
			return readQuery(t, cc, tc.query, tc.pk, nil, 4)
		}
		want := run(true)
		require.Equal(t, want, run(false), tc.name)
		require.NotEmpty(t, want, tc.name)
	}
}

// TestSingleKeyQueryWorkIsPerLogicalPartition checks that the candidate
// selection of a query on one partition key value visits as many
// documents whatever the size of the other logical partitions of its
// physical partition, and that selection from the physical partition
// (store.noLogicalSelect) does not: the count measures that work.
func TestSingleKeyQueryWorkIsPerLogicalPartition(t *testing.T) {
	t.Parallel()
	srv, cc, coll := onePartition(t, nil, "/pk")
	r := rand.New(rand.NewSource(3))
	var docs []map[string]any
	for i := 0; i < 40; i++ {
		d := variedDoc(r, "mine", i)
		delete(d, "rare")
		docs = append(docs, d)
	}
	for i := 0; i < 500; i++ {
		d := variedDoc(r, "lease", i)
		d["rare"] = i < 3
		docs = append(docs, d)
	}
	for i := 0; i < 200; i++ {
		d := variedDoc(r, "other"+strconv.Itoa(i%50), i)
		delete(d, "rare")
		docs = append(docs, d)
	}
	createDocs(t, cc, docs)

	mine, lease := azcosmos.NewPartitionKeyString("mine"), azcosmos.NewPartitionKeyString("lease")
	tests := []struct {
		name  string
		query string
		pk    azcosmos.PartitionKey
		// atMost bounds the visits of the logical selection.
		atMost int
		// grows: whether the other documents added match the filter, so
		// that physical selection visits them.
		grows bool
	}{
		{"no where", "SELECT * FROM c", mine, 41, true},
		{"equality", "SELECT * FROM c WHERE c.type = 'history'", mine, 41, true},
		{"range", "SELECT * FROM c WHERE c.n >= 1", mine, 41, true},
		{"in", "SELECT * FROM c WHERE c.tag IN ('t1', 't2')", mine, 41, true},
		{"order by", "SELECT * FROM c WHERE c.type = 'history' ORDER BY c.i", mine, 41, true},
		{"not servable", "SELECT * FROM c WHERE STARTSWITH(c.s, 'a')", mine, 41, true},
		// The plan's 3 postings are read, not the 500 versions (plus the
		// logical partition's lookup).
		{"large partition, selective", "SELECT * FROM c WHERE c.rare = true", lease, 4, false},
	}
	visits := func(tc int, physical bool) uint64 {
		srv.store.noLogicalSelect.Store(physical)
		before := coll.selectVisits.Load()
		readQuery(t, cc, tests[tc].query, tests[tc].pk, nil, 1000)
		return coll.selectVisits.Load() - before
	}
	small := make([][2]uint64, len(tests))
	for i := range tests {
		small[i] = [2]uint64{visits(i, false), visits(i, true)}
		require.LessOrEqual(t, small[i][0], uint64(tests[i].atMost), tests[i].name)
	}

	// 10,000 more documents in other logical partitions of the same
	// physical partition, matching every filter above but the rare one.
	var more []map[string]any
	for i := 0; i < 10_000; i++ {
		more = append(more, map[string]any{"id": "m" + strconv.Itoa(i), "pk": "more" + strconv.Itoa(i%1000),
			"type": "history", "n": 5, "tag": "t1", "s": "a1", "i": i})
	}
	createDocs(t, cc, more)
	require.Len(t, coll.partitions(), 1)

	for i, tc := range tests {
		logical, physical := visits(i, false), visits(i, true)
		require.Equal(t, small[i][0], logical, "%s: logical selection's work changed with other logical partitions", tc.name)
		if tc.grows {
			require.GreaterOrEqual(t, physical, small[i][1]+1000, "%s: physical selection's work grows (the count measures it)", tc.name)
		}
	}
}

// BenchmarkQuerySingleLogicalPartition measures a query on one partition
// key value (20 documents) with 1,000, 10,000 and 100,000 documents in
// other logical partitions of the same physical partition, with the
// candidates selected from the logical partition and, for comparison,
// from the physical partition (store.noLogicalSelect).
//
//	go test -run '^$' -bench BenchmarkQuerySingleLogicalPartition -benchtime 20x ./cosmosemu/
func BenchmarkQuerySingleLogicalPartition(b *testing.B) {
	shapes := []struct{ name, query string }{
		{"equality", "SELECT * FROM c WHERE c.type = 'history'"},
		{"range", "SELECT * FROM c WHERE c.n >= 1"},
		{"nowhere", "SELECT * FROM c"},
	}
	srv, cc, _ := onePartition(b, nil, "/pk")
	var mine []map[string]any
	for i := 0; i < 20; i++ {
		mine = append(mine, map[string]any{"id": "x" + strconv.Itoa(i), "pk": "inst-1", "type": "history", "n": i, "i": i})
	}
	createDocs(b, cc, mine)
	ctx := context.Background()
	have := 0
	for _, n := range []int{1_000, 10_000, 100_000} {
		var more []map[string]any
		for i := have; i < n; i++ {
			more = append(more, map[string]any{"id": "o" + strconv.Itoa(i), "pk": "inst" + strconv.Itoa(2+i%5000),
				"type": "history", "n": i % 100, "i": i})
		}
		createDocs(b, cc, more)
		have = n
		for _, mode := range []struct {
			name     string
			physical bool
		}{{"logical", false}, {"physical", true}} {
			for _, sh := range shapes {
				b.Run(mode.name+"/"+sh.name+"/others="+strconv.Itoa(n), func(b *testing.B) {
					srv.store.noLogicalSelect.Store(mode.physical)
					pk := azcosmos.NewPartitionKeyString("inst-1")
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						pager := cc.NewQueryItemsPager(sh.query, pk, nil)
						got := 0
						for pager.More() {
							page, err := pager.NextPage(ctx)
							require.NoError(b, err)
							got += len(page.Items)
						}
						require.NotZero(b, got)
					}
				})
			}
		}
	}
}
