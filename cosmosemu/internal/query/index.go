package query

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// IndexOp is the kind of an IndexPlan node.
type IndexOp uint8

// IndexPlan node kinds.
const (
	// IndexEq: the value at Path equals Value (same JSON type).
	IndexEq IndexOp = iota + 1
	// IndexRange: the value at Path has the type of the bounds and lies
	// between them.
	IndexRange
	// IndexAnd: every child holds.
	IndexAnd
	// IndexOr: at least one child holds.
	IndexOr
)

// IndexPlan is a condition over scalar values at document paths that every
// document matching a query's WHERE clause satisfies (IndexPlan): an index
// over those paths can then enumerate candidate documents, on which the full
// query must still be evaluated. Values are scalars (null, boolean, number,
// string); a document whose value at Path is missing, an array or an object
// never satisfies an Eq or Range leaf.
type IndexPlan struct {
	Op   IndexOp
	Path []string // Eq, Range: property names from the document root

	Value any // Eq: the value compared with

	Lo, Hi         any  // Range: bounds, of the same type when both are set
	HasLo, HasHi   bool // Range: whether Lo / Hi bound the range
	LoIncl, HiIncl bool // Range: whether the bounds are inclusive

	Kids []*IndexPlan // And, Or
}

// IndexPlan derives from the WHERE clause, with params as for Execute, a
// condition an index can serve (see the IndexPlan type), or nil when there is
// none and every document must be examined. Recognised: equality (=),
// comparisons (<, <=, >, >=), BETWEEN and IN between a property path of the
// root FROM alias (property-name steps only) and literals or parameters with
// scalar values, ARRAY_CONTAINS(array, path) with a literal or parameter
// array of scalars, and AND/OR of these (an AND needs one servable side, an
// OR both). Everything else (NOT, functions, JOIN aliases, missing
// parameters) contributes no condition; the result is then weaker than the
// WHERE clause, never stronger.
func (q *Query) IndexPlan(params map[string]any) *IndexPlan {
	if q.whereAST == nil || q.rootAlias == "" {
		return nil
	}
	return q.indexPlan(q.whereAST, params)
}

func (q *Query) indexPlan(n *node, params map[string]any) *IndexPlan {
	switch n.kind {
	case nAnd:
		a, b := q.indexPlan(n.kids[0], params), q.indexPlan(n.kids[1], params)
		switch {
		case a == nil:
			return b
		case b == nil:
			return a
		}
		if r := mergeRanges(a, b); r != nil {
			return r
		}
		return &IndexPlan{Op: IndexAnd, Kids: []*IndexPlan{a, b}}
	case nOr:
		a, b := q.indexPlan(n.kids[0], params), q.indexPlan(n.kids[1], params)
		if a == nil || b == nil {
			return nil
		}
		return &IndexPlan{Op: IndexOr, Kids: []*IndexPlan{a, b}}
	case nBinary:
		return q.comparisonPlan(n, params)
	case nBetween:
		if n.not {
			return nil
		}
		path, ok := q.pathSegs(n.kids[0])
		lo, okLo := constValue(n.kids[1], params)
		hi, okHi := constValue(n.kids[2], params)
		if !ok || !okLo || !okHi || !IsScalar(lo) || kindOf(lo) != kindOf(hi) {
			return nil
		}
		return &IndexPlan{Op: IndexRange, Path: path, Lo: lo, Hi: hi, HasLo: true, HasHi: true, LoIncl: true, HiIncl: true}
	case nIn:
		if n.not {
			return nil
		}
		path, ok := q.pathSegs(n.kids[0])
		if !ok {
			return nil
		}
		var vals []any
		for _, k := range n.kids[1:] {
			v, ok := constValue(k, params)
			if !ok {
				return nil
			}
			vals = append(vals, v)
		}
		return eqAny(path, vals)
	case nCall:
		if !strings.EqualFold(n.name, "ARRAY_CONTAINS") || len(n.kids) != 2 {
			return nil
		}
		path, ok := q.pathSegs(n.kids[1])
		arr, okA := constValue(n.kids[0], params)
		if !ok || !okA {
			return nil
		}
		vals, isArr := arr.([]any)
		if !isArr {
			return nil
		}
		return eqAny(path, vals)
	}
	return nil
}

// eqAny is the plan "value at path is one of vals", nil when a value is not
// a scalar (the index only holds scalars).
func eqAny(path []string, vals []any) *IndexPlan {
	or := &IndexPlan{Op: IndexOr}
	for _, v := range vals {
		if !IsScalar(v) {
			return nil
		}
		or.Kids = append(or.Kids, &IndexPlan{Op: IndexEq, Path: path, Value: v})
	}
	if len(or.Kids) == 1 {
		return or.Kids[0]
	}
	return or // no values: matches nothing, as IN () and ARRAY_CONTAINS([], x)
}

