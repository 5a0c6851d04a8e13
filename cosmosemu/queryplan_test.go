package cosmosemu_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/stretchr/testify/require"
)

// allFeatures is the list the .NET SDK sends in
// x-ms-cosmos-supported-query-features (less the vector and hybrid ones).
const allFeatures = "Aggregate, CompositeAggregate, Distinct, GroupBy, MultipleOrderBy, MultipleAggregates, OffsetAndLimit, OrderBy, Top, NonValueAggregate, DCount, NonStreamingOrderBy, CountIf"

type planInfo struct {
	Version   int `json:"partitionedQueryExecutionInfoVersion"`
	QueryInfo struct {
		DistinctType                string             `json:"distinctType"`
		Top                         *int               `json:"top"`
		Offset                      *int               `json:"offset"`
		Limit                       *int               `json:"limit"`
		OrderBy                     []string           `json:"orderBy"`
		OrderByExpressions          []string           `json:"orderByExpressions"`
		GroupByExpressions          []string           `json:"groupByExpressions"`
		GroupByAliases              []string           `json:"groupByAliases"`
		GroupByAliasToAggregateType map[string]*string `json:"groupByAliasToAggregateType"`
		Aggregates                  []string           `json:"aggregates"`
		RewrittenQuery              string             `json:"rewrittenQuery"`
		HasSelectValue              bool               `json:"hasSelectValue"`
	} `json:"queryInfo"`
	QueryRanges []struct {
		Min          string `json:"min"`
		Max          string `json:"max"`
		MinInclusive bool   `json:"isMinInclusive"`
		MaxInclusive bool   `json:"isMaxInclusive"`
	} `json:"queryRanges"`
}

// planRequest asks for the query plan as the Python and JavaScript SDKs do.
func planRequest(tb testing.TB, srv *cosmosemu.Server, query, features string) rawResponse {
	tb.Helper()
	return rawRequest(tb, srv, http.MethodPost, "/dbs/db/colls/c/docs", "docs", "dbs/db/colls/c", map[string]string{
		"Content-Type":                               "application/query+json",
		"x-ms-documentdb-isquery":                    "True",
		"x-ms-cosmos-is-query-plan-request":          "True",
		"x-ms-cosmos-supported-query-features":       features,
		"x-ms-cosmos-query-version":                  "1.4",
		"x-ms-documentdb-query-enablecrosspartition": "True",
	}, mustJSON(tb, map[string]any{"query": query, "parameters": []any{}}))
}

func decodePlan(tb testing.TB, r rawResponse) planInfo {
	tb.Helper()
	require.Equal(tb, http.StatusOK, r.Status, string(r.Body))
	var p planInfo
	require.NoError(tb, json.Unmarshal(r.Body, &p), string(r.Body))
	require.Equal(tb, 2, p.Version)
	return p
}

func intp(n int) *int { return &n }

