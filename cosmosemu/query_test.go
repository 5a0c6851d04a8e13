package cosmosemu_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"
)

func collect(t *testing.T, pager interface {
	More() bool
	NextPage(context.Context) (azcosmos.QueryItemsResponse, error)
}) ([]map[string]any, int, error) {
	var out []map[string]any
	pages := 0
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			return nil, pages, err
		}
		pages++
		for _, it := range page.Items {
			var d map[string]any
			require.NoError(t, json.Unmarshal(it, &d))
			out = append(out, d)
		}
	}
	return out, pages, nil
}

func TestQueries(t *testing.T) {
	t.Parallel()
	_, _, c := newContainer(t)
	ctx := context.Background()
	for i := 0; i < 30; i++ {
		pk := "p" + strconv.Itoa(i%3)
		_, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString(pk), mustJSON(t, map[string]any{"id": strconv.Itoa(i), "pk": pk, "n": i}), nil)
		require.NoError(t, err)
	}
	no := false
	tests := []struct {
		name   string
		query  string
		pk     azcosmos.PartitionKey
		opts   *azcosmos.QueryOptions
		count  int
		status int
	}{
		{"single partition", "SELECT * FROM c", azcosmos.NewPartitionKeyString("p1"), nil, 10, 0},
		{"parameters", "SELECT * FROM c WHERE c.n >= @min", azcosmos.NewPartitionKeyString("p1"), &azcosmos.QueryOptions{QueryParameters: []azcosmos.QueryParameter{{Name: "@min", Value: 20}}}, 3, 0},
		{"order by single partition", "SELECT * FROM c ORDER BY c.n DESC", azcosmos.NewPartitionKeyString("p2"), &azcosmos.QueryOptions{PageSizeHint: 4}, 10, 0},
		{"aggregate single partition", "SELECT COUNT(1) AS n FROM c", azcosmos.NewPartitionKeyString("p0"), nil, 1, 0},
		{"cross partition", "SELECT c.id FROM c WHERE c.n < 12", azcosmos.NewPartitionKey(), &azcosmos.QueryOptions{PageSizeHint: 5}, 12, 0},
		{"pinned by where", "SELECT * FROM c WHERE c.pk = 'p0' ORDER BY c.n", azcosmos.NewPartitionKey(), nil, 10, 0},
		{"cross partition order by", "SELECT * FROM c ORDER BY c.n", azcosmos.NewPartitionKey(), nil, 0, http.StatusBadRequest},
		{"cross partition disabled", "SELECT * FROM c", azcosmos.NewPartitionKey(), &azcosmos.QueryOptions{EnableCrossPartitionQuery: &no}, 0, http.StatusBadRequest},
		{"syntax error", "SELEKT * FROM c", azcosmos.NewPartitionKeyString("p0"), nil, 0, http.StatusBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			docs, _, err := collect(t, c.NewQueryItemsPager(tc.query, tc.pk, tc.opts))
			if tc.status != 0 {
				require.Equal(t, tc.status, statusOf(err))
				return
			}
			require.NoError(t, err)
			require.Len(t, docs, tc.count)
		})
	}
	docs, _, err := collect(t, c.NewQueryItemsPager("SELECT * FROM c ORDER BY c.n DESC", azcosmos.NewPartitionKeyString("p2"), &azcosmos.QueryOptions{PageSizeHint: 3}))
	require.NoError(t, err)
	for i := 1; i < len(docs); i++ {
		require.Greater(t, docs[i-1]["n"], docs[i]["n"])
	}
	_, err = c.NewQueryItemsPager("SELECT * FROM c ORDER BY c.n", azcosmos.NewPartitionKey(), nil).NextPage(ctx)
	require.Contains(t, err.Error(), "cross partition query can not be directly served by the gateway")
}

// TestQueryPagingUnderConcurrentWrites pages through a container while
// writers insert, replace and delete other documents: every document that
// exists for the whole paging is returned exactly once.
func TestQueryPagingUnderConcurrentWrites(t *testing.T) {
	t.Parallel()
	_, _, c := newContainer(t)
	ctx := context.Background()
	const stable = 150
	for i := 0; i < stable; i++ {
		pk := "p" + strconv.Itoa(i%5)
		_, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString(pk), mustJSON(t, map[string]any{"id": "s" + strconv.Itoa(i), "pk": pk}), nil)
		require.NoError(t, err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				pk := "p" + strconv.Itoa(i%5)
				key := azcosmos.NewPartitionKeyString(pk)
				id := fmt.Sprintf("w%d-%d", w, i)
				_, _ = c.CreateItem(ctx, key, mustJSON(t, map[string]any{"id": id, "pk": pk}), nil)
				_, _ = c.UpsertItem(ctx, azcosmos.NewPartitionKeyString("p"+strconv.Itoa(i%5)), mustJSON(t, map[string]any{"id": "s" + strconv.Itoa((i*5+i%5)%stable), "pk": pk, "touched": i}), nil)
				if i%2 == 0 {
					_, _ = c.DeleteItem(ctx, key, id, nil)
				}
			}
		}(w)
	}
	for scope, pk := range []azcosmos.PartitionKey{azcosmos.NewPartitionKey(), azcosmos.NewPartitionKeyString("p3")} {
		docs, _, err := collect(t, c.NewQueryItemsPager("SELECT c.id FROM c", pk, &azcosmos.QueryOptions{PageSizeHint: 7}))
		require.NoError(t, err)
		counts := map[string]int{}
		for _, d := range docs {
			counts[d["id"].(string)]++
		}
		for id, n := range counts {
			require.Equal(t, 1, n, "document %s returned %d times", id, n)
		}
		for i := 0; i < stable; i++ {
			if scope == 1 && i%5 != 3 {
				continue
			}
			require.Equal(t, 1, counts["s"+strconv.Itoa(i)], "stable document s%d", i)
		}
	}
	stop.Store(true)
	wg.Wait()
}

func TestReadMany(t *testing.T) {
	t.Parallel()
	_, _, c := newContainer(t, "/tenant", "/user")
	ctx := context.Background()
	var idents []azcosmos.ItemIdentity
	for i := 0; i < 20; i++ {
		tenant, user := "t"+strconv.Itoa(i%4), "u"+strconv.Itoa(i)
		pk := azcosmos.NewPartitionKeyString(tenant).AppendString(user)
		_, err := c.CreateItem(ctx, pk, mustJSON(t, map[string]any{"id": strconv.Itoa(i), "tenant": tenant, "user": user}), nil)
		require.NoError(t, err)
		idents = append(idents, azcosmos.ItemIdentity{ID: strconv.Itoa(i), PartitionKey: pk})
	}
	idents = append(idents, azcosmos.ItemIdentity{ID: "missing", PartitionKey: azcosmos.NewPartitionKeyString("t0").AppendString("u0")})
	res, err := c.ReadManyItems(ctx, idents, nil)
	require.NoError(t, err)
	require.Len(t, res.Items, 20)
}
