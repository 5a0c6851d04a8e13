package query

import (
	"slices"
	"strings"
)

// execution is the per-call state of Execute or Filter.
type execution struct {
	q   *Query
	env env
	// skip, take: OFFSET and min(LIMIT, TOP); take < 0 means unbounded.
	skip, take int
}

func (q *Query) newExec(params map[string]any) (*execution, error) {
	x := &execution{q: q, take: -1}
	x.env.params = make([]any, len(q.paramNames))
	for i, name := range q.paramNames {
		v, ok := params[name]
		if !ok {
			return nil, newError(CodeUnresolvedIdentifier, "Identifier '%s' could not be resolved.", name)
		}
		x.env.params[i] = normalize(v)
	}
	x.env.vars = make([]any, q.nvars)
	if q.offset != nil {
		off, err := x.count("OFFSET", q.offset)
		if err != nil {
			return nil, err
		}
		lim, err := x.count("LIMIT", q.limit)
		if err != nil {
			return nil, err
		}
		x.skip, x.take = off, lim
	}
	if q.top != nil {
		top, err := x.count("TOP", q.top)
		if err != nil {
			return nil, err
		}
		if x.take < 0 || top < x.take {
			x.take = top
		}
	}
	return x, nil
}

// count resolves a TOP/OFFSET/LIMIT argument.
func (x *execution) count(clause string, c *countSpec) (int, error) {
	if c.param == "" {
		return c.lit, nil
	}
	v := x.env.params[x.paramIndex(c.param)]
	f, ok := toNumber(v)
	if !ok {
		return 0, newError(CodeInvalid, "The %s value must be a non-negative integer.", clause)
	}
	return countValue(clause, f)
}

func (x *execution) paramIndex(name string) int {
	return slices.Index(x.q.paramNames, name)
}

// rows binds the FROM aliases for every row doc produces and calls fn for
// each; fn returns false to stop. rows reports whether it ran to completion.
func (x *execution) rows(doc map[string]any, fn func() bool) bool {
	if len(x.q.sources) == 0 {
		return fn()
	}
	return x.bind(doc, 0, fn)
}

func (x *execution) bind(doc map[string]any, i int, fn func() bool) bool {
	if i == len(x.q.sources) {
		return fn()
	}
	s := &x.q.sources[i]
	vars := x.env.vars
	var v any = doc
	if s.fromSlot >= 0 {
		v = vars[s.fromSlot]
	}
	for j := range s.segs {
		v = stepPath(v, &s.segs[j])
	}
	if s.iterate {
		arr, ok := v.([]any)
		if !ok {
			return true
		}
		for _, e := range arr {
			vars[s.slot] = e
			if !x.bind(doc, i+1, fn) {
				return false
			}
		}
		return true
	}
	if _, ok := v.(UndefinedType); ok {
		return true
	}
	vars[s.slot] = v
	return x.bind(doc, i+1, fn)
}

// forEachDoc calls rows for every document, or once without a document when
// the query has no FROM clause.
func (x *execution) forEachDoc(docs []map[string]any, fn func() bool) {
	if len(x.q.sources) == 0 {
		fn()
		return
	}
	for _, d := range docs {
		if !x.bind(d, 0, fn) {
			return
		}
	}
}

func (x *execution) matches() bool {
	return x.q.where == nil || isTrue(x.q.where.eval(&x.env))
}

// project evaluates the SELECT clause for the current row; ok is false when
// the row produces no result (SELECT VALUE of undefined).
func (x *execution) project() (any, bool) {
	q := x.q
	switch {
	case q.star:
		return x.env.vars[0], true
	case q.value != nil:
		v := q.value.eval(&x.env)
		if _, undef := v.(UndefinedType); undef {
			return nil, false
		}
		return v, true
	}
	m := make(map[string]any, len(q.items))
	for i := range q.items {
		v := q.items[i].expr.eval(&x.env)
		if _, undef := v.(UndefinedType); undef {
			continue
		}
		m[q.items[i].name] = v
	}
	return m, true
}

// emitter applies DISTINCT, OFFSET, LIMIT and TOP to projected results.
type emitter struct {
	out  []any
	seen map[string]struct{}
	skip int
	take int
}

// add offers one result; it returns false once no further results are wanted.
func (m *emitter) add(v any) bool {
	if m.take == 0 {
		return false
	}
	if m.seen != nil {
		k := canonicalKey(v)
		if _, dup := m.seen[k]; dup {
			return true
		}
		m.seen[k] = struct{}{}
	}
	if m.skip > 0 {
		m.skip--
		return true
	}
	m.out = append(m.out, v)
	if m.take > 0 {
		m.take--
	}
	return m.take != 0
}

