package changefeed

import (
	"testing"

	"github.com/durafeed/durafeed/internal/epk"
	"github.com/stretchr/testify/require"
)

func TestTokenRoundTrip(t *testing.T) {
	t.Parallel()
	ps := []position{
		{rng: epk.Range{Min: "", Max: "10"}, etag: `"12"`},
		{rng: epk.Range{Min: "10", Max: "FF"}},
	}
	rid, got, err := decodeToken(encodeToken("rid1", ps))
	require.NoError(t, err)
	require.Equal(t, "rid1", rid)
	require.Equal(t, ps, got)

	// The SDK's own open-top form.
	_, got, err = decodeToken(`{"version":1,"resourceId":"r","continuation":[{"minInclusive":"","maxExclusive":"","continuationToken":"\"5\""}]}`)
	require.NoError(t, err)
	require.Equal(t, []position{{rng: epk.Range{Min: "", Max: "FF"}, etag: `"5"`}}, got)

	for _, bad := range []string{"", "x", `{"continuation":[]}`, `{"version":9,"continuation":[{}]}`} {
		_, _, err := decodeToken(bad)
		require.Error(t, err, bad)
	}
}

func TestClampGapsOverlaps(t *testing.T) {
	t.Parallel()
	r := func(a, b string) epk.Range { return epk.Range{Min: a, Max: b} }
	ps := []position{{rng: r("30", "50"), etag: "b"}, {rng: r("", "20"), etag: "a"}, {rng: r("60", "FF"), etag: "c"}}
	got := clampPositions(ps, r("10", "70"))
	require.Equal(t, []position{{rng: r("10", "20"), etag: "a"}, {rng: r("30", "50"), etag: "b"}, {rng: r("60", "70"), etag: "c"}}, got)
	require.Equal(t, []epk.Range{r("20", "30"), r("50", "60")}, gaps(got, r("10", "70")))
	require.Equal(t, []epk.Range{r("", "FF")}, gaps(nil, r("", "FF")))
	require.Empty(t, gaps([]position{{rng: r("", "FF")}}, r("", "FF")))

	over := removeOverlaps([]position{{rng: r("", "40"), etag: "a"}, {rng: r("20", "30")}, {rng: r("30", "60"), etag: "c"}})
	require.Equal(t, []position{{rng: r("", "40"), etag: "a"}, {rng: r("40", "60"), etag: "c"}}, over)
}

func TestLSNParsing(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{`"42"`: 42, `W/"7"`: 7, "0": 0} {
		n, ok := etagLSN(in)
		require.True(t, ok, in)
		require.Equal(t, want, n)
	}
	for _, in := range []string{"", "*", `"x"`} {
		_, ok := etagLSN(in)
		require.False(t, ok, in)
	}
	for in, want := range map[string]int64{"0:-1#42": 42, "3:1#99#1=98#2=97": 99, "1:17": 17, "0:-1#5,1:-1#6": 5} {
		n, ok := sessionLSN(in)
		require.True(t, ok, in)
		require.Equal(t, want, n)
	}
	for _, in := range []string{"", "nocolon", "0:x#y"} {
		_, ok := sessionLSN(in)
		require.False(t, ok, in)
	}
}

func TestIdleDelay(t *testing.T) {
	t.Parallel()
	o, err := Options{}.withDefaults()
	require.NoError(t, err)
	var got []int64
	for k := 1; k <= 10; k++ {
		got = append(got, idleDelay(&o, k).Milliseconds())
	}
	require.Equal(t, []int64{10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000}, got)
	o.ActiveDelay = 0
	require.Equal(t, int64(2), idleDelay(&o, 1).Milliseconds())
}
