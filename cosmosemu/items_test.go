package cosmosemu_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"
)

func TestItemLifecycle(t *testing.T) {
	t.Parallel()
	_, _, c := newContainer(t)
	ctx := context.Background()
	pk := azcosmos.NewPartitionKeyString("p1")

	created, err := c.CreateItem(ctx, pk, mustJSON(t, map[string]any{"id": "a", "pk": "p1", "n": 1}), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, created.RawResponse.StatusCode)
	require.Empty(t, created.Value, "no content by default")
	require.NotNil(t, created.SessionToken)
	require.Regexp(t, `^\d+:-1#\d+$`, *created.SessionToken)
	require.NotEmpty(t, created.ETag)

	_, err = c.CreateItem(ctx, pk, mustJSON(t, map[string]any{"id": "a", "pk": "p1"}), nil)
	require.Equal(t, http.StatusConflict, statusOf(err))

	read, err := c.ReadItem(ctx, pk, "a", nil)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(read.Value, &doc))
	for _, k := range []string{"_rid", "_self", "_etag", "_ts", "_attachments"} {
		require.Contains(t, doc, k)
	}
	require.Equal(t, string(read.ETag), doc["_etag"])

	// Conditional read.
	_, err = c.ReadItem(ctx, pk, "a", &azcosmos.ItemOptions{IfMatchEtag: nil})
	require.NoError(t, err)

	stale := read.ETag
	replaced, err := c.ReplaceItem(ctx, pk, "a", mustJSON(t, map[string]any{"id": "a", "pk": "p1", "n": 2}), &azcosmos.ItemOptions{IfMatchEtag: &stale, EnableContentResponseOnWrite: true})
	require.NoError(t, err)
	require.NotEqual(t, stale, replaced.ETag)
	var rdoc map[string]any
	require.NoError(t, json.Unmarshal(replaced.Value, &rdoc))
	require.Equal(t, doc["_rid"], rdoc["_rid"], "replace keeps _rid")

	_, err = c.ReplaceItem(ctx, pk, "a", mustJSON(t, map[string]any{"id": "a", "pk": "p1", "n": 3}), &azcosmos.ItemOptions{IfMatchEtag: &stale})
	require.Equal(t, http.StatusPreconditionFailed, statusOf(err))
	_, err = c.DeleteItem(ctx, pk, "a", &azcosmos.ItemOptions{IfMatchEtag: &stale})
	require.Equal(t, http.StatusPreconditionFailed, statusOf(err))

	up, err := c.UpsertItem(ctx, pk, mustJSON(t, map[string]any{"id": "b", "pk": "p1"}), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, up.RawResponse.StatusCode)
	up, err = c.UpsertItem(ctx, pk, mustJSON(t, map[string]any{"id": "b", "pk": "p1", "x": true}), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, up.RawResponse.StatusCode)

	del, err := c.DeleteItem(ctx, pk, "a", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, del.RawResponse.StatusCode)
	_, err = c.ReadItem(ctx, pk, "a", nil)
	require.Equal(t, http.StatusNotFound, statusOf(err))
	_, err = c.DeleteItem(ctx, pk, "a", nil)
	require.Equal(t, http.StatusNotFound, statusOf(err))
	_, err = c.ReplaceItem(ctx, pk, "a", mustJSON(t, map[string]any{"id": "a", "pk": "p1"}), nil)
	require.Equal(t, http.StatusNotFound, statusOf(err))
}

func TestReadIfNoneMatch(t *testing.T) {
	t.Parallel()
	srv, _, c := newContainer(t)
	ctx := context.Background()
	res, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString("p"), mustJSON(t, map[string]any{"id": "x", "pk": "p"}), nil)
	require.NoError(t, err)
	r := rawRequest(t, srv, http.MethodGet, "/dbs/db/colls/c/docs/x", "docs", "dbs/db/colls/c/docs/x",
		map[string]string{"x-ms-documentdb-partitionkey": `["p"]`, "If-None-Match": string(res.ETag)}, nil)
	require.Equal(t, http.StatusNotModified, r.Status)
	require.Empty(t, r.Body)
	r = rawRequest(t, srv, http.MethodGet, "/dbs/db/colls/c/docs/x", "docs", "dbs/db/colls/c/docs/x",
		map[string]string{"x-ms-documentdb-partitionkey": `["p"]`, "If-None-Match": `"other"`}, nil)
	require.Equal(t, http.StatusOK, r.Status)
}

