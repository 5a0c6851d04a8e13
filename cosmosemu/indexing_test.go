package cosmosemu_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/stretchr/testify/require"
)

const (
	wantExcludedFilter = "An invalid query has been specified with filters against path(s) excluded from indexing. Consider adding allow scan header in the request."
	wantOrderExcluded  = "The index path corresponding to the specified order-by item is excluded."
	wantNoComposite    = "The order by query does not have a corresponding composite index that it can be served from."
)

// policyContainer starts a server and creates container "c" (partitioned on
// /pk) with the given indexing policy (nil: the service default) holding
// ten documents in partitions p0 and p1.
func policyContainer(t *testing.T, policy *azcosmos.IndexingPolicy) (*cosmosemu.Server, *azcosmos.DatabaseClient, *azcosmos.ContainerClient) {
	t.Helper()
	srv := startServer(t, cosmosemu.Options{})
	client, err := srv.NewClient()
	require.NoError(t, err)
	ctx := context.Background()
	_, err = client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "db"}, nil)
	require.NoError(t, err)
	db, err := client.NewDatabase("db")
	require.NoError(t, err)
	props := azcosmos.ContainerProperties{ID: "c", PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}, Version: 2}, IndexingPolicy: policy}
	_, err = db.CreateContainer(ctx, props, nil)
	require.NoError(t, err)
	c, err := db.NewContainer("c")
	require.NoError(t, err)
	for i := 0; i < 10; i++ {
		pk := "p" + strconv.Itoa(i%2)
		doc := map[string]any{"id": strconv.Itoa(i), "pk": pk, "type": "t" + strconv.Itoa(i%3), "n": i, "other": i,
			"payload": map[string]any{"x": i}, "nested": map[string]any{"deep": map[string]any{"x": i}}, "tags": []any{"a", "b" + strconv.Itoa(i)}}
		_, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString(pk), mustJSON(t, doc), nil)
		require.NoError(t, err)
	}
	return srv, db, c
}

// selectivePolicy excludes the root and includes a few paths, the way
// durafeed's provider does.
func selectivePolicy() *azcosmos.IndexingPolicy {
	p := &azcosmos.IndexingPolicy{IndexingMode: azcosmos.IndexingModeConsistent, Automatic: true}
	for _, s := range []string{"/type/?", "/n/?", "/pk/?", "/nested/*", "/tags/[]/?"} {
		p.IncludedPaths = append(p.IncludedPaths, azcosmos.IncludedPath{Path: s})
	}
	for _, s := range []string{"/payload/*", "/*"} {
		p.ExcludedPaths = append(p.ExcludedPaths, azcosmos.ExcludedPath{Path: s})
	}
	asc, desc := azcosmos.CompositeIndexAscending, azcosmos.CompositeIndexDescending
	p.CompositeIndexes = [][]azcosmos.CompositeIndex{
		{{Path: "/type", Order: asc}, {Path: "/n", Order: asc}},
		{{Path: "/n", Order: desc}, {Path: "/id", Order: asc}},
	}
	return p
}

// queryAll runs a query to the end and returns its results or error.
func queryAll(t *testing.T, c *azcosmos.ContainerClient, q string, pk azcosmos.PartitionKey, opts *azcosmos.QueryOptions) ([]map[string]any, error) {
	t.Helper()
	docs, _, err := collect(t, c.NewQueryItemsPager(q, pk, opts))
	return docs, err
}

// requireRejected checks a 400 BadRequest carrying msg.
func requireRejected(t *testing.T, err error, msg, q string) {
	t.Helper()
	require.Error(t, err, q)
	var re *azcore.ResponseError
	require.ErrorAs(t, err, &re, q)
	require.Equal(t, http.StatusBadRequest, re.StatusCode, q)
	require.Contains(t, err.Error(), msg, q)
}

