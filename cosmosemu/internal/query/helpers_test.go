package query

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// docsOf decodes a JSON array of documents the way the emulator stores them.
func docsOf(t testing.TB, js string) []map[string]any {
	t.Helper()
	var docs []map[string]any
	require.NoError(t, json.Unmarshal([]byte(js), &docs))
	return docs
}

// run parses and executes a query and returns the results re-encoded as JSON
// text, which makes expectations easy to write.
func run(t testing.TB, q string, docs []map[string]any, params map[string]any) string {
	t.Helper()
	pq, err := Parse(q)
	require.NoError(t, err, q)
	res, err := pq.Execute(docs, params)
	require.NoError(t, err, q)
	b, err := json.Marshal(res)
	require.NoError(t, err, q)
	return string(b)
}

// ids returns the "id" of every result document.
func ids(t testing.TB, q string, docs []map[string]any, params map[string]any) []string {
	t.Helper()
	pq, err := Parse(q)
	require.NoError(t, err, q)
	res, err := pq.Execute(docs, params)
	require.NoError(t, err, q)
	out := []string{}
	for _, r := range res {
		m, ok := r.(map[string]any)
		require.True(t, ok, "result is not an object: %#v", r)
		out = append(out, m["id"].(string))
	}
	return out
}

// queryErr parses (and, if that succeeds, executes) q and returns the *Error.
func queryErr(t testing.TB, q string, params map[string]any) *Error {
	t.Helper()
	pq, err := Parse(q)
	if err == nil {
		_, err = pq.Execute(nil, params)
	}
	require.Error(t, err, q)
	var qe *Error
	require.ErrorAs(t, err, &qe, q)
	return qe
}