func TestQueryPlan(t *testing.T) {
	t.Parallel()
	srv, _, _ := newContainer(t)
	full := `[{"min":"","max":"FF","isMinInclusive":true,"isMaxInclusive":false}]`
	tests := []struct {
		name      string
		query     string
		distinct  string
		top       *int
		offset    *int
		limit     *int
		orderBy   []string
		orderExpr []string
		groupBy   []string
		aggs      []string
		aliases   map[string]string // alias -> aggregate ("" for none)
		rewritten string
		value     bool
	}{
		{name: "order by", query: "SELECT * FROM c ORDER BY c.n DESC, c.id",
			orderBy: []string{"Descending", "Ascending"}, orderExpr: []string{"c.n", "c.id"},
			rewritten: `SELECT c._rid, [{"item": c.n}, {"item": c.id}] AS orderByItems, c AS payload FROM c WHERE ({documentdb-formattableorderbyquery-filter}) ORDER BY c.n DESC, c.id`},
		{name: "order by with a filter and a projection", query: "SELECT c.id, c.n FROM c WHERE c.n > 2 ORDER BY c.n",
			orderBy: []string{"Ascending"}, orderExpr: []string{"c.n"},
			rewritten: `SELECT c._rid, [{"item": c.n}] AS orderByItems, {"id": c.id, "n": c.n} AS payload FROM c WHERE ((c.n > 2) AND ({documentdb-formattableorderbyquery-filter})) ORDER BY c.n`},
		{name: "count", query: "SELECT VALUE COUNT(1) FROM c", aggs: []string{"Count"}, value: true,
			rewritten: `SELECT VALUE [{"item": COUNT(1)}] FROM c`},
		{name: "sum", query: "SELECT VALUE SUM(c.n) FROM c WHERE c.grp = 'a'", aggs: []string{"Sum"}, value: true,
			rewritten: `SELECT VALUE [{"item": SUM(c.n)}] FROM c WHERE (c.grp = "a")`},
		{name: "max", query: "SELECT VALUE MAX(c.n) FROM c", aggs: []string{"Max"}, value: true,
			rewritten: `SELECT VALUE [{"item": MAX(c.n), "item2": {"max": MAX(c.n), "count": COUNT(c.n)}}] FROM c`},
		{name: "non-value aggregate", query: "SELECT COUNT(1) AS total FROM c", aliases: map[string]string{"total": "Count"},
			rewritten: `SELECT {"total": {"item": COUNT(1)}} AS payload FROM c`},
		{name: "top", query: "SELECT TOP 3 * FROM c", top: intp(3)},
		{name: "offset limit", query: "SELECT * FROM c OFFSET 2 LIMIT 3", offset: intp(2), limit: intp(3),
			rewritten: `SELECT * FROM c OFFSET 0 LIMIT 5`},
		{name: "distinct", query: "SELECT DISTINCT VALUE c.grp FROM c", distinct: "Unordered", value: true},
		{name: "group by", query: "SELECT c.grp, COUNT(1) AS n FROM c GROUP BY c.grp", groupBy: []string{"c.grp"},
			aliases:   map[string]string{"grp": "", "n": "Count"},
			rewritten: `SELECT [{"item": c.grp}] AS groupByItems, {"grp": c.grp, "n": {"item": COUNT(1)}} AS payload FROM c GROUP BY c.grp`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := decodePlan(t, planRequest(t, srv, tc.query, allFeatures))
			qi := p.QueryInfo
			if tc.distinct == "" {
				tc.distinct = "None"
			}
			require.Equal(t, tc.distinct, qi.DistinctType)
			require.Equal(t, tc.top, qi.Top)
			require.Equal(t, tc.offset, qi.Offset)
			require.Equal(t, tc.limit, qi.Limit)
			require.Equal(t, append([]string{}, tc.orderBy...), qi.OrderBy)
			require.Equal(t, append([]string{}, tc.orderExpr...), qi.OrderByExpressions)
			require.Equal(t, append([]string{}, tc.groupBy...), qi.GroupByExpressions)
			require.Equal(t, append([]string{}, tc.aggs...), qi.Aggregates)
			require.Equal(t, tc.rewritten, qi.RewrittenQuery)
			require.Equal(t, tc.value, qi.HasSelectValue)
			require.Len(t, qi.GroupByAliasToAggregateType, len(tc.aliases))
			for alias, agg := range tc.aliases {
				got, ok := qi.GroupByAliasToAggregateType[alias]
				require.True(t, ok, alias)
				if agg == "" {
					require.Nil(t, got, alias)
				} else {
					require.Equal(t, agg, *got, alias)
				}
			}
			require.JSONEq(t, full, string(mustJSON(t, p.QueryRanges)))
		})
	}

	t.Run("partition key filter gives the key's EPK point", func(t *testing.T) {
		p := decodePlan(t, planRequest(t, srv, "SELECT * FROM c WHERE c.pk = 'k1' ORDER BY c.n", allFeatures))
		e := keyEPK(t, "k1")
		require.Len(t, p.QueryRanges, 1)
		require.Equal(t, e, p.QueryRanges[0].Min)
		require.Equal(t, e, p.QueryRanges[0].Max)
		require.True(t, p.QueryRanges[0].MinInclusive)
		require.True(t, p.QueryRanges[0].MaxInclusive)
	})

	t.Run("a feature the client does not support answers 400", func(t *testing.T) {
		for _, tc := range []struct{ query, features, missing string }{
			{"SELECT * FROM c ORDER BY c.n", "Aggregate, Distinct", "OrderBy"},
			{"SELECT VALUE COUNT(1) FROM c", "", "Aggregate"},
			{"SELECT * FROM c ORDER BY c.n, c.id", "OrderBy", "MultipleOrderBy"},
			{"SELECT c.grp, COUNT(1) AS n FROM c GROUP BY c.grp", "Aggregate, GroupBy", "NonValueAggregate"},
		} {
			r := planRequest(t, srv, tc.query, tc.features)
			require.Equal(t, http.StatusBadRequest, r.Status, tc.query)
			_, msg := errorCode(t, r.Body)
			require.Contains(t, msg, "Query contains 1 or more unsupported features.", tc.query)
			require.Contains(t, msg, "Query contained "+tc.missing+", which the calling client does not support.", tc.query)
		}
	})
}