func TestIndexingPolicyFilters(t *testing.T) {
	t.Parallel()
	_, _, c := policyContainer(t, selectivePolicy())
	p1 := azcosmos.NewPartitionKeyString("p1")
	all := azcosmos.NewPartitionKey()
	scan := &azcosmos.QueryOptions{EnableScanInQuery: true}
	tests := []struct {
		query    string
		pk       azcosmos.PartitionKey
		opts     *azcosmos.QueryOptions
		rejected bool
		count    int
	}{
		{"SELECT * FROM c", all, nil, false, 10},
		{"SELECT * FROM c WHERE c.type = 't0'", all, nil, false, 4},
		{"SELECT c.other, c.payload FROM c WHERE c.type = 't0'", p1, nil, false, 2},
		{"SELECT COUNT(1) AS k FROM c WHERE c.n >= 5", p1, nil, false, 1},
		{"SELECT * FROM c WHERE c.id = '3'", all, nil, false, 1},
		{"SELECT * FROM c WHERE c._ts > 0", p1, nil, false, 5},
		{"SELECT * FROM c WHERE c.pk = 'p1'", all, nil, false, 5},
		{"SELECT * FROM c WHERE c.nested.deep.x = 2", all, nil, false, 1},
		{"SELECT * FROM c WHERE ARRAY_CONTAINS(c.tags, 'a')", p1, nil, false, 5},
		{"SELECT t AS tag FROM c JOIN t IN c.tags WHERE t = 'b3'", all, nil, false, 1},
		{"SELECT * FROM c WHERE c.other = 3", all, nil, true, 0},
		{"SELECT * FROM c WHERE c.other = 3", p1, nil, true, 0},
		{"SELECT * FROM c WHERE c.payload.x = 3", p1, nil, true, 0},
		{"SELECT * FROM c WHERE c.type = 't0' AND IS_DEFINED(c.other)", p1, nil, true, 0},
		{"SELECT * FROM c WHERE STARTSWITH(c.payload.s, 'a')", p1, nil, true, 0},
		{"SELECT * FROM c WHERE IS_DEFINED(c.nested)", p1, nil, false, 5},
		{"SELECT * FROM c WHERE IS_DEFINED(c.payload)", p1, nil, true, 0},
		{"SELECT * FROM c WHERE c.type = 't0' OR c.other > 7", p1, nil, true, 0},
		{"SELECT * FROM c WHERE c.other = 3", all, scan, false, 1},
		{"SELECT * FROM c WHERE c.payload.x >= 8", p1, scan, false, 1},
	}
	for _, tt := range tests {
		docs, err := queryAll(t, c, tt.query, tt.pk, tt.opts)
		if tt.rejected {
			requireRejected(t, err, wantExcludedFilter, tt.query)
			continue
		}
		require.NoError(t, err, tt.query)
		require.Len(t, docs, tt.count, tt.query)
	}
}

