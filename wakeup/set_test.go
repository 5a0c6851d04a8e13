package wakeup

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSet(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		set     Set
		slots   []int
		str     string
		isRange bool
	}{
		{name: "empty", set: Set{}, str: "{}"},
		{name: "SetOf", set: SetOf(5, 1, 5, 300), slots: []int{1, 5, 300}, str: "{1,5,300}"},
		{name: "Range in one word", set: Range(3, 9), slots: []int{3, 4, 5, 6, 7, 8, 9}, str: "{3-9}", isRange: true},
		{name: "Range across words", set: Range(62, 65), slots: []int{62, 63, 64, 65}, str: "{62-65}", isRange: true},
		{name: "Range single", set: Range(64, 64), slots: []int{64}, str: "{64}", isRange: true},
		{name: "Range reversed is empty", set: Range(9, 3), str: "{}"},
		{name: "Range to the end", set: Range(MaxSlots-2, MaxSlots-1), slots: []int{MaxSlots - 2, MaxSlots - 1}, str: "{4094-4095}", isRange: true},
		{name: "union of blocks", set: Range(0, 1).Union(Range(10, 11)), slots: []int{0, 1, 10, 11}, str: "{0-1,10-11}"},
		{name: "intersect", set: Range(0, 10).Intersect(Range(8, 20)), slots: []int{8, 9, 10}, str: "{8-10}", isRange: true},
		{name: "difference", set: Range(0, 4).Difference(SetOf(2)), slots: []int{0, 1, 3, 4}, str: "{0-1,3-4}"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.slots, slices.Collect(tc.set.All()))
			require.Equal(t, len(tc.slots), tc.set.Len())
			require.Equal(t, len(tc.slots) == 0, tc.set.IsEmpty())
			require.Equal(t, tc.str, tc.set.String())
			require.Equal(t, tc.isRange, tc.set.IsRange())
			first, last, ok := tc.set.Bounds()
			require.Equal(t, len(tc.slots) > 0, ok)
			if ok {
				require.Equal(t, tc.slots[0], first)
				require.Equal(t, tc.slots[len(tc.slots)-1], last)
			}
			for _, sl := range tc.slots {
				require.True(t, tc.set.Contains(sl))
			}
		})
	}
}

func TestSetMutation(t *testing.T) {
	t.Parallel()
	var s Set
	s.Add(7)
	c := s // value semantics: the copy is independent
	c.Add(8)
	s.Remove(7)
	s.Remove(-1)
	s.Remove(MaxSlots)
	require.True(t, s.IsEmpty())
	require.Equal(t, SetOf(7, 8), c)
	require.False(t, c.Contains(-1))
	require.False(t, c.Contains(MaxSlots))
	require.Panics(t, func() { s.Add(MaxSlots) })
	require.Panics(t, func() { s.Add(-1) })
	require.Panics(t, func() { Range(-1, 3) })
	require.Equal(t, Range(0, 255), All(256))
}

func TestBlocks(t *testing.T) {
	t.Parallel()
	cases := []struct {
		slots, n int
		want     []Set
	}{
		{256, 1, []Set{Range(0, 255)}},
		{256, 4, []Set{Range(0, 63), Range(64, 127), Range(128, 191), Range(192, 255)}},
		{10, 3, []Set{Range(0, 2), Range(3, 5), Range(6, 9)}},
		{4, 9, []Set{SetOf(0), SetOf(1), SetOf(2), SetOf(3)}},
		{4, 0, []Set{Range(0, 3)}},
	}
	for _, tc := range cases {
		got := Blocks(tc.slots, tc.n)
		require.Equal(t, tc.want, got, "Blocks(%d, %d)", tc.slots, tc.n)
		var union Set
		for _, b := range got {
			require.True(t, b.IsRange())
			require.True(t, union.Intersect(b).IsEmpty(), "blocks overlap")
			union = union.Union(b)
		}
		require.Equal(t, All(tc.slots), union)
	}
	require.Panics(t, func() { Blocks(0, 1) })
	require.Panics(t, func() { Blocks(MaxSlots+1, 1) })
}