// runOnRange runs query on one range as the SDKs do once they hold a plan,
// following continuations, and returns the raw result rows.
func runOnRange(tb testing.TB, srv *cosmosemu.Server, query, rangeID string) []json.RawMessage {
	tb.Helper()
	var out []json.RawMessage
	cont := ""
	for {
		h := map[string]string{
			"Content-Type": "application/query+json", "x-ms-documentdb-isquery": "True",
			"x-ms-documentdb-query-enablecrosspartition": "True",
			"x-ms-documentdb-partitionkeyrangeid":        rangeID,
			"x-ms-max-item-count":                        "3",
			"x-ms-continuation":                          cont,
		}
		r := rawRequest(tb, srv, http.MethodPost, "/dbs/db/colls/c/docs", "docs", "dbs/db/colls/c", h, mustJSON(tb, map[string]any{"query": query}))
		require.Equal(tb, http.StatusOK, r.Status, "%s: %s", query, string(r.Body))
		var page struct {
			Documents []json.RawMessage `json:"Documents"`
		}
		require.NoError(tb, json.Unmarshal(r.Body, &page))
		out = append(out, page.Documents...)
		if cont = r.Header.Get("x-ms-continuation"); cont == "" {
			return out
		}
	}
}

// mergePlan runs a plan over every range and merges the partial results the
// way the SDKs' query pipelines do, for the shapes the test uses (numbers and
// strings as ORDER BY keys; COUNT, SUM, MIN, MAX, AVG; GROUP BY with COUNT).
func mergePlan(tb testing.TB, srv *cosmosemu.Server, ranges []cosmosemu.PartitionKeyRange, query string, p planInfo) []any {
	tb.Helper()
	qi := p.QueryInfo
	text := query
	if qi.RewrittenQuery != "" {
		text = strings.ReplaceAll(qi.RewrittenQuery, "{documentdb-formattableorderbyquery-filter}", "true")
	}
	var rows []any
	for _, r := range ranges {
		for _, raw := range runOnRange(tb, srv, text, r.ID) {
			var v any
			require.NoError(tb, json.Unmarshal(raw, &v))
			rows = append(rows, v)
		}
	}
	less := func(a, b any) int {
		switch x := a.(type) {
		case float64:
			y := b.(float64)
			if x < y {
				return -1
			} else if x > y {
				return 1
			}
		case string:
			return strings.Compare(x, b.(string))
		}
		return 0
	}
	var out []any
	switch {
	case len(qi.OrderBy) > 0:
		sort.SliceStable(rows, func(i, j int) bool {
			a := rows[i].(map[string]any)["orderByItems"].([]any)
			b := rows[j].(map[string]any)["orderByItems"].([]any)
			for k, dir := range qi.OrderBy {
				c := less(a[k].(map[string]any)["item"], b[k].(map[string]any)["item"])
				if dir == "Descending" {
					c = -c
				}
				if c != 0 {
					return c < 0
				}
			}
			return false
		})
		for _, r := range rows {
			out = append(out, r.(map[string]any)["payload"])
		}
	case len(qi.Aggregates) > 0 && len(qi.GroupByExpressions) == 0:
		var acc, cnt float64
		seen := false
		for _, r := range rows {
			item, ok := r.([]any)[0].(map[string]any)["item"]
			if !ok {
				continue
			}
			switch qi.Aggregates[0] {
			case "Count", "Sum":
				acc += item.(float64)
			case "Average":
				acc += item.(map[string]any)["sum"].(float64)
				cnt += item.(map[string]any)["count"].(float64)
			case "Max":
				if !seen || item.(float64) > acc {
					acc = item.(float64)
				}
			case "Min":
				if !seen || item.(float64) < acc {
					acc = item.(float64)
				}
			}
			seen = true
		}
		if qi.Aggregates[0] == "Average" {
			acc /= cnt
		}
		out = []any{acc}
	case len(qi.GroupByExpressions) > 0:
		groups := map[string]map[string]any{}
		var order []string
		for _, r := range rows {
			m := r.(map[string]any)
			key := string(mustJSON(tb, m["groupByItems"]))
			payload := m["payload"].(map[string]any)
			g, ok := groups[key]
			if !ok {
				g = map[string]any{}
				groups[key] = g
				order = append(order, key)
			}
			for alias, agg := range qi.GroupByAliasToAggregateType {
				if agg == nil {
					g[alias] = payload[alias]
					continue
				}
				require.Equal(tb, "Count", *agg)
				prev, _ := g[alias].(float64)
				g[alias] = prev + payload[alias].(map[string]any)["item"].(float64)
			}
		}
		for _, k := range order {
			out = append(out, groups[k])
		}
	case qi.DistinctType != "None":
		seen := map[string]bool{}
		for _, r := range rows {
			k := string(mustJSON(tb, r))
			if !seen[k] {
				seen[k] = true
				out = append(out, r)
			}
		}
	default:
		out = rows
	}
	if qi.Offset != nil {
		off := min(*qi.Offset, len(out))
		out = out[off:]
	}
	if qi.Limit != nil && *qi.Limit < len(out) {
		out = out[:*qi.Limit]
	}
	if qi.Top != nil && *qi.Top < len(out) {
		out = out[:*qi.Top]
	}
	return out
}