func TestIndexingPolicyOrderBy(t *testing.T) {
	t.Parallel()
	_, _, c := policyContainer(t, selectivePolicy())
	p1 := azcosmos.NewPartitionKeyString("p1")
	scan := &azcosmos.QueryOptions{EnableScanInQuery: true}
	tests := []struct {
		query string
		opts  *azcosmos.QueryOptions
		want  string // rejection message, "" when served
	}{
		{"SELECT * FROM c ORDER BY c.n", nil, ""},
		{"SELECT * FROM c ORDER BY c.id DESC", nil, ""},
		{"SELECT * FROM c ORDER BY c._ts", nil, ""},
		{"SELECT * FROM c ORDER BY c.other", nil, wantOrderExcluded},
		{"SELECT * FROM c ORDER BY c.other", scan, wantOrderExcluded},
		{"SELECT * FROM c ORDER BY c.payload.x DESC", nil, wantOrderExcluded},
		{"SELECT * FROM c ORDER BY c.type, c.n", nil, ""},
		{"SELECT * FROM c ORDER BY c.type DESC, c.n DESC", nil, ""},
		{"SELECT * FROM c ORDER BY c.n DESC, c.id", nil, ""},
		{"SELECT * FROM c ORDER BY c.n, c.id DESC", nil, ""},
		{"SELECT * FROM c ORDER BY c.type, c.n DESC", nil, wantNoComposite},
		{"SELECT * FROM c ORDER BY c.n, c.type", nil, wantNoComposite},
		{"SELECT * FROM c ORDER BY c.type, c.n, c.id", nil, wantNoComposite},
		{"SELECT * FROM c ORDER BY c.type, c.n DESC", scan, wantNoComposite},
		{"SELECT * FROM c WHERE c.other > 0 ORDER BY c.n", nil, wantExcludedFilter},
		{"SELECT * FROM c WHERE c.other > 0 ORDER BY c.n", scan, ""},
	}
	for _, tt := range tests {
		docs, err := queryAll(t, c, tt.query, p1, tt.opts)
		if tt.want != "" {
			requireRejected(t, err, tt.want, tt.query)
			continue
		}
		require.NoError(t, err, tt.query)
		require.NotEmpty(t, docs, tt.query)
	}
	docs, err := queryAll(t, c, "SELECT c.id FROM c ORDER BY c.type DESC, c.n DESC", p1, nil)
	require.NoError(t, err)
	var got []string
	for _, d := range docs {
		got = append(got, d["id"].(string))
	}
	require.Equal(t, []string{"5", "7", "1", "9", "3"}, got)
}

func TestIndexingPolicyDefault(t *testing.T) {
	t.Parallel()
	_, _, c := policyContainer(t, nil)
	p1 := azcosmos.NewPartitionKeyString("p1")
	for _, q := range []string{
		"SELECT * FROM c WHERE c.other = 3 OR c.payload.x = 1 OR IS_DEFINED(c.nested.deep)",
		"SELECT * FROM c WHERE c.pk = 'p1' ORDER BY c.other DESC",
		"SELECT * FROM c ORDER BY c.payload.x",
	} {
		docs, err := queryAll(t, c, q, p1, nil)
		require.NoError(t, err, q)
		require.NotEmpty(t, docs, q)
	}
	// No composite index by default; _etag is excluded by default.
	_, err := queryAll(t, c, "SELECT * FROM c ORDER BY c.type, c.n", p1, nil)
	requireRejected(t, err, wantNoComposite, "multi order by")
	_, err = queryAll(t, c, "SELECT * FROM c WHERE c._etag = 'x'", p1, nil)
	requireRejected(t, err, wantExcludedFilter, "_etag filter")
}

func TestIndexingPolicyNone(t *testing.T) {
	t.Parallel()
	_, _, c := policyContainer(t, &azcosmos.IndexingPolicy{IndexingMode: azcosmos.IndexingModeNone})
	ctx := context.Background()
	p1 := azcosmos.NewPartitionKeyString("p1")
	docs, err := queryAll(t, c, "SELECT c.id, c.other FROM c", azcosmos.NewPartitionKey(), nil)
	require.NoError(t, err)
	require.Len(t, docs, 10)
	_, err = queryAll(t, c, "SELECT * FROM c WHERE c.id = '1'", p1, nil)
	requireRejected(t, err, wantExcludedFilter, "id filter")
	docs, err = queryAll(t, c, "SELECT * FROM c WHERE c.id = '1'", p1, &azcosmos.QueryOptions{EnableScanInQuery: true})
	require.NoError(t, err)
	require.Len(t, docs, 1)
	_, err = queryAll(t, c, "SELECT * FROM c ORDER BY c.id", p1, &azcosmos.QueryOptions{EnableScanInQuery: true})
	requireRejected(t, err, wantOrderExcluded, "order by")
	_, err = c.ReadItem(ctx, p1, "1", nil)
	require.NoError(t, err)
}

