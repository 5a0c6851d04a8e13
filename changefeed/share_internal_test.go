package changefeed

import (
	"encoding/json"
	"testing"

	"github.com/durafeed/durafeed/internal/epk"
	"github.com/stretchr/testify/require"
)

// TestPageDocKeys: a shared page computes each document's EPK from its
// top-level properties without decoding the rest; it must agree with the
// key the service (and cosmosemu) computes from the whole document.
func TestPageDocKeys(t *testing.T) {
	t.Parallel()
	docs := []string{
		`{"id":"a","pk":"tenant-1","_lsn":7}`,
		`{"id":"b","pk":12.5,"_lsn":8}`,
		`{"id":"c","pk":null,"_lsn":9}`,
		`{"id":"d","pk":true,"_lsn":10}`,
		`{"id":"e","_lsn":11}`,
		`{"id":"f","pk":{"x":1},"_lsn":12}`,
		`{"id":"g","pk":[1,2],"_lsn":13}`,
		`{"id":"h","a":{"b":"deep"},"pk":"x","_lsn":14}`,
		`{"id":"i","a":"not an object","pk":"x","_lsn":15}`,
		`{"id":"j","a":{"c":1},"pk":"x","_lsn":16}`,
	}
	defs := []struct {
		kind  epk.Kind
		paths []string
	}{
		{epk.Hash, []string{"/pk"}},
		{epk.MultiHash, []string{"/pk", "/a/b"}},
		{epk.MultiHash, []string{"/a/b", "/id"}},
	}
	for _, d := range defs {
		k := &keyDef{kind: d.kind, version: 2}
		for _, p := range d.paths {
			k.paths = append(k.paths, epk.SplitPath(p))
		}
		for i, raw := range docs {
			got, err := k.parse(json.RawMessage(raw))
			require.NoError(t, err, raw)
			var full map[string]any
			require.NoError(t, json.Unmarshal([]byte(raw), &full))
			want, err := epk.KeyOf(d.kind, 2, epk.Components(full, k.paths))
			require.NoError(t, err)
			require.Equal(t, want, got.epk, "%v: %s", d.paths, raw)
			require.Equal(t, int64(7+i), got.lsn)
		}
	}
	_, err := (&keyDef{kind: epk.Hash, version: 2, paths: [][]string{{"pk"}}}).parse(json.RawMessage(`{"id":"x","pk":"y"}`))
	require.Error(t, err, "a document without _lsn cannot be placed in a page")
}

// TestFromPage: what a shared page gives a sibling position.
func TestFromPage(t *testing.T) {
	t.Parallel()
	span := epk.Range{Min: "00", Max: "40"}
	left, right := epk.Range{Min: "00", Max: "20"}, epk.Range{Min: "20", Max: "40"}
	pg := &sharedPage{rng: span, from: 10, end: `"20"`, endLSN: 20, docs: []pageDoc{
		{raw: json.RawMessage(`1`), epk: "10", lsn: 11},
		{raw: json.RawMessage(`2`), epk: "30", lsn: 12},
		{raw: json.RawMessage(`3`), epk: "30", lsn: 18},
	}}
	tests := []struct {
		name string
		pos  position
		page func(*sharedPage)
		ok   bool
		docs []string
		etag string
		more bool
	}{
		{name: "from the page's start", pos: position{rng: right, etag: `"10"`}, ok: true, docs: []string{"2", "3"}, etag: `"20"`},
		{name: "past part of it", pos: position{rng: right, etag: `"15"`}, ok: true, docs: []string{"3"}, etag: `"20"`},
		{name: "its own range only", pos: position{rng: left, etag: `"10"`}, ok: true, docs: []string{"1"}, etag: `"20"`},
		{name: "past its end", pos: position{rng: right, etag: `"25"`}, ok: true, etag: `"25"`},
		{name: "behind its start", pos: position{rng: right, etag: `"9"`}},
		{name: "outside its span", pos: position{rng: epk.Range{Min: "30", Max: "50"}, etag: `"10"`}},
		{name: "full, ending before the position", pos: position{rng: right, etag: `"25"`}, page: func(p *sharedPage) { p.more = true }},
		{name: "full, ending after it", pos: position{rng: right, etag: `"15"`}, page: func(p *sharedPage) { p.more = true }, ok: true, docs: []string{"3"}, etag: `"20"`, more: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := *pg
			if tc.page != nil {
				tc.page(&p)
			}
			n, ok := etagLSN(tc.pos.etag)
			require.True(t, ok)
			res, ok := fromPage(&p, tc.pos, n)
			require.Equal(t, tc.ok, ok)
			if !ok {
				return
			}
			var docs []string
			for _, d := range res.docs {
				docs = append(docs, string(d))
			}
			require.Equal(t, tc.docs, docs)
			require.Equal(t, []position{{rng: tc.pos.rng, etag: tc.etag}}, res.pos)
			require.Equal(t, tc.more, res.more)
		})
	}
}
