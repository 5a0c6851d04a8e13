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

// TestIndexPlanMergesRanges: two one-sided ranges on one path joined by
// AND become the one range between their bounds, which holds for exactly
// the values the pair holds for; anything else stays an AND.
func TestIndexPlanMergesRanges(t *testing.T) {
	t.Parallel()
	params := map[string]any{"@lo": 3, "@hi": 7}
	tests := []struct {
		where  string
		merged bool
	}{
		{"c.s >= @lo AND c.s <= @hi", true},
		{"c.s < @hi AND c.s > @lo", true},
		{"(c.s >= @lo AND c.s <= @hi) AND c.t = 'q'", true},
		{"c.s >= @lo AND c.s >= @hi", false},
		{"c.s >= @lo AND c.u <= @hi", false},
		{"c.s >= @lo AND c.s <= 'z'", false},
		{"c.s >= @lo AND c.s = 5", false},
	}
	docs := []map[string]any{{"s": 2.0}, {"s": 3.0}, {"s": 5.0}, {"s": 7.0}, {"s": 8.0}, {"s": "4"}, {"s": nil}, {}, {"s": 5.0, "t": "q"}}
	for _, tc := range tests {
		t.Run(tc.where, func(t *testing.T) {
			q, err := Parse("SELECT * FROM c WHERE " + tc.where)
			require.NoError(t, err)
			pl := q.IndexPlan(params)
			require.NotNil(t, pl)
			var rng *IndexPlan
			switch {
			case pl.Op == IndexRange:
				rng = pl
			case pl.Op == IndexAnd && pl.Kids[0].Op == IndexRange && pl.Kids[0].HasLo && pl.Kids[0].HasHi:
				rng = pl.Kids[0]
			}
			require.Equal(t, tc.merged, rng != nil, "%+v", pl)
			// Every condition here is servable, so the plan holds exactly
			// where the WHERE clause does: the query's own evaluation is
			// the reference.
			for _, d := range docs {
				rows, err := q.Execute([]map[string]any{d}, params)
				require.NoError(t, err)
				require.Equal(t, len(rows) == 1, pl.Holds(d), "%v", d)
			}
		})
	}
}