// TestIndexingPolicyRootExcluded checks that with "/*" excluded the
// partition key is not queryable unless included, while id always is.
func TestIndexingPolicyRootExcluded(t *testing.T) {
	t.Parallel()
	policy := &azcosmos.IndexingPolicy{IndexingMode: azcosmos.IndexingModeConsistent, Automatic: true,
		IncludedPaths: []azcosmos.IncludedPath{{Path: "/type/?"}}, ExcludedPaths: []azcosmos.ExcludedPath{{Path: "/*"}}}
	_, _, c := policyContainer(t, policy)
	ctx := context.Background()
	_, err := queryAll(t, c, "SELECT * FROM c WHERE c.pk = 'p1'", azcosmos.NewPartitionKey(), nil)
	requireRejected(t, err, wantExcludedFilter, "pk filter")
	docs, err := queryAll(t, c, "SELECT * FROM c WHERE c.id = '1' AND c.type = 't1'", azcosmos.NewPartitionKey(), nil)
	require.NoError(t, err)
	require.Len(t, docs, 1)

	// Replacing the policy takes effect for the next query.
	resp, err := c.Read(ctx, nil)
	require.NoError(t, err)
	props := *resp.ContainerProperties
	props.IndexingPolicy.IncludedPaths = append(props.IndexingPolicy.IncludedPaths, azcosmos.IncludedPath{Path: "/pk/?"})
	_, err = c.Replace(ctx, props, nil)
	require.NoError(t, err)
	docs, err = queryAll(t, c, "SELECT * FROM c WHERE c.pk = 'p1'", azcosmos.NewPartitionKey(), nil)
	require.NoError(t, err)
	require.Len(t, docs, 5)
}

// TestIndexingPolicyKeyAccess checks that point reads, ReadMany and the
// change feed work under a selective policy.
func TestIndexingPolicyKeyAccess(t *testing.T) {
	t.Parallel()
	_, _, c := policyContainer(t, selectivePolicy())
	ctx := context.Background()
	_, err := c.ReadItem(ctx, azcosmos.NewPartitionKeyString("p0"), "4", nil)
	require.NoError(t, err)
	var idents []azcosmos.ItemIdentity
	for i := 0; i < 10; i++ {
		idents = append(idents, azcosmos.ItemIdentity{ID: strconv.Itoa(i), PartitionKey: azcosmos.NewPartitionKeyString("p" + strconv.Itoa(i%2))})
	}
	res, err := c.ReadManyItems(ctx, idents, nil)
	require.NoError(t, err)
	require.Len(t, res.Items, 10)
	feed, err := c.ReadChangeFeed(ctx, &azcosmos.ChangeFeedOptions{FeedRange: &azcosmos.FeedRange{MinInclusive: "", MaxExclusive: "FF"}})
	require.NoError(t, err)
	require.NotEmpty(t, feed.Items)
}

// TestIndexingPolicyScanHeader checks the REST header that allows a scan.
func TestIndexingPolicyScanHeader(t *testing.T) {
	t.Parallel()
	srv, _, _ := policyContainer(t, selectivePolicy())
	body := []byte(`{"query":"SELECT * FROM c WHERE c.other = 3"}`)
	h := map[string]string{"Content-Type": "application/query+json", "x-ms-documentdb-isquery": "true", "x-ms-documentdb-partitionkey": `["p1"]`}
	r := rawRequest(t, srv, http.MethodPost, "/dbs/db/colls/c/docs", "docs", "dbs/db/colls/c", h, body)
	require.Equal(t, http.StatusBadRequest, r.Status)
	code, msg := errorCode(t, r.Body)
	require.Equal(t, "BadRequest", code)
	require.True(t, strings.Contains(msg, wantExcludedFilter), msg)
	require.Empty(t, r.Header.Get("x-ms-substatus"))

	h["x-ms-documentdb-query-enable-scan"] = "true"
	r = rawRequest(t, srv, http.MethodPost, "/dbs/db/colls/c/docs", "docs", "dbs/db/colls/c", h, body)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var out struct{ Documents []json.RawMessage }
	require.NoError(t, json.Unmarshal(r.Body, &out))
	require.Len(t, out.Documents, 1)
}
