package query

import (
	"strconv"
	"strings"
)

// nodeKind classifies a scalar-expression AST node.
type nodeKind uint8

const (
	nLit      nodeKind = iota // val
	nParam                    // name ("@x")
	nIdent                    // name
	nProp                     // kids[0].name
	nIndex                    // kids[0][kids[1]]
	nUnary                    // op kids[0]   (op: "-", "+", "~", "NOT")
	nBinary                   // kids[0] op kids[1]
	nAnd                      // kids[0] AND kids[1]
	nOr                       // kids[0] OR kids[1]
	nIn                       // kids[0] [NOT] IN (kids[1:]...)
	nBetween                  // kids[0] [NOT] BETWEEN kids[1] AND kids[2]
	nLike                     // kids[0] [NOT] LIKE kids[1] [ESCAPE kids[2]]
	nCond                     // kids[0] ? kids[1] : kids[2]
	nCoalesce                 // kids[0] ?? kids[1]
	nCall                     // name(kids...)
	nArray                    // [kids...]
	nObject                   // {keys[i]: kids[i], ...}
)

// node is a scalar-expression AST node.
type node struct {
	kind nodeKind
	name string // identifier, property, parameter or function name
	op   string // operator
	not  bool   // NOT IN / NOT BETWEEN / NOT LIKE
	val  any    // literal value
	keys []string
	kids []*node
}

// selectItem is one "expr [AS alias]" of a SELECT list.
type selectItem struct {
	expr  *node
	alias string
}

// name is the item's property name in a result: its alias, the name its
// expression implies, or "$n" for the n-th item without either (unnamed
// counts them across a SELECT list).
func (it selectItem) name(unnamed *int) string {
	if it.alias != "" {
		return it.alias
	}
	if n := implicitName(it.expr); n != "" {
		return n
	}
	*unnamed++
	return "$" + strconv.Itoa(*unnamed)
}

// pathSeg is one step of a FROM-clause input path: .name, ["name"] or [n].
type pathSeg struct {
	name    string
	index   int
	isIndex bool
}

// fromSource is one collection expression of the FROM clause.
type fromSource struct {
	alias   string    // name the source is bound to; "" when unaddressable
	input   string    // identifier the input path starts at
	path    []pathSeg // path below input
	iterate bool      // "alias IN collection": bind each array element
}

// orderItem is one ORDER BY key.
type orderItem struct {
	expr *node
	desc bool
}

// countSpec is the argument of TOP, OFFSET or LIMIT: a literal or a parameter.
type countSpec struct {
	lit   int
	param string
}

// selectStmt is the parsed form of a query.
type selectStmt struct {
	distinct bool
	top      *countSpec
	star     bool
	value    *node
	items    []selectItem
	from     []fromSource
	where    *node
	groupBy  []*node
	orderBy  []orderItem
	offset   *countSpec
	limit    *countSpec
}

// canon writes a canonical text form of n, used to compare expressions
// structurally (GROUP BY matching).
func canon(n *node) string {
	var b strings.Builder
	writeCanon(&b, n)
	return b.String()
}

func writeCanon(b *strings.Builder, n *node) {
	if n == nil {
		b.WriteString("<nil>")
		return
	}
	switch n.kind {
	case nLit:
		writeCanonicalValue(b, n.val)
	case nParam, nIdent:
		b.WriteString(n.name)
	case nProp:
		writeCanon(b, n.kids[0])
		b.WriteString("[")
		writeJSONString(b, n.name)
		b.WriteString("]")
	case nIndex:
		if s, ok := n.kids[1].val.(string); ok && n.kids[1].kind == nLit {
			writeCanon(b, n.kids[0])
			b.WriteString("[")
			writeJSONString(b, s)
			b.WriteString("]")
			return
		}
		writeCanon(b, n.kids[0])
		b.WriteString("[")
		writeCanon(b, n.kids[1])
		b.WriteString("]")
	case nCall:
		b.WriteString(strings.ToUpper(n.name))
		b.WriteString("(")
		for i, k := range n.kids {
			if i > 0 {
				b.WriteString(",")
			}
			writeCanon(b, k)
		}
		b.WriteString(")")
	case nObject:
		b.WriteString("{")
		for i, k := range n.kids {
			if i > 0 {
				b.WriteString(",")
			}
			writeJSONString(b, n.keys[i])
			b.WriteString(":")
			writeCanon(b, k)
		}
		b.WriteString("}")
	default:
		b.WriteString("(")
		b.WriteString(strconv.Itoa(int(n.kind)))
		b.WriteString(n.op)
		if n.not {
			b.WriteString("!")
		}
		for _, k := range n.kids {
			b.WriteString(" ")
			writeCanon(b, k)
		}
		b.WriteString(")")
	}
}
