package query

import (
	"strings"
)

// aggKind identifies an aggregate function.
type aggKind uint8

const (
	aggCount aggKind = iota
	aggSum
	aggMin
	aggMax
	aggAvg
)

// aggSpec is one aggregate call of the SELECT clause.
type aggSpec struct {
	kind aggKind
	arg  evaluator
}

// compiledSource is a FROM source bound to slot vars[slot]: the value found at
// segs below the document (fromSlot < 0) or below another alias' value.
type compiledSource struct {
	slot     int
	fromSlot int
	segs     []pathSeg
	iterate  bool
}

type compiledItem struct {
	name string
	expr evaluator
}

type compiledOrder struct {
	expr evaluator
	desc bool
}

// compiler turns a selectStmt into evaluators, resolving identifiers,
// parameters, functions and aggregates.
type compiler struct {
	aliases    map[string]int
	params     map[string]int
	paramNames []string
	aggs       []aggSpec
	aggAllowed bool // compiling a SELECT expression
	inAgg      bool // compiling an aggregate's argument
	clause     string
}

func compile(st *selectStmt) (*Query, error) {
	q := &Query{distinct: st.distinct, top: st.top, offset: st.offset, limit: st.limit, star: st.star, stmt: st}
	c := &compiler{aliases: map[string]int{}, params: map[string]int{}}

	// FROM
	for i, src := range st.from {
		cs := compiledSource{slot: i, fromSlot: -1, segs: src.path, iterate: src.iterate}
		if i > 0 {
			slot, ok := c.aliases[src.input]
			if !ok {
				return nil, newError(CodeUnresolvedIdentifier, "Identifier '%s' could not be resolved.", src.input)
			}
			cs.fromSlot = slot
		}
		if src.alias != "" {
			if _, dup := c.aliases[src.alias]; dup {
				return nil, newError(CodeInvalid, "The input set name or alias '%s' is specified more than once in the FROM clause.", src.alias)
			}
			c.aliases[src.alias] = i
		}
		q.sources = append(q.sources, cs)
	}
	q.nvars = len(q.sources)
	if len(st.from) > 0 && len(st.from[0].path) == 0 && !st.from[0].iterate {
		q.rootAlias = st.from[0].alias
	}
	q.whereAST = st.where

	// SELECT
	hasAgg := false
	for _, it := range st.items {
		hasAgg = hasAgg || containsAggregate(it.expr)
	}
	if st.value != nil {
		hasAgg = hasAgg || containsAggregate(st.value)
	}
	q.aggregate = hasAgg || len(st.groupBy) > 0
	switch {
	case st.star:
		if len(st.from) == 0 {
			return nil, newError(CodeInvalid, "'SELECT *' is not valid if FROM clause is omitted.")
		}
		if len(st.from) > 1 {
			return nil, newError(CodeInvalid, "'SELECT *' is only valid with a single input set.")
		}
		if q.aggregate {
			return nil, newError(CodeInvalid, "'SELECT *' is not valid with GROUP BY or aggregate functions.")
		}
	default:
		if q.aggregate {
			keys := make(map[string]bool, len(st.groupBy))
			for _, g := range st.groupBy {
				keys[canon(g)] = true
			}
			exprs := []*node{st.value}
			if st.value == nil {
				exprs = exprs[:0]
				for _, it := range st.items {
					exprs = append(exprs, it.expr)
				}
			}
			for _, e := range exprs {
				if err := checkGrouped(e, keys, len(st.groupBy) > 0); err != nil {
					return nil, err
				}
			}
		}
		c.aggAllowed, c.clause = true, "SELECT"
		if st.value != nil {
			v, err := c.expr(st.value)
			if err != nil {
				return nil, err
			}
			q.value = v
		}
		unnamed := 0
		for _, it := range st.items {
			v, err := c.expr(it.expr)
			if err != nil {
				return nil, err
			}
			name := it.name(&unnamed)
			q.items = append(q.items, compiledItem{name: name, expr: v})
		}
		c.aggAllowed = false
	}

	// WHERE
	if st.where != nil {
		c.clause = "WHERE"
		w, err := c.expr(st.where)
		if err != nil {
			return nil, err
		}
		q.where = w
	}
	// GROUP BY
	c.clause = "GROUP BY"
	for _, g := range st.groupBy {
		v, err := c.expr(g)
		if err != nil {
			return nil, err
		}
		q.groupBy = append(q.groupBy, v)
	}
	// ORDER BY
	if len(st.orderBy) > 0 && q.aggregate {
		return nil, unsupported("ORDER BY is not supported together with GROUP BY or aggregate functions by this emulator.")
	}
	c.clause = "ORDER BY"
	for _, o := range st.orderBy {
		v, err := c.expr(o.expr)
		if err != nil {
			return nil, err
		}
		q.orderBy = append(q.orderBy, compiledOrder{expr: v, desc: o.desc})
	}
	for _, cs := range []*countSpec{st.top, st.offset, st.limit} {
		if cs != nil && cs.param != "" {
			c.param(cs.param)
		}
	}

	q.aggs = c.aggs
	q.paramNames = c.paramNames
	q.indexPaths(st)
	q.features = Features{
		OrderBy:     len(q.orderBy) > 0,
		Top:         q.top != nil,
		Distinct:    q.distinct,
		Aggregate:   hasAgg,
		OffsetLimit: q.offset != nil,
		GroupBy:     len(q.groupBy) > 0,
	}
	return q, nil
}

