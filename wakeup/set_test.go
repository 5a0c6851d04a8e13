package wakeup

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/slots"
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

func TestBlockSet(t *testing.T) {
	t.Parallel()
	require.Equal(t, []Set{Range(0, 63), Range(64, 127), Range(128, 191), Range(192, 255)}, blocks(4))
	require.Equal(t, []Set{All(slots.Count)}, blocks(1))
	var union Set
	for _, b := range blocks(7) {
		require.True(t, b.IsRange())
		require.True(t, union.Intersect(b).IsEmpty(), "blocks overlap")
		union = union.Union(b)
	}
	require.Equal(t, All(slots.Count), union)
}

// blocks is the layout's split into n blocks, as sets.
func blocks(n int) []Set {
	var out []Set
	for _, b := range slots.Split(n) {
		out = append(out, BlockSet(b))
	}
	return out
}