// TestQueryPlanEndToEnd sends the plan request, runs the rewritten query on
// every range as an SDK would, merges, and compares with the same query on a
// container with one range (which the emulator answers directly).
func TestQueryPlanEndToEnd(t *testing.T) {
	t.Parallel()
	srv, _, c := newContainer(t)
	_, _, one := newContainerWith(t, cosmosemu.Options{PartitionCount: 1})
	ctx := context.Background()
	for i := 0; i < 40; i++ {
		doc := map[string]any{"id": fmt.Sprintf("d%02d", i), "pk": "p" + strconv.Itoa(i%7), "n": (i * 37) % 23, "grp": string(rune('a' + i%4))}
		for _, cc := range []*azcosmos.ContainerClient{c, one} {
			_, err := cc.CreateItem(ctx, azcosmos.NewPartitionKeyString(doc["pk"].(string)), mustJSON(t, doc), nil)
			require.NoError(t, err)
		}
	}
	ranges, err := srv.PartitionKeyRanges("db", "c")
	require.NoError(t, err)
	require.Greater(t, len(ranges), 1)

	tests := []struct {
		query     string
		unordered bool // compare as sets (DISTINCT, GROUP BY, TOP without ORDER BY)
		countOnly bool
	}{
		// One ORDER BY key: two need a composite index (refused as on Azure).
		{query: "SELECT * FROM c ORDER BY c.id DESC"},
		{query: "SELECT c.id, c.n FROM c WHERE c.n > 5 ORDER BY c.id"},
		{query: "SELECT VALUE c.n FROM c ORDER BY c.n DESC"},
		{query: "SELECT TOP 5 c.id FROM c ORDER BY c.id"},
		{query: "SELECT c.id FROM c ORDER BY c.id DESC OFFSET 3 LIMIT 4"},
		{query: "SELECT VALUE COUNT(1) FROM c"},
		{query: "SELECT VALUE SUM(c.n) FROM c WHERE c.grp = 'b'"},
		{query: "SELECT VALUE MAX(c.n) FROM c"},
		{query: "SELECT VALUE MIN(c.n) FROM c"},
		{query: "SELECT VALUE AVG(c.n) FROM c"},
		{query: "SELECT DISTINCT VALUE c.grp FROM c", unordered: true},
		{query: "SELECT c.grp, COUNT(1) AS n FROM c GROUP BY c.grp", unordered: true},
		{query: "SELECT TOP 6 * FROM c", countOnly: true},
		{query: "SELECT * FROM c OFFSET 5 LIMIT 7", countOnly: true},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			p := decodePlan(t, planRequest(t, srv, tc.query, allFeatures))
			got := mergePlan(t, srv, ranges, tc.query, p)
			var want []any
			pager := one.NewQueryItemsPager(tc.query, azcosmos.NewPartitionKey(), nil)
			for pager.More() {
				page, err := pager.NextPage(ctx)
				require.NoError(t, err)
				for _, it := range page.Items {
					var v any
					require.NoError(t, json.Unmarshal(it, &v))
					want = append(want, v)
				}
			}
			// System properties differ between the two servers.
			for _, rows := range [][]any{got, want} {
				for _, r := range rows {
					if m, ok := r.(map[string]any); ok {
						for k := range m {
							if strings.HasPrefix(k, "_") {
								delete(m, k)
							}
						}
					}
				}
			}
			switch {
			case tc.countOnly:
				require.Len(t, got, len(want))
			case tc.unordered:
				require.ElementsMatch(t, want, got)
			default:
				require.Equal(t, want, got)
			}
		})
	}
}