func TestPartitionKeyRules(t *testing.T) {
	t.Parallel()
	srv, _, c := newContainer(t)
	ctx := context.Background()

	_, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString("p1"), mustJSON(t, map[string]any{"id": "a", "pk": "p2"}), nil)
	require.Equal(t, http.StatusBadRequest, statusOf(err))
	require.Contains(t, err.Error(), "PartitionKey extracted from document doesn't match the one specified in the header")

	// Null and "none" (missing property) keys are distinct partitions.
	_, err = c.CreateItem(ctx, azcosmos.NullPartitionKey, mustJSON(t, map[string]any{"id": "n", "pk": nil}), nil)
	require.NoError(t, err)
	_, err = c.CreateItem(ctx, azcosmos.NullPartitionKey, mustJSON(t, map[string]any{"id": "m"}), nil)
	require.Equal(t, http.StatusBadRequest, statusOf(err))
	r := rawRequest(t, srv, http.MethodPost, "/dbs/db/colls/c/docs", "docs", "dbs/db/colls/c",
		map[string]string{"x-ms-documentdb-partitionkey": `[{}]`, "Content-Type": "application/json"}, mustJSON(t, map[string]any{"id": "m"}))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	r = rawRequest(t, srv, http.MethodGet, "/dbs/db/colls/c/docs/m", "docs", "dbs/db/colls/c/docs/m",
		map[string]string{"x-ms-documentdb-partitionkey": `[]`}, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	_, err = c.ReadItem(ctx, azcosmos.NullPartitionKey, "m", nil)
	require.Equal(t, http.StatusNotFound, statusOf(err))

	// Point operations need the header.
	r = rawRequest(t, srv, http.MethodGet, "/dbs/db/colls/c/docs/n", "docs", "dbs/db/colls/c/docs/n", nil, nil)
	require.Equal(t, http.StatusBadRequest, r.Status)
	code, _ := errorCode(t, r.Body)
	require.Equal(t, "BadRequest", code)
}

func TestHierarchicalItems(t *testing.T) {
	t.Parallel()
	_, _, c := newContainer(t, "/tenant", "/user")
	ctx := context.Background()
	for _, u := range []string{"u1", "u2"} {
		pk := azcosmos.NewPartitionKeyString("t1").AppendString(u)
		_, err := c.CreateItem(ctx, pk, mustJSON(t, map[string]any{"id": "same", "tenant": "t1", "user": u}), nil)
		require.NoError(t, err)
	}
	_, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString("t2").AppendString("u1"), mustJSON(t, map[string]any{"id": "same", "tenant": "t2", "user": "u1"}), nil)
	require.NoError(t, err)
	pager := c.NewQueryItemsPager("SELECT VALUE c.user FROM c", azcosmos.NewPartitionKeyString("t1"), nil)
	var users []string
	for pager.More() {
		page, err := pager.NextPage(ctx)
		require.NoError(t, err)
		for _, it := range page.Items {
			var s string
			require.NoError(t, json.Unmarshal(it, &s))
			users = append(users, s)
		}
	}
	require.ElementsMatch(t, []string{"u1", "u2"}, users)
}

func TestPatch(t *testing.T) {
	t.Parallel()
	_, _, c := newContainer(t)
	ctx := context.Background()
	pk := azcosmos.NewPartitionKeyString("p")
	_, err := c.CreateItem(ctx, pk, mustJSON(t, map[string]any{"id": "a", "pk": "p", "n": 1, "tags": []any{"x"}, "gone": 1, "obj": map[string]any{"k": 1}}), nil)
	require.NoError(t, err)

	ops := azcosmos.PatchOperations{}
	ops.AppendSet("/s", "v")
	ops.AppendAdd("/tags/-", "y")
	ops.AppendAdd("/tags/0", "w")
	ops.AppendReplace("/obj/k", 2)
	ops.AppendRemove("/gone")
	ops.AppendIncrement("/n", 5)
	ops.AppendIncrement("/fresh", 3)
	res, err := c.PatchItem(ctx, pk, "a", ops, &azcosmos.ItemOptions{EnableContentResponseOnWrite: true})
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(res.Value, &doc))
	require.Equal(t, "v", doc["s"])
	require.Equal(t, []any{"w", "x", "y"}, doc["tags"])
	require.Equal(t, map[string]any{"k": float64(2)}, doc["obj"])
	require.NotContains(t, doc, "gone")
	require.Equal(t, float64(6), doc["n"])
	require.Equal(t, float64(3), doc["fresh"])

	tests := []struct {
		name   string
		build  func(*azcosmos.PatchOperations)
		status int
	}{
		{"replace missing path", func(p *azcosmos.PatchOperations) { p.AppendReplace("/nope", 1) }, http.StatusBadRequest},
		{"remove missing path", func(p *azcosmos.PatchOperations) { p.AppendRemove("/nope") }, http.StatusBadRequest},
		{"change partition key", func(p *azcosmos.PatchOperations) { p.AppendSet("/pk", "other") }, http.StatusBadRequest},
		{"false condition", func(p *azcosmos.PatchOperations) { p.SetCondition("FROM c WHERE c.n = 100"); p.AppendSet("/s", "z") }, http.StatusPreconditionFailed},
		{"true condition", func(p *azcosmos.PatchOperations) { p.SetCondition("FROM c WHERE c.n = 6"); p.AppendSet("/s", "z") }, http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := azcosmos.PatchOperations{}
			tc.build(&p)
			res, err := c.PatchItem(ctx, pk, "a", p, nil)
			if tc.status == http.StatusOK {
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, res.RawResponse.StatusCode)
				return
			}
			require.Equal(t, tc.status, statusOf(err), "%v", err)
		})
	}
	stale := azcore.ETag(`"stale"`)
	p := azcosmos.PatchOperations{}
	p.AppendSet("/s", 1)
	_, err = c.PatchItem(ctx, pk, "a", p, &azcosmos.ItemOptions{IfMatchEtag: &stale})
	require.Equal(t, http.StatusPreconditionFailed, statusOf(err))
	_, err = c.PatchItem(ctx, pk, "missing", p, nil)
	require.Equal(t, http.StatusNotFound, statusOf(err))
}

