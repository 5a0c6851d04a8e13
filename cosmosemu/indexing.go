package cosmosemu

import (
	"net/http"
	"slices"
	"strings"

	"github.com/durafeed/durafeed/cosmosemu/internal/query"
)

// Indexing policy enforcement
//
// The service serves document queries from the index, so it refuses the
// ones the container's indexing policy cannot serve. This file reads the
// stored policy and applies these rules (documented in doc.go):
//
//   - Consistent (or lazy) mode: every document path the WHERE clause reads
//     (query.FilterPaths: comparisons, IN, BETWEEN, LIKE, function
//     arguments such as IS_DEFINED, bare booleans; never SELECT paths) must
//     be indexed, else 400 msgExcludedFilter, unless the request allows a
//     scan (x-ms-documentdb-query-enable-scan, or the
//     x-ms-documentdb-force-query-scan the Go SDK sends for
//     QueryOptions.EnableScanInQuery). /id and /_ts are always indexed.
//   - A single ORDER BY key must be indexed, else 400 msgOrderByExcluded;
//     two or more keys need a composite index with the same paths in the
//     same sequence and either the same direction on every path or the
//     opposite one on every path, else 400 msgNoCompositeIndex. A scan
//     does not help ORDER BY, which is served in index order.
//   - None mode: nothing is indexed, id and _ts included, so a query with a
//     WHERE clause needs a scan (400 msgExcludedFilter otherwise) and one
//     with ORDER BY is refused (msgOrderByExcluded).
//
// A path is indexed when the most precise policy path matching it is an
// included one. "/a/b/?" matches the path /a/b exactly; "/a/*" matches /a
// and everything below it; "/*" matches every path. A deeper policy path
// is more precise, and at equal depth "/?" is more precise than "/*"; an
// exact tie (the same path in both lists, which the service refuses on
// create) counts as excluded. "[]" in a policy path matches any array
// element. A policy without any path indexes everything (the service
// inserts "/*"), as does one whose paths match nothing.

const (
	msgExcludedFilter   = "An invalid query has been specified with filters against path(s) excluded from indexing. Consider adding allow scan header in the request."
	msgOrderByExcluded  = "The index path corresponding to the specified order-by item is excluded."
	msgNoCompositeIndex = "The order by query does not have a corresponding composite index that it can be served from."
)

// indexPolicy is the parsed form of a container's indexingPolicy.
type indexPolicy struct {
	none       bool // indexingMode "none"
	rules      []indexRule
	composites [][]compositePath
}

// indexRule is one included or excluded policy path.
type indexRule struct {
	segs     []string
	wildcard bool // "/*" (the node and below) rather than "/?" (the value)
	include  bool
}

// compositePath is one path of a composite index.
type compositePath struct {
	segs []string
	desc bool
}

// parseIndexPolicy reads the indexingPolicy of stored container properties.
// Unreadable parts are ignored (the policy is then more permissive).
func parseIndexPolicy(props map[string]any) *indexPolicy {
	ip := &indexPolicy{}
	m, _ := props["indexingPolicy"].(map[string]any)
	if m == nil {
		return ip
	}
	mode, _ := m["indexingMode"].(string)
	ip.none = strings.EqualFold(mode, "none")
	for _, set := range []struct {
		key     string
		include bool
	}{{"includedPaths", true}, {"excludedPaths", false}} {
		list, _ := m[set.key].([]any)
		for _, e := range list {
			em, _ := e.(map[string]any)
			p, _ := em["path"].(string)
			if r, ok := parseRulePath(p); ok {
				r.include = set.include
				ip.rules = append(ip.rules, r)
			}
		}
	}
	comps, _ := m["compositeIndexes"].([]any)
	for _, ci := range comps {
		list, _ := ci.([]any)
		var idx []compositePath
		for _, e := range list {
			em, _ := e.(map[string]any)
			p, _ := em["path"].(string)
			segs, ok := splitPolicyPath(p)
			if !ok {
				idx = nil
				break
			}
			order, _ := em["order"].(string)
			idx = append(idx, compositePath{segs: segs, desc: strings.EqualFold(order, "descending")})
		}
		if len(idx) > 0 {
			ip.composites = append(ip.composites, idx)
		}
	}
	return ip
}

// parseRulePath parses an included or excluded path: "/a/b/?", "/a/*",
// "/*", or the legacy root "/". A path without a terminator is taken as
// "/*" below it.
func parseRulePath(p string) (indexRule, bool) {
	p = strings.TrimSpace(p)
	var r indexRule
	switch {
	case p == "/":
		r.wildcard = true
		return r, true
	case strings.HasSuffix(p, "/?"):
		p = strings.TrimSuffix(p, "/?")
	case strings.HasSuffix(p, "/*"):
		p = strings.TrimSuffix(p, "/*")
		r.wildcard = true
	default:
		r.wildcard = true
	}
	if p == "" {
		return r, r.wildcard
	}
	segs, ok := splitPolicyPath(p)
	if !ok {
		return r, false
	}
	r.segs = segs
	return r, true
}

