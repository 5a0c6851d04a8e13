package query

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestIndexPlan(t *testing.T) {
	t.Parallel()
	params := map[string]any{"@now": 5, "@ids": []any{"a", "b"}, "@obj": map[string]any{}}
	tests := []struct {
		where string
		doc   map[string]any
		plan  bool // a plan is derived
		holds bool // the document satisfies it
	}{
		{"c.type = 'q' AND c.visibleAt <= @now", map[string]any{"type": "q", "visibleAt": 5.0}, true, true},
		{"c.type = 'q' AND c.visibleAt < @now", map[string]any{"type": "q", "visibleAt": 5.0}, true, false},
		{"@now >= c.visibleAt", map[string]any{"visibleAt": "5"}, true, false},
		{"(c.type = 'a' OR c.type = 'b') AND NOT c.x", map[string]any{"type": "b"}, true, true},
		{"c.type = 'a' OR IS_DEFINED(c.x)", nil, false, false},
		{"c.n BETWEEN 1 AND 'z'", nil, false, false},
		{"c.n IN (1, 2)", map[string]any{"n": 2.0}, true, true},
		{"ARRAY_CONTAINS(@ids, c.p.q)", map[string]any{"p": map[string]any{"q": "b"}}, true, true},
		{"c.n = @obj", nil, false, false},
		{"c.n = @missing", nil, false, false},
		{"c.n = -0", map[string]any{"n": 0.0}, true, true},
		{"c.n <= null", map[string]any{"n": nil}, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.where, func(t *testing.T) {
			q, err := Parse("SELECT * FROM c WHERE " + tc.where)
			require.NoError(t, err)
			pl := q.IndexPlan(params)
			require.Equal(t, tc.plan, pl != nil)
			if pl != nil {
				require.Equal(t, tc.holds, pl.Holds(tc.doc))
			}
		})
	}
}
