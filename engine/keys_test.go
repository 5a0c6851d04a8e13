package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKeyEncoding: the encodings are a wire format between replicas of
// different versions, so they are pinned here; every key parses back as
// itself, whatever its instance or id holds.
func TestKeyEncoding(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		k    key
		wire string
	}{
		{key{kind: kindMessages, instance: "i"}, "wi"},
		{key{kind: kindLockExpiry, instance: "i"}, "li"},
		{key{kind: kindHanded, instance: "i"}, "hi"},
		{key{kind: kindWork, instance: "inst", id: "w:1:2"}, "4:instw:1:2"},
		{key{kind: kindArrival, instance: "with:colon", id: "m:1"}, "a10:with:colonm:1"},
		{key{kind: kindSettle, instance: "12:34", id: "w:1:2"}, "c5:12:34w:1:2"},
		{key{kind: kindSettle, instance: "ü", id: "w"}, "c2:üw"},
	} {
		require.Equal(t, tc.wire, tc.k.String())
		got, ok := parseKey(tc.wire, tc.k.kind)
		require.True(t, ok, tc.wire)
		require.Equal(t, tc.k, got)
	}
}

// TestParseKeyRefuses: a key parses only as a kind it was accepted as,
// and malformed keys parse as nothing.
func TestParseKeyRefuses(t *testing.T) {
	t.Parallel()
	settle := key{kind: kindSettle, instance: "i", id: "w"}.String()
	arrival := key{kind: kindArrival, instance: "i", id: "m"}.String()
	for _, tc := range []struct {
		s        string
		accepted []keyKind
	}{
		{"", []keyKind{kindWork, kindMessages, kindLockExpiry, kindArrival, kindSettle}},
		{"w", []keyKind{kindMessages}},
		{"c", []keyKind{kindSettle}},
		{"a", []keyKind{kindArrival}},
		{"c1:i", []keyKind{kindSettle}}, // no id
		{"c9:i", []keyKind{kindSettle}}, // length past the end
		{"a1:i", []keyKind{kindArrival}},
		{"x:iw", []keyKind{kindWork}},
		{"0:w", []keyKind{kindWork}}, // no instance
		{settle, []keyKind{kindMessages, kindArrival}},
		{arrival, []keyKind{kindMessages, kindSettle}},
		{orchKey("i"), []keyKind{kindSettle, kindArrival, kindLockExpiry}},
		{lockKey("i"), []keyKind{kindMessages, kindSettle}},
		{handKey("i"), []keyKind{kindMessages, kindLockExpiry}}, // a fetch's orchWakeup skips it
	} {
		_, ok := parseKey(tc.s, tc.accepted...)
		require.False(t, ok, "%q as %v", tc.s, tc.accepted)
	}
}