// implicitName is the result property name of an unaliased select item:
// the last property name of a path, the alias itself, or "" (then "$N").
func implicitName(n *node) string {
	switch n.kind {
	case nIdent, nProp:
		return n.name
	case nIndex:
		if s, ok := n.kids[1].val.(string); ok && n.kids[1].kind == nLit {
			return s
		}
	}
	return ""
}

func containsAggregate(n *node) bool {
	if n == nil {
		return false
	}
	if n.kind == nCall && isAggregateName(strings.ToUpper(n.name)) {
		return true
	}
	for _, k := range n.kids {
		if containsAggregate(k) {
			return true
		}
	}
	return false
}

// checkGrouped verifies that outside aggregate calls a select expression only
// refers to documents through GROUP BY expressions.
func checkGrouped(n *node, keys map[string]bool, grouped bool) error {
	if n.kind == nCall && isAggregateName(strings.ToUpper(n.name)) {
		return nil
	}
	if keys[canon(n)] {
		return nil
	}
	if ref, ok := pathText(n); ok {
		if grouped {
			return newError(CodeInvalid, "Property reference '%s' is invalid in the select list because it is not contained in either an aggregate function or the GROUP BY clause.", ref)
		}
		return newError(CodeInvalid, "Property reference '%s' is invalid in the select list because it is not contained in an aggregate function.", ref)
	}
	for _, k := range n.kids {
		if err := checkGrouped(k, keys, grouped); err != nil {
			return err
		}
	}
	return nil
}

// pathText renders a property path rooted at an alias (c.a["b"][0]) for
// error messages; ok is false when n is not such a path.
func pathText(n *node) (string, bool) {
	switch n.kind {
	case nIdent:
		return n.name, true
	case nProp:
		base, ok := pathText(n.kids[0])
		return base + "." + n.name, ok
	case nIndex:
		k := n.kids[1]
		if k.kind != nLit {
			return "", false
		}
		base, ok := pathText(n.kids[0])
		var b strings.Builder
		b.WriteString(base)
		b.WriteByte('[')
		writeCanonicalValue(&b, k.val)
		b.WriteByte(']')
		return b.String(), ok
	}
	return "", false
}

func (c *compiler) param(name string) int {
	if i, ok := c.params[name]; ok {
		return i
	}
	i := len(c.paramNames)
	c.params[name] = i
	c.paramNames = append(c.paramNames, name)
	return i
}

func (c *compiler) exprs(ns []*node) ([]evaluator, error) {
	out := make([]evaluator, len(ns))
	for i, n := range ns {
		e, err := c.expr(n)
		if err != nil {
			return nil, err
		}
		out[i] = e
	}
	return out, nil
}

// expr compiles one scalar expression.
func (c *compiler) expr(n *node) (evaluator, error) {
	switch n.kind {
	case nLit:
		return litEval{v: n.val}, nil
	case nParam:
		return paramEval{idx: c.param(n.name)}, nil
	case nIdent:
		slot, ok := c.aliases[n.name]
		if !ok {
			return nil, newError(CodeUnresolvedIdentifier, "Identifier '%s' could not be resolved.", n.name)
		}
		return pathEval{slot: slot}, nil
	case nProp, nIndex:
		if p, ok := c.staticPath(n); ok {
			return p, nil
		}
		obj, err := c.expr(n.kids[0])
		if err != nil {
			return nil, err
		}
		if n.kind == nProp {
			return propEval{obj: obj, name: n.name}, nil
		}
		idx, err := c.expr(n.kids[1])
		if err != nil {
			return nil, err
		}
		return indexEval{obj: obj, idx: idx}, nil
	case nUnary:
		x, err := c.expr(n.kids[0])
		if err != nil {
			return nil, err
		}
		switch n.op {
		case "-":
			return negEval{x: x}, nil
		case "+":
			return plusEval{x: x}, nil
		case "~":
			return bitNotEval{x: x}, nil
		}
		return notEval{x: x}, nil
	case nBinary, nAnd, nOr, nCoalesce:
		l, err := c.expr(n.kids[0])
		if err != nil {
			return nil, err
		}
		r, err := c.expr(n.kids[1])
		if err != nil {
			return nil, err
		}
		switch n.kind {
		case nAnd:
			return andEval{l: l, r: r}, nil
		case nOr:
			return orEval{l: l, r: r}, nil
		case nCoalesce:
			return coalesceEval{a: l, b: r}, nil
		}
		op, ok := binOpOf(n.op)
		if !ok {
			return nil, newError(CodeInvalid, "Unknown operator '%s'.", n.op)
		}
		return binEval{op: op, l: l, r: r}, nil
	case nIn:
		ks, err := c.exprs(n.kids)
		if err != nil {
			return nil, err
		}
		return inEval{x: ks[0], list: ks[1:], not: n.not}, nil
	case nBetween:
		ks, err := c.exprs(n.kids)
		if err != nil {
			return nil, err
		}
		return betweenEval{x: ks[0], lo: ks[1], hi: ks[2], not: n.not}, nil
	case nLike:
		ks, err := c.exprs(n.kids[:2])
		if err != nil {
			return nil, err
		}
		le := likeEval{x: ks[0], pat: ks[1], not: n.not}
		if len(n.kids) == 3 {
			r, ok := likeEscape(n.kids[2].val.(string))
			if !ok {
				return nil, newError(CodeInvalid, "The ESCAPE argument of LIKE must be a single character.")
			}
			le.escape = r
		}
		if lit, ok := n.kids[1].val.(string); ok && n.kids[1].kind == nLit {
			le.pre, le.hasPre = compileLike(lit, le.escape), true
		}
		return le, nil
	case nCond:
		ks, err := c.exprs(n.kids)
		if err != nil {
			return nil, err
		}
		return condEval{c: ks[0], a: ks[1], b: ks[2]}, nil
	case nArray:
		ks, err := c.exprs(n.kids)
		if err != nil {
			return nil, err
		}
		return arrayEval{items: ks}, nil
	case nObject:
		ks, err := c.exprs(n.kids)
		if err != nil {
			return nil, err
		}
		return objectEval{keys: n.keys, vals: ks}, nil
	case nCall:
		return c.call(n)
	}
	return nil, newError(CodeInvalid, "Unsupported expression.")
}