func (q *Query) comparisonPlan(n *node, params map[string]any) *IndexPlan {
	op := n.op
	path, ok := q.pathSegs(n.kids[0])
	other := n.kids[1]
	if !ok {
		if path, ok = q.pathSegs(n.kids[1]); !ok {
			return nil
		}
		other = n.kids[0]
		switch op { // constant op path  ==  path flipped(op) constant
		case "<":
			op = ">"
		case "<=":
			op = ">="
		case ">":
			op = "<"
		case ">=":
			op = "<="
		}
	}
	v, ok := constValue(other, params)
	if !ok || !IsScalar(v) {
		return nil
	}
	switch op {
	case "=":
		return &IndexPlan{Op: IndexEq, Path: path, Value: v}
	case "<", "<=":
		return &IndexPlan{Op: IndexRange, Path: path, Hi: v, HasHi: true, HiIncl: op == "<="}
	case ">", ">=":
		return &IndexPlan{Op: IndexRange, Path: path, Lo: v, HasLo: true, LoIncl: op == ">="}
	}
	return nil
}

// constValue returns the value of a literal or of a parameter present in
// params.
func constValue(n *node, params map[string]any) (any, bool) {
	switch n.kind {
	case nLit:
		return n.val, true
	case nParam:
		v, ok := params[n.name]
		if !ok {
			return nil, false
		}
		return normalize(v), true
	}
	return nil, false
}

// pathSegs returns the property names of a path on the root alias.
func (q *Query) pathSegs(n *node) ([]string, bool) {
	p, ok := q.docPath(n)
	if !ok {
		return nil, false
	}
	return strings.Split(p[1:], "/"), true
}

// IsScalar reports whether v is null, a boolean, a number or a string.
func IsScalar(v any) bool {
	switch kindOf(v) {
	case kNull, kBool, kNumber, kString:
		return true
	}
	return false
}

// ScalarKey returns a key for a scalar value such that two scalars have
// the same key exactly when the query language's '=' finds them equal;
// ok is false for values that are not scalars.
func ScalarKey(v any) (key string, ok bool) {
	switch kindOf(v) {
	case kNull:
		return "n", true
	case kBool:
		if v.(bool) {
			return "t", true
		}
		return "f", true
	case kNumber:
		f, _ := toNumber(v)
		if f == 0 {
			f = 0 // -0 = 0
		}
		return "d" + strconv.FormatUint(math.Float64bits(f), 16), true
	case kString:
		return "s" + v.(string), true
	}
	return "", false
}

// CompareScalars orders scalars as the index does: by type (null <
// boolean < number < string), then by value as the comparison operators
// do. Both arguments must be scalars (IsScalar).
func CompareScalars(a, b any) int {
	return compareTotal(a, b)
}

// SameKind reports whether two values have the same JSON type.
func SameKind(a, b any) bool { return kindOf(a) == kindOf(b) }

// ValueAt returns the value at a path of property names in a document, and
// false when it is missing (or a step is not an object).
func ValueAt(doc map[string]any, path []string) (any, bool) {
	var cur any = doc
	for _, s := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[s]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// Holds reports whether a document satisfies the plan, reading only the
// values at its paths.
func (pl *IndexPlan) Holds(doc map[string]any) bool {
	switch pl.Op {
	case IndexAnd:
		for _, k := range pl.Kids {
			if !k.Holds(doc) {
				return false
			}
		}
		return true
	case IndexOr:
		for _, k := range pl.Kids {
			if k.Holds(doc) {
				return true
			}
		}
		return false
	}
	v, ok := ValueAt(doc, pl.Path)
	if !ok || !IsScalar(v) {
		return false
	}
	if pl.Op == IndexEq {
		a, _ := ScalarKey(v)
		b, _ := ScalarKey(pl.Value)
		return a == b
	}
	return pl.InRange(v)
}

// InRange reports whether scalar v satisfies a Range plan's bounds.
func (pl *IndexPlan) InRange(v any) bool {
	if pl.HasLo {
		if !SameKind(v, pl.Lo) {
			return false
		}
		c := compareTotal(v, pl.Lo)
		if c < 0 || (c == 0 && !pl.LoIncl) {
			return false
		}
	}
	if pl.HasHi {
		if !SameKind(v, pl.Hi) {
			return false
		}
		c := compareTotal(v, pl.Hi)
		if c > 0 || (c == 0 && !pl.HiIncl) {
			return false
		}
	}
	return true
}

// mergeRanges returns the one range both a and b describe when they are
// ranges on the same path with bounds of one kind, the one bounded only
// below and the other only above (c.x >= lo AND c.x <= hi): an index then
// reads the values between the bounds instead of everything beyond one of
// them. The range holds for exactly the values both hold for. Otherwise
// it returns nil.
func mergeRanges(a, b *IndexPlan) *IndexPlan {
	if a.Op != IndexRange || b.Op != IndexRange || !slices.Equal(a.Path, b.Path) {
		return nil
	}
	if b.HasLo && !b.HasHi && a.HasHi && !a.HasLo {
		a, b = b, a
	}
	if !a.HasLo || a.HasHi || !b.HasHi || b.HasLo || !SameKind(a.Lo, b.Hi) {
		return nil
	}
	return &IndexPlan{Op: IndexRange, Path: a.Path, Lo: a.Lo, HasLo: true, LoIncl: a.LoIncl, Hi: b.Hi, HasHi: true, HiIncl: b.HiIncl}
}
