package query

import (
	"encoding/json"
	"testing"
)

// FuzzParse checks that no query text makes Parse, Execute or Filter panic,
// and that successful executions produce JSON-encodable results.
func FuzzParse(f *testing.F) {
	seeds := []string{
		"SELECT * FROM c",
		"SELECT c.id, c.instanceId, c._etag FROM c WHERE c.type = 'orch_queue' AND c.visibleAt <= @now AND (NOT IS_DEFINED(c.lockedUntil) OR c.lockedUntil = null OR c.lockedUntil <= @now) AND c.dispatchSlot IN (1,2,3)",
		"SELECT DISTINCT VALUE c.executionId FROM c WHERE c.instanceId = @i AND c.type = 'history'",
		"SELECT * FROM c WHERE c.instanceId = @i AND c.type = 'history' AND c.executionId = @e ORDER BY c.eventId",
		"SELECT VALUE COUNT(1) FROM c WHERE c.type = 'instance'",
		"SELECT TOP 2 c.a, COUNT(1) AS n FROM c GROUP BY c.a",
		"SELECT VALUE {\"a\": [c.x, 1], b: c['y'][0]} FROM c JOIN t IN c.tags WHERE t LIKE '%x_' ESCAPE '!'",
		"SELECT * FROM c WHERE c.a BETWEEN 1 AND 5 ? c.b ?? 2 : -c.c % 3 || 'x' & 1 << 2",
		"SELECT VALUE SUBSTRING(c.s, @n, 2) FROM c OFFSET @n LIMIT 10",
		"SELECT * FROM c ORDER BY c.a DESC, c.b",
		"SELECT VALUE '\\u00e9\\ud83d' FROM c IN c.tags",
		"select value 0x1f -- comment",
	}
	for _, s := range seeds {
		f.Add(s)
	}
	docs := []map[string]any{
		{"id": "1", "a": 1.0, "s": "hello", "tags": []any{"x", 2.0}, "o": map[string]any{"k": nil}},
		{"id": "2", "a": "x", "b": true, "y": []any{[]any{}}},
		{"id": "3"},
	}
	f.Fuzz(func(t *testing.T, text string) {
		q, err := Parse(text)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("non-*Error error %T", err)
			}
			return
		}
		params := map[string]any{}
		for i, p := range q.Parameters() {
			params[p] = []any{float64(i), "s", nil, true, map[string]any{"k": 1.0}}[i%5]
		}
		res, err := q.Execute(docs, params)
		if err == nil {
			if _, err := json.Marshal(res); err != nil {
				t.Fatalf("unencodable result: %v", err)
			}
		}
		_, _ = q.Filter(docs[0], params)
		_, _ = q.PartitionKeyFilter([]string{"/a", "/b/c"}, params)
	})
}