func TestIDRulesAndSizeLimit(t *testing.T) {
	t.Parallel()
	srv, _, c := newContainer(t)
	ctx := context.Background()
	tests := []struct {
		name   string
		id     any
		status int
	}{
		{"plain", "ok", http.StatusCreated},
		{"1023 bytes", strings.Repeat("a", 1023), http.StatusCreated},
		{"1024 bytes", strings.Repeat("b", 1024), http.StatusBadRequest},
		{"empty", "", http.StatusBadRequest},
		{"number", 5, http.StatusBadRequest},
		{"slash accepted on create", "a/b", http.StatusCreated},
		{"trailing space accepted on create", "t ", http.StatusCreated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString("p"), mustJSON(t, map[string]any{"id": tc.id, "pk": "p"}), nil)
			if tc.status == http.StatusCreated {
				require.NoError(t, err)
			} else {
				require.Equal(t, tc.status, statusOf(err))
			}
		})
	}
	r := rawRequest(t, srv, http.MethodPost, "/dbs/db/colls/c/docs", "docs", "dbs/db/colls/c",
		map[string]string{"x-ms-documentdb-partitionkey": `["p"]`}, mustJSON(t, map[string]any{"pk": "p"}))
	require.Equal(t, http.StatusBadRequest, r.Status)
	_, msg := errorCode(t, r.Body)
	require.Contains(t, msg, "required properties - 'id; ' - are missing")

	// Unaddressable ids answer as on the service's routing gateway.
	_, err := c.ReadItem(ctx, azcosmos.NewPartitionKeyString("p"), "a/b", nil)
	require.Equal(t, http.StatusUnauthorized, statusOf(err))
	_, err = c.ReadItem(ctx, azcosmos.NewPartitionKeyString("p"), "t ", nil)
	require.Equal(t, http.StatusUnauthorized, statusOf(err))

	big := strings.Repeat("x", 2*1024*1024)
	_, err = c.CreateItem(ctx, azcosmos.NewPartitionKeyString("p"), mustJSON(t, map[string]any{"id": "big", "pk": "p", "v": big}), nil)
	require.Equal(t, http.StatusRequestEntityTooLarge, statusOf(err))
	require.Contains(t, err.Error(), "RequestEntityTooLarge")
}

func TestMalformedRequests(t *testing.T) {
	t.Parallel()
	srv, _, _ := newContainer(t)
	tests := []struct {
		name, method, path, rtype, link string
		headers                         map[string]string
		body                            string
		status                          int
	}{
		{"bad json", http.MethodPost, "/dbs/db/colls/c/docs", "docs", "dbs/db/colls/c", map[string]string{"x-ms-documentdb-partitionkey": `["p"]`}, `{"id":`, http.StatusBadRequest},
		{"array body", http.MethodPost, "/dbs/db/colls/c/docs", "docs", "dbs/db/colls/c", map[string]string{"x-ms-documentdb-partitionkey": `["p"]`}, `[1]`, http.StatusBadRequest},
		{"bad pk header", http.MethodPost, "/dbs/db/colls/c/docs", "docs", "dbs/db/colls/c", map[string]string{"x-ms-documentdb-partitionkey": `p`}, `{"id":"a","pk":"p"}`, http.StatusBadRequest},
		{"missing container", http.MethodGet, "/dbs/db/colls/nope/docs/a", "docs", "dbs/db/colls/nope/docs/a", map[string]string{"x-ms-documentdb-partitionkey": `["p"]`}, ``, http.StatusNotFound},
		{"bad query", http.MethodPost, "/dbs/db/colls/c/docs", "docs", "dbs/db/colls/c", map[string]string{"x-ms-documentdb-partitionkey": `["p"]`, "Content-Type": "application/query+json"}, `{"query":"SELEC"}`, http.StatusBadRequest},
		{"bad batch", http.MethodPost, "/dbs/db/colls/c/docs", "docs", "dbs/db/colls/c", map[string]string{"x-ms-documentdb-partitionkey": `["p"]`, "x-ms-cosmos-is-batch-request": "True"}, `{}`, http.StatusBadRequest},
		{"bad verb", http.MethodPatch, "/dbs/db", "dbs", "dbs/db", nil, ``, http.StatusMethodNotAllowed},
		{"unsupported resource", http.MethodGet, "/dbs/db/colls/c/sprocs", "sprocs", "dbs/db/colls/c", nil, ``, http.StatusBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := rawRequest(t, srv, tc.method, tc.path, tc.rtype, tc.link, tc.headers, []byte(tc.body))
			require.Equal(t, tc.status, r.Status, string(r.Body))
			code, _ := errorCode(t, r.Body)
			require.NotEmpty(t, code)
			require.NotEmpty(t, r.Header.Get("x-ms-activity-id"))
		})
	}
}