// staticPath compiles alias.a["b"][0]... into a single pathEval.
func (c *compiler) staticPath(n *node) (evaluator, bool) {
	var segs []pathSeg
	for {
		switch n.kind {
		case nProp:
			segs = append(segs, pathSeg{name: n.name})
			n = n.kids[0]
			continue
		case nIndex:
			k := n.kids[1]
			if k.kind != nLit {
				return nil, false
			}
			switch v := k.val.(type) {
			case string:
				segs = append(segs, pathSeg{name: v})
			case float64:
				if v < 0 || v != float64(int(v)) {
					return nil, false
				}
				segs = append(segs, pathSeg{index: int(v), isIndex: true})
			default:
				return nil, false
			}
			n = n.kids[0]
			continue
		case nIdent:
			slot, ok := c.aliases[n.name]
			if !ok {
				return nil, false
			}
			for i, j := 0, len(segs)-1; i < j; i, j = i+1, j-1 {
				segs[i], segs[j] = segs[j], segs[i]
			}
			return pathEval{slot: slot, segs: segs}, true
		}
		return nil, false
	}
}

func (c *compiler) call(n *node) (evaluator, error) {
	up := strings.ToUpper(n.name)
	if isAggregateName(up) {
		if !c.aggAllowed {
			return nil, newError(CodeInvalid, "Aggregate function %s is not allowed in the %s clause.", up, c.clause)
		}
		if c.inAgg {
			return nil, newError(CodeInvalid, "Cannot perform an aggregate function on an expression containing an aggregate.")
		}
		if len(n.kids) != 1 {
			return nil, newError(CodeArgumentCount, "The %s function requires 1 argument(s).", up)
		}
		c.inAgg = true
		arg, err := c.expr(n.kids[0])
		c.inAgg = false
		if err != nil {
			return nil, err
		}
		var k aggKind
		switch up {
		case "COUNT":
			k = aggCount
		case "SUM":
			k = aggSum
		case "MIN":
			k = aggMin
		case "MAX":
			k = aggMax
		default:
			k = aggAvg
		}
		c.aggs = append(c.aggs, aggSpec{kind: k, arg: arg})
		return aggRefEval{idx: len(c.aggs) - 1}, nil
	}
	b, ok := lookupBuiltin(up)
	if !ok {
		return nil, newError(CodeUnknownFunction, "'%s' is not a recognized built-in function name.", n.name)
	}
	if len(n.kids) < b.minArgs || (b.maxArgs >= 0 && len(n.kids) > b.maxArgs) {
		switch {
		case b.maxArgs == b.minArgs:
			return nil, newError(CodeArgumentCount, "The %s function requires %d argument(s).", up, b.minArgs)
		case b.maxArgs < 0:
			return nil, newError(CodeArgumentCount, "The %s function requires at least %d argument(s).", up, b.minArgs)
		}
		return nil, newError(CodeArgumentCount, "The %s function requires between %d and %d argument(s).", up, b.minArgs, b.maxArgs)
	}
	args, err := c.exprs(n.kids)
	if err != nil {
		return nil, err
	}
	switch {
	case b.fn1 != nil:
		return call1Eval{fn: b.fn1, a: args[0]}, nil
	case b.fn2 != nil:
		return call2Eval{fn: b.fn2, a: args[0], b: args[1]}, nil
	}
	return callNEval{fn: b.fnN, args: args}, nil
}