func (x *execution) run(docs []map[string]any) []any {
	q := x.q
	m := &emitter{out: []any{}, skip: x.skip, take: x.take}
	if q.distinct {
		m.seen = map[string]struct{}{}
	}
	if m.take == 0 {
		return m.out
	}
	switch {
	case q.aggregate:
		x.runAggregate(docs, m)
	case len(q.orderBy) > 0:
		x.runOrdered(docs, m)
	default:
		x.forEachDoc(docs, func() bool {
			if !x.matches() {
				return true
			}
			v, ok := x.project()
			if !ok {
				return true
			}
			return m.add(v)
		})
	}
	return m.out
}

func (x *execution) runOrdered(docs []map[string]any, m *emitter) {
	q := x.q
	nv, nk := q.nvars, len(q.orderBy)
	var rowVars, keys []any
	n := 0
	x.forEachDoc(docs, func() bool {
		if !x.matches() {
			return true
		}
		rowVars = append(rowVars, x.env.vars...)
		for i := range q.orderBy {
			keys = append(keys, q.orderBy[i].expr.eval(&x.env))
		}
		n++
		return true
	})
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		for j := 0; j < nk; j++ {
			c := compareTotal(keys[a*nk+j], keys[b*nk+j])
			if c != 0 {
				if q.orderBy[j].desc {
					return -c
				}
				return c
			}
		}
		return 0
	})
	for _, i := range idx {
		x.env.vars = rowVars[i*nv : (i+1)*nv]
		v, ok := x.project()
		if ok && !m.add(v) {
			return
		}
	}
}

// aggState accumulates one aggregate over the rows of a group.
type aggState struct {
	count   float64
	sum     float64
	invalid bool // SUM/AVG saw a non-number, MIN/MAX an object or array
	best    any
	hasBest bool
}

func (s *aggState) add(k aggKind, v any) {
	kv := kindOf(v)
	if kv == kUndefined {
		return
	}
	switch k {
	case aggCount:
		s.count++
	case aggSum, aggAvg:
		f, ok := toNumber(v)
		if !ok {
			s.invalid = true
			return
		}
		s.sum += f
		s.count++
	case aggMin, aggMax:
		if kv == kArray || kv == kObject {
			s.invalid = true
			return
		}
		if !s.hasBest {
			s.best, s.hasBest = v, true
			return
		}
		c := compareTotal(v, s.best)
		if (k == aggMin && c < 0) || (k == aggMax && c > 0) {
			s.best = v
		}
	}
}

func (s *aggState) result(k aggKind) any {
	switch k {
	case aggCount:
		return s.count
	case aggSum:
		if s.invalid {
			return Undefined
		}
		return numberResult(s.sum)
	case aggAvg:
		if s.invalid || s.count == 0 {
			return Undefined
		}
		return numberResult(s.sum / s.count)
	}
	if s.invalid || !s.hasBest {
		return Undefined
	}
	return s.best
}

type group struct {
	vars   []any
	states []aggState
}

func (x *execution) runAggregate(docs []map[string]any, m *emitter) {
	q := x.q
	newGroup := func(vars []any) *group {
		return &group{vars: vars, states: make([]aggState, len(q.aggs))}
	}
	var groups []*group
	var index map[string]int
	if len(q.groupBy) == 0 {
		vars := make([]any, q.nvars)
		for i := range vars {
			vars[i] = Undefined
		}
		groups = append(groups, newGroup(vars))
	} else {
		index = map[string]int{}
	}
	var kb strings.Builder
	x.forEachDoc(docs, func() bool {
		if !x.matches() {
			return true
		}
		var g *group
		if index == nil {
			g = groups[0]
		} else {
			kb.Reset()
			for _, e := range q.groupBy {
				writeCanonicalValue(&kb, e.eval(&x.env))
				kb.WriteByte(0)
			}
			key := kb.String()
			i, ok := index[key]
			if !ok {
				i = len(groups)
				index[key] = i
				groups = append(groups, newGroup(slices.Clone(x.env.vars)))
			}
			g = groups[i]
		}
		for i := range q.aggs {
			g.states[i].add(q.aggs[i].kind, q.aggs[i].arg.eval(&x.env))
		}
		return true
	})
	x.env.aggs = make([]any, len(q.aggs))
	for _, g := range groups {
		for i := range q.aggs {
			x.env.aggs[i] = g.states[i].result(q.aggs[i].kind)
		}
		x.env.vars = g.vars
		v, ok := x.project()
		if ok && !m.add(v) {
			return
		}
	}
}
