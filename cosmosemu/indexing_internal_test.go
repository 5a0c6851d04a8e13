package cosmosemu

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func policyOf(t *testing.T, js string) *indexPolicy {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(js), &m))
	return parseIndexPolicy(map[string]any{"indexingPolicy": m})
}

func TestIndexedPathResolution(t *testing.T) {
	t.Parallel()
	ip := policyOf(t, `{"indexingMode":"consistent",
		"includedPaths":[{"path":"/a/?"},{"path":"/food/ingredients/nutrition/*"},{"path":"/arr/[]/x/?"},{"path":"/\"odd-name\"/?"},{"path":"/b/c/?"},{"path":"/tie/?"}],
		"excludedPaths":[{"path":"/*"},{"path":"/food/ingredients/*"},{"path":"/a/*"},{"path":"/b/*"},{"path":"/tie/?"}]}`)
	for path, want := range map[string]bool{
		"id":                              true, // always indexed
		"_ts":                             true,
		"a":                               true, // "/a/?" beats "/a/*"
		"a/x":                             false,
		"food":                            false,
		"food/ingredients":                false,
		"food/ingredients/salt":           false,
		"food/ingredients/nutrition":      true,
		"food/ingredients/nutrition/kcal": true,
		"arr/[]/x":                        true,
		"arr/[]/y":                        false,
		"arr/[]":                          false,
		"odd-name":                        true,
		"b":                               false,
		"b/c":                             true, // deeper beats "/b/*"
		"b/d":                             false,
		"tie":                             false, // same path in both lists
		"other":                           false,
	} {
		require.Equal(t, want, ip.indexed(strings.Split(path, "/")), path)
	}
	require.False(t, ip.indexed(nil), "root")

	def := parseIndexPolicy(containerProps(map[string]any{}))
	require.True(t, def.indexed([]string{"x", "y"}))
	require.False(t, def.indexed([]string{"_etag"}))
	require.True(t, def.indexed(nil))

	empty := policyOf(t, `{"indexingMode":"consistent"}`)
	require.True(t, empty.indexed([]string{"x"}))
	legacy := policyOf(t, `{"includedPaths":[{"path":"/"}],"excludedPaths":[{"path":"/metaData/*"}]}`)
	require.True(t, legacy.indexed([]string{"x"}))
	require.False(t, legacy.indexed([]string{"metaData"}))
	require.True(t, policyOf(t, `{"indexingMode":"None"}`).none)
}

func TestSplitPolicyPath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]string{
		"/a":       {"a"},
		"/a/b":     {"a", "b"},
		`/"a/b"/c`: {"a/b", "c"},
		`/"q\"x"`:  {`q"x`},
		"/a/[]/b":  {"a", "[]", "b"},
		`/"_etag"`: {"_etag"},
	} {
		got, ok := splitPolicyPath(in)
		require.True(t, ok, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "a", "/a/", "//a", `/"a`, `/"a"b`} {
		_, ok := splitPolicyPath(in)
		require.False(t, ok, in)
	}
}