// splitPolicyPath splits "/a/\"b-c\"/[]" into its steps, unquoting quoted
// ones.
func splitPolicyPath(p string) ([]string, bool) {
	if !strings.HasPrefix(p, "/") {
		return nil, false
	}
	var segs []string
	i := 1
	for i <= len(p) {
		if i == len(p) {
			return nil, false // trailing '/'
		}
		var seg strings.Builder
		if p[i] == '"' {
			i++
			closed := false
			for i < len(p) {
				c := p[i]
				if c == '\\' && i+1 < len(p) {
					seg.WriteByte(p[i+1])
					i += 2
					continue
				}
				i++
				if c == '"' {
					closed = true
					break
				}
				seg.WriteByte(c)
			}
			if !closed || (i < len(p) && p[i] != '/') {
				return nil, false
			}
		} else {
			j := strings.IndexByte(p[i:], '/')
			if j < 0 {
				j = len(p) - i
			}
			seg.WriteString(p[i : i+j])
			i += j
		}
		if seg.Len() == 0 {
			return nil, false
		}
		segs = append(segs, seg.String())
		if i == len(p) {
			break
		}
		i++ // '/'
	}
	return segs, true
}

// matches reports whether the rule covers document path p.
func (r indexRule) matches(p []string) bool {
	if r.wildcard {
		if len(r.segs) > len(p) {
			return false
		}
	} else if len(r.segs) != len(p) {
		return false
	}
	for i, s := range r.segs {
		if s != p[i] { // "[]" matches the query's array-element step
			return false
		}
	}
	return true
}

// moreSpecific reports whether rule r takes precedence over rule b.
func (r indexRule) moreSpecific(b indexRule) bool {
	if len(r.segs) != len(b.segs) {
		return len(r.segs) > len(b.segs)
	}
	if r.wildcard != b.wildcard {
		return !r.wildcard
	}
	return !r.include && b.include // exact tie: excluded wins
}

// indexed reports whether document path p is indexed (consistent mode).
func (ip *indexPolicy) indexed(p []string) bool {
	if len(p) == 1 && (p[0] == "id" || p[0] == "_ts") {
		return true
	}
	var best *indexRule
	for i := range ip.rules {
		r := &ip.rules[i]
		if r.matches(p) && (best == nil || r.moreSpecific(*best)) {
			best = r
		}
	}
	return best == nil || best.include
}

// hasComposite reports whether a composite index serves ORDER BY keys.
func (ip *indexPolicy) hasComposite(keys []query.OrderKey) bool {
	for _, idx := range ip.composites {
		if len(idx) != len(keys) {
			continue
		}
		same, flipped := true, true
		for i, cp := range idx {
			if !slices.Equal(cp.segs, keys[i].Path) {
				same, flipped = false, false
				break
			}
			if cp.desc == keys[i].Desc {
				flipped = false
			} else {
				same = false
			}
		}
		if same || flipped {
			return true
		}
	}
	return false
}

// scanAllowed reports whether the request lets the service scan documents
// instead of using the index.
func scanAllowed(h http.Header) bool {
	return isTrue(h.Get("x-ms-documentdb-query-enable-scan")) || isTrue(h.Get("x-ms-documentdb-force-query-scan"))
}

// checkIndexing answers the 400 the service gives for a query its container's
// indexing policy cannot serve, or nil.
func (ip *indexPolicy) checkIndexing(q *query.Query, h http.Header) *apiError {
	keys := q.OrderBy()
	filters := q.FilterPaths()
	if ip.none {
		if len(keys) > 0 {
			return newErrSub(http.StatusBadRequest, subStatusNone, msgOrderByExcluded)
		}
		if len(filters) > 0 && !scanAllowed(h) {
			return newErrSub(http.StatusBadRequest, subStatusNone, msgExcludedFilter)
		}
		return nil
	}
	switch {
	case len(keys) == 1:
		if keys[0].Path != nil && !ip.indexed(keys[0].Path) {
			return newErrSub(http.StatusBadRequest, subStatusNone, msgOrderByExcluded)
		}
	case len(keys) > 1:
		paths := true
		for _, k := range keys {
			paths = paths && k.Path != nil
		}
		if paths && !ip.hasComposite(keys) {
			return newErrSub(http.StatusBadRequest, subStatusNone, msgNoCompositeIndex)
		}
	}
	if !scanAllowed(h) {
		for _, p := range filters {
			if !ip.indexed(p) {
				return newErrSub(http.StatusBadRequest, subStatusNone, msgExcludedFilter)
			}
		}
	}
	return nil
}
