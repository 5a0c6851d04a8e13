package query

import "strings"

// PartitionKeyFilter reports the partition key value the WHERE clause pins
// the query to, so that a query sent without a partition key (for example
// "SELECT * FROM c WHERE c.pk = '1' ORDER BY c.id") can be routed to a single
// partition the way the service's query plan does. paths are the container's
// partition key paths ("/pk", or several for hierarchical keys, such as
// "/tenant", "/user"). It returns one value per path and ok=true when the
// WHERE clause is a conjunction (AND) that contains, for every path, an
// equality between that property of the FROM alias and a literal or parameter
// (either operand order), or IS_NULL of it (value nil). Values are JSON values
// as decoded by encoding/json; a parameter missing from params makes ok false.
func (q *Query) PartitionKeyFilter(paths []string, params map[string]any) (values []any, ok bool) {
	if q.whereAST == nil || q.rootAlias == "" || len(paths) == 0 {
		return nil, false
	}
	pinned := map[string]any{}
	var collect func(n *node)
	collect = func(n *node) {
		switch n.kind {
		case nAnd:
			collect(n.kids[0])
			collect(n.kids[1])
		case nBinary:
			if n.op != "=" {
				return
			}
			for _, side := range [][2]*node{{n.kids[0], n.kids[1]}, {n.kids[1], n.kids[0]}} {
				p, isPath := q.docPath(side[0])
				if !isPath {
					continue
				}
				switch side[1].kind {
				case nLit:
					if _, undef := side[1].val.(UndefinedType); !undef {
						pinned[p] = side[1].val
					}
				case nParam:
					if v, found := params[side[1].name]; found {
						pinned[p] = normalize(v)
					}
				}
			}
		case nCall:
			if strings.EqualFold(n.name, "IS_NULL") && len(n.kids) == 1 {
				if p, isPath := q.docPath(n.kids[0]); isPath {
					pinned[p] = nil
				}
			}
		}
	}
	collect(q.whereAST)
	values = make([]any, len(paths))
	for i, p := range paths {
		v, found := pinned[p]
		if !found {
			return nil, false
		}
		values[i] = v
	}
	return values, true
}

// docPath renders alias.a["b"] as "/a/b" when n is a property path on the
// root alias with property-name steps only.
func (q *Query) docPath(n *node) (string, bool) {
	var segs []string
	for {
		switch n.kind {
		case nProp:
			segs = append(segs, n.name)
			n = n.kids[0]
			continue
		case nIndex:
			s, isStr := n.kids[1].val.(string)
			if n.kids[1].kind != nLit || !isStr {
				return "", false
			}
			segs = append(segs, s)
			n = n.kids[0]
			continue
		case nIdent:
			if n.name != q.rootAlias || len(segs) == 0 {
				return "", false
			}
			var b strings.Builder
			for i := len(segs) - 1; i >= 0; i-- {
				b.WriteByte('/')
				b.WriteString(segs[i])
			}
			return b.String(), true
		}
		return "", false
	}
}
