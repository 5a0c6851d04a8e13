package query

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFilterPaths(t *testing.T) {
	t.Parallel()
	tests := []struct {
		query string
		want  [][]string
	}{
		{"SELECT * FROM c", nil},
		{"SELECT c.a, c.b.x FROM c WHERE c.id = 'x'", [][]string{{"id"}}},
		{"SELECT * FROM c WHERE c.a = 1 AND (c.b.x > 2 OR c.a < 0)", [][]string{{"a"}, {"b", "x"}}},
		{"SELECT * FROM c WHERE IS_DEFINED(c.p) AND c.p.at <= @cut", [][]string{{"p"}, {"p", "at"}}},
		{"SELECT * FROM c WHERE ARRAY_CONTAINS(@ids, c['parent-id'])", [][]string{{"parent-id"}}},
		{"SELECT * FROM c WHERE ARRAY_CONTAINS(c.tags, c.t) AND array_contains(c.x.y, 1)", [][]string{{"tags", ArrayElement}, {"t"}, {"x", "y", ArrayElement}}},
		{"SELECT * FROM c WHERE STARTSWITH(LOWER(c.name), 'a')", [][]string{{"name"}}},
		{"SELECT * FROM c WHERE c.flag", [][]string{{"flag"}}},
		{"SELECT * FROM c WHERE c.n BETWEEN 1 AND c.max", [][]string{{"n"}, {"max"}}},
		{"SELECT * FROM c WHERE c.s LIKE 'a%' OR c.t IN ('x', 'y')", [][]string{{"s"}, {"t"}}},
		{"SELECT * FROM c WHERE c.arr[0].x = 1", [][]string{{"arr", ArrayElement, "x"}}},
		{"SELECT * FROM c WHERE c.m[@k] = 1", [][]string{{"m"}}},
		{"SELECT * FROM c WHERE true", nil},
		{"SELECT t FROM c JOIN t IN c.tags WHERE t.name = 'x'", [][]string{{"tags", ArrayElement, "name"}}},
		{"SELECT * FROM root r WHERE r.a = 1", [][]string{{"a"}}},
		{"SELECT VALUE x FROM x IN c.items WHERE x.k = 1", [][]string{{"items", ArrayElement, "k"}}},
		{"SELECT * FROM c ORDER BY c.a", nil},
	}
	for _, tt := range tests {
		q, err := Parse(tt.query)
		require.NoError(t, err, tt.query)
		require.Equal(t, tt.want, q.FilterPaths(), tt.query)
	}
}

func TestOrderByPaths(t *testing.T) {
	t.Parallel()
	q, err := Parse("SELECT * FROM c WHERE c.x = 1 ORDER BY c.a, c.b['c'] DESC, c.n + 1")
	require.NoError(t, err)
	require.Equal(t, []OrderKey{{Path: []string{"a"}}, {Path: []string{"b", "c"}, Desc: true}, {}}, q.OrderBy())
	q, err = Parse("SELECT * FROM c")
	require.NoError(t, err)
	require.Nil(t, q.OrderBy())
}
