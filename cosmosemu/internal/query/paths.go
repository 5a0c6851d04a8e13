package query

import (
	"slices"
	"strings"
)

// ArrayElement is the path step FilterPaths and OrderBy use for an element
// of an array, whatever its position: the "[]" of indexing-policy paths.
const ArrayElement = "[]"

// OrderKey is one ORDER BY key: the document path it sorts on (nil when the
// key is not a property path of the document) and its direction.
type OrderKey struct {
	Path []string
	Desc bool
}

// FilterPaths returns the document paths the WHERE clause reads, each once,
// in order of first appearance: every property path rooted at a FROM alias
// that appears anywhere in the WHERE expression (operand of a comparison,
// IN, BETWEEN or LIKE, argument of a function such as IS_DEFINED or
// STARTSWITH, or a bare boolean). A path is given as its steps from the
// document root: property names, and ArrayElement for an array element
// (a literal array index, an alias bound by "x IN c.arr", or the first
// argument of ARRAY_CONTAINS, ARRAY_CONTAINS_ANY and ARRAY_CONTAINS_ALL,
// which read the array's elements). A path whose step is computed (c.a[@k])
// is reported up to that step. An empty path is the whole document. SELECT,
// GROUP BY and ORDER BY expressions are not included. The result is nil
// when there is no WHERE clause.
func (q *Query) FilterPaths() [][]string {
	out := make([][]string, len(q.filterPaths))
	for i, p := range q.filterPaths {
		out[i] = slices.Clone(p)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// OrderBy returns the ORDER BY keys in clause order (nil without ORDER BY).
func (q *Query) OrderBy() []OrderKey {
	if len(q.orderKeys) == 0 {
		return nil
	}
	out := make([]OrderKey, len(q.orderKeys))
	for i, k := range q.orderKeys {
		out[i] = OrderKey{Path: slices.Clone(k.Path), Desc: k.Desc}
	}
	return out
}

// aliasPaths maps each FROM alias to the document path it is bound to, for
// the aliases that lead back to the document (every one, in a valid query).
func aliasPaths(from []fromSource) map[string][]string {
	m := make(map[string][]string, len(from))
	for i, src := range from {
		var base []string
		if i > 0 {
			b, ok := m[src.input]
			if !ok {
				continue
			}
			base = b
		}
		p := slices.Clone(base)
		for _, s := range src.path {
			if s.isIndex {
				p = append(p, ArrayElement)
			} else {
				p = append(p, s.name)
			}
		}
		if src.iterate {
			p = append(p, ArrayElement)
		}
		if src.alias != "" {
			m[src.alias] = p
		}
	}
	return m
}

// staticDocPath resolves alias.a["b"][0] to its document path; ok is false
// when n is not such a path (a computed step, or an unknown identifier).
func staticDocPath(n *node, aliases map[string][]string) ([]string, bool) {
	var rev []string
	for {
		switch n.kind {
		case nProp:
			rev = append(rev, n.name)
			n = n.kids[0]
			continue
		case nIndex:
			k := n.kids[1]
			if k.kind != nLit {
				return nil, false
			}
			switch v := k.val.(type) {
			case string:
				rev = append(rev, v)
			case float64:
				rev = append(rev, ArrayElement)
			default:
				return nil, false
			}
			n = n.kids[0]
			continue
		case nIdent:
			base, ok := aliases[n.name]
			if !ok {
				return nil, false
			}
			p := slices.Clone(base)
			for i := len(rev) - 1; i >= 0; i-- {
				p = append(p, rev[i])
			}
			return p, true
		}
		return nil, false
	}
}

// collectPaths appends to out the document paths n reads (see FilterPaths).
func collectPaths(n *node, aliases map[string][]string, out *[][]string) {
	if n == nil {
		return
	}
	switch n.kind {
	case nLit, nParam:
		return
	case nIdent, nProp, nIndex:
		if p, ok := staticDocPath(n, aliases); ok {
			addPath(out, p)
			return
		}
		if n.kind == nIdent {
			return
		}
	case nCall:
		// ARRAY_CONTAINS(c.arr, x) reads the array's elements.
		if len(n.kids) > 0 && strings.HasPrefix(strings.ToUpper(n.name), "ARRAY_CONTAINS") {
			if p, ok := staticDocPath(n.kids[0], aliases); ok {
				addPath(out, append(p, ArrayElement))
				for _, k := range n.kids[1:] {
					collectPaths(k, aliases, out)
				}
				return
			}
		}
	}
	for _, k := range n.kids {
		collectPaths(k, aliases, out)
	}
}

func addPath(out *[][]string, p []string) {
	for _, q := range *out {
		if slices.Equal(q, p) {
			return
		}
	}
	*out = append(*out, p)
}

// indexPaths records the paths the WHERE and ORDER BY clauses read.
func (q *Query) indexPaths(st *selectStmt) {
	aliases := aliasPaths(st.from)
	collectPaths(st.where, aliases, &q.filterPaths)
	for _, o := range st.orderBy {
		p, ok := staticDocPath(o.expr, aliases)
		if !ok {
			p = nil
		}
		q.orderKeys = append(q.orderKeys, OrderKey{Path: p, Desc: o.desc})
	}
}
