package query

import "math"

// env is the evaluation context of one row: the values bound to the FROM
// aliases, the parameter values of the current execution and, while
// projecting a group, the aggregate results of that group.
type env struct {
	vars   []any
	params []any
	aggs   []any
}

// evaluator is a compiled scalar expression. Implementations are immutable
// and safe for concurrent use.
type evaluator interface {
	eval(e *env) any
}

type litEval struct{ v any }

func (n litEval) eval(*env) any { return n.v }

type paramEval struct{ idx int }

func (n paramEval) eval(e *env) any { return e.params[n.idx] }

type aggRefEval struct{ idx int }

func (n aggRefEval) eval(e *env) any { return e.aggs[n.idx] }

// pathEval is a property path rooted at a FROM alias (c.a.b, c["x"], c.arr[0]),
// the most common expression, evaluated without intermediate nodes.
type pathEval struct {
	slot int
	segs []pathSeg
}

func (n pathEval) eval(e *env) any {
	v := e.vars[n.slot]
	for i := range n.segs {
		v = stepPath(v, &n.segs[i])
	}
	return v
}

// stepPath applies one path segment to v; it returns Undefined when the step
// does not apply.
func stepPath(v any, s *pathSeg) any {
	if s.isIndex {
		if arr, ok := v.([]any); ok && s.index < len(arr) {
			return arr[s.index]
		}
		return Undefined
	}
	if m, ok := v.(map[string]any); ok {
		if x, ok := m[s.name]; ok {
			return x
		}
	}
	return Undefined
}

type propEval struct {
	obj  evaluator
	name string
}

func (n propEval) eval(e *env) any {
	if m, ok := n.obj.eval(e).(map[string]any); ok {
		if x, ok := m[n.name]; ok {
			return x
		}
	}
	return Undefined
}

type indexEval struct{ obj, idx evaluator }

func (n indexEval) eval(e *env) any {
	o := n.obj.eval(e)
	i := n.idx.eval(e)
	switch x := o.(type) {
	case map[string]any:
		if s, ok := i.(string); ok {
			if v, ok := x[s]; ok {
				return v
			}
		}
	case []any:
		if f, ok := toNumber(i); ok && f >= 0 && f == math.Trunc(f) && f < float64(len(x)) {
			return x[int(f)]
		}
	}
	return Undefined
}

// Logical operators follow the service's truth tables: non-boolean operands
// behave like undefined.

type andEval struct{ l, r evaluator }

func (n andEval) eval(e *env) any {
	l := n.l.eval(e)
	lb, lok := l.(bool)
	if lok && !lb {
		return false
	}
	r := n.r.eval(e)
	rb, rok := r.(bool)
	if rok && !rb {
		return false
	}
	if lok && rok {
		return true
	}
	return Undefined
}

type orEval struct{ l, r evaluator }

func (n orEval) eval(e *env) any {
	l := n.l.eval(e)
	lb, lok := l.(bool)
	if lok && lb {
		return true
	}
	r := n.r.eval(e)
	rb, rok := r.(bool)
	if rok && rb {
		return true
	}
	if lok && rok {
		return false
	}
	return Undefined
}

type notEval struct{ x evaluator }

func (n notEval) eval(e *env) any {
	if b, ok := n.x.eval(e).(bool); ok {
		return !b
	}
	return Undefined
}

type negEval struct{ x evaluator }

func (n negEval) eval(e *env) any {
	if f, ok := toNumber(n.x.eval(e)); ok {
		return -f
	}
	return Undefined
}

type plusEval struct{ x evaluator }

func (n plusEval) eval(e *env) any {
	if f, ok := toNumber(n.x.eval(e)); ok {
		return f
	}
	return Undefined
}

type bitNotEval struct{ x evaluator }

func (n bitNotEval) eval(e *env) any {
	if f, ok := toNumber(n.x.eval(e)); ok {
		return float64(^toInt32(f))
	}
	return Undefined
}

// binOp identifies a binary operator.
type binOp uint8

const (
	opEq binOp = iota
	opNe
	opLt
	opLe
	opGt
	opGe
	opAdd
	opSub
	opMul
	opDiv
	opMod
	opConcat
	opBitAnd
	opBitOr
	opBitXor
	opShl
	opShr
	opUshr
)

func binOpOf(s string) (binOp, bool) {
	switch s {
	case "=":
		return opEq, true
	case "!=":
		return opNe, true
	case "<":
		return opLt, true
	case "<=":
		return opLe, true
	case ">":
		return opGt, true
	case ">=":
		return opGe, true
	case "+":
		return opAdd, true
	case "-":
		return opSub, true
	case "*":
		return opMul, true
	case "/":
		return opDiv, true
	case "%":
		return opMod, true
	case "||":
		return opConcat, true
	case "&":
		return opBitAnd, true
	case "|":
		return opBitOr, true
	case "^":
		return opBitXor, true
	case "<<":
		return opShl, true
	case ">>":
		return opShr, true
	case ">>>":
		return opUshr, true
	}
	return 0, false
}

type binEval struct {
	op   binOp
	l, r evaluator
}

func (n binEval) eval(e *env) any {
	return applyBinary(n.op, n.l.eval(e), n.r.eval(e))
}

// applyBinary evaluates a binary operator on two values.
func applyBinary(op binOp, a, b any) any {
	switch op {
	case opEq:
		return equalValues(a, b)
	case opNe:
		r := equalValues(a, b)
		if x, ok := r.(bool); ok {
			return !x
		}
		return Undefined
	case opLt, opLe, opGt, opGe:
		c, ok := compareRelational(a, b)
		if !ok {
			return Undefined
		}
		switch op {
		case opLt:
			return c < 0
		case opLe:
			return c <= 0
		case opGt:
			return c > 0
		}
		return c >= 0
	case opConcat:
		x, ok1 := a.(string)
		y, ok2 := b.(string)
		if ok1 && ok2 {
			return x + y
		}
		return Undefined
	}
	x, ok1 := toNumber(a)
	y, ok2 := toNumber(b)
	if !ok1 || !ok2 {
		return Undefined
	}
	switch op {
	case opAdd:
		return numberResult(x + y)
	case opSub:
		return numberResult(x - y)
	case opMul:
		return numberResult(x * y)
	case opDiv:
		return numberResult(x / y)
	case opMod:
		return numberResult(math.Mod(x, y))
	case opBitAnd:
		return float64(toInt32(x) & toInt32(y))
	case opBitOr:
		return float64(toInt32(x) | toInt32(y))
	case opBitXor:
		return float64(toInt32(x) ^ toInt32(y))
	case opShl:
		return float64(toInt32(x) << (uint32(toInt32(y)) & 31))
	case opShr:
		return float64(toInt32(x) >> (uint32(toInt32(y)) & 31))
	case opUshr:
		return float64(uint32(toInt32(x)) >> (uint32(toInt32(y)) & 31))
	}
	return Undefined
}

// toInt32 converts a number to a 32-bit integer as JavaScript's ToInt32 does.
func toInt32(f float64) int32 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	f = math.Trunc(f)
	f = math.Mod(f, 4294967296)
	if f < 0 {
		f += 4294967296
	}
	return int32(uint32(f))
}

// inEval implements x [NOT] IN (list): true when x equals an item, otherwise
// undefined when any comparison was undefined (as x = a OR x = b ... would be).
type inEval struct {
	x    evaluator
	list []evaluator
	not  bool
}

func (n inEval) eval(e *env) any {
	x := n.x.eval(e)
	kx := kindOf(x)
	if kx == kUndefined {
		return Undefined
	}
	undef := false
	for _, it := range n.list {
		v := it.eval(e)
		kv := kindOf(v)
		if kv != kx {
			undef = true
			continue
		}
		if deepEqual(x, v, kx) {
			return !n.not
		}
	}
	if undef {
		return Undefined
	}
	return n.not
}

// betweenEval implements x [NOT] BETWEEN lo AND hi as (x >= lo AND x <= hi).
type betweenEval struct {
	x, lo, hi evaluator
	not       bool
}

func (n betweenEval) eval(e *env) any {
	x := n.x.eval(e)
	c1, ok1 := compareRelational(x, n.lo.eval(e))
	c2, ok2 := compareRelational(x, n.hi.eval(e))
	var r any
	switch {
	case ok1 && c1 < 0, ok2 && c2 > 0:
		r = false
	case ok1 && ok2:
		r = true
	default:
		return Undefined
	}
	if n.not {
		return !r.(bool)
	}
	return r
}

// likeEval implements x [NOT] LIKE pattern [ESCAPE 'c'] with the wildcards
// % (any run), _ (any character), [a-f] and [^a-f] (character classes).
type likeEval struct {
	x, pat evaluator
	escape rune // 0 when none
	not    bool
	pre    []likeTok // compiled pattern when it is a literal
	hasPre bool
}

func (n likeEval) eval(e *env) any {
	s, ok1 := n.x.eval(e).(string)
	if !ok1 {
		return Undefined
	}
	toks := n.pre
	if !n.hasPre {
		p, ok2 := n.pat.eval(e).(string)
		if !ok2 {
			return Undefined
		}
		toks = compileLike(p, n.escape)
	}
	m := likeMatch([]rune(s), toks)
	return m != n.not
}

type likeTokKind uint8

const (
	likeLit likeTokKind = iota
	likeAny
	likeStar
	likeClass
)

type likeTok struct {
	kind   likeTokKind
	r      rune
	ranges [][2]rune
	negate bool
}

func (t *likeTok) match(r rune) bool {
	switch t.kind {
	case likeLit:
		return t.r == r
	case likeAny:
		return true
	case likeClass:
		in := false
		for _, rg := range t.ranges {
			if r >= rg[0] && r <= rg[1] {
				in = true
				break
			}
		}
		return in != t.negate
	}
	return false
}

// compileLike splits a LIKE pattern into tokens. An unterminated '[' is a
// literal character.
func compileLike(p string, esc rune) []likeTok {
	rs := []rune(p)
	var toks []likeTok
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case esc != 0 && c == esc && i+1 < len(rs):
			i++
			toks = append(toks, likeTok{kind: likeLit, r: rs[i]})
		case c == '%':
			toks = append(toks, likeTok{kind: likeStar})
		case c == '_':
			toks = append(toks, likeTok{kind: likeAny})
		case c == '[':
			end := -1
			for j := i + 1; j < len(rs); j++ {
				if rs[j] == ']' && j > i+1 {
					end = j
					break
				}
			}
			if end < 0 {
				toks = append(toks, likeTok{kind: likeLit, r: c})
				continue
			}
			t := likeTok{kind: likeClass}
			body := rs[i+1 : end]
			if len(body) > 1 && body[0] == '^' {
				t.negate = true
				body = body[1:]
			}
			for k := 0; k < len(body); k++ {
				if k+2 < len(body) && body[k+1] == '-' {
					t.ranges = append(t.ranges, [2]rune{body[k], body[k+2]})
					k += 2
					continue
				}
				t.ranges = append(t.ranges, [2]rune{body[k], body[k]})
			}
			toks = append(toks, t)
			i = end
		default:
			toks = append(toks, likeTok{kind: likeLit, r: c})
		}
	}
	return toks
}

// likeMatch matches s against compiled LIKE tokens (iterative, backtracking
// to the last %).
func likeMatch(s []rune, p []likeTok) bool {
	si, pi := 0, 0
	starP, starS := -1, 0
	for si < len(s) {
		if pi < len(p) {
			if p[pi].kind == likeStar {
				starP, starS = pi, si
				pi++
				continue
			}
			if p[pi].match(s[si]) {
				si++
				pi++
				continue
			}
		}
		if starP < 0 {
			return false
		}
		starS++
		si, pi = starS, starP+1
	}
	for pi < len(p) && p[pi].kind == likeStar {
		pi++
	}
	return pi == len(p)
}

// condEval implements c ? a : b; only a boolean true condition selects a.
type condEval struct{ c, a, b evaluator }

func (n condEval) eval(e *env) any {
	if b, ok := n.c.eval(e).(bool); ok && b {
		return n.a.eval(e)
	}
	return n.b.eval(e)
}

// coalesceEval implements a ?? b: a unless it is undefined.
type coalesceEval struct{ a, b evaluator }

func (n coalesceEval) eval(e *env) any {
	v := n.a.eval(e)
	if _, ok := v.(UndefinedType); ok {
		return n.b.eval(e)
	}
	return v
}

// arrayEval builds an array; undefined items are left out.
type arrayEval struct{ items []evaluator }

func (n arrayEval) eval(e *env) any {
	out := make([]any, 0, len(n.items))
	for _, it := range n.items {
		v := it.eval(e)
		if _, ok := v.(UndefinedType); ok {
			continue
		}
		out = append(out, v)
	}
	return out
}

// objectEval builds an object; undefined members are left out.
type objectEval struct {
	keys []string
	vals []evaluator
}

func (n objectEval) eval(e *env) any {
	out := make(map[string]any, len(n.keys))
	for i, k := range n.keys {
		v := n.vals[i].eval(e)
		if _, ok := v.(UndefinedType); ok {
			continue
		}
		out[k] = v
	}
	return out
}

// Function calls, specialised by arity so that argument evaluation does not
// allocate.

type call1Eval struct {
	fn func(a any) any
	a  evaluator
}

func (n call1Eval) eval(e *env) any { return n.fn(n.a.eval(e)) }

type call2Eval struct {
	fn   func(a, b any) any
	a, b evaluator
}

func (n call2Eval) eval(e *env) any { return n.fn(n.a.eval(e), n.b.eval(e)) }

type callNEval struct {
	fn   func(args []any) any
	args []evaluator
}

func (n callNEval) eval(e *env) any {
	args := make([]any, len(n.args))
	for i, a := range n.args {
		args[i] = a.eval(e)
	}
	return n.fn(args)
}

// isTrue reports whether v is exactly the boolean true (the WHERE rule).
func isTrue(v any) bool {
	b, ok := v.(bool)
	return ok && b
}

// likeEscape returns the escape rune of an ESCAPE string.
func likeEscape(s string) (rune, bool) {
	r := []rune(s)
	if len(r) != 1 {
		return 0, false
	}
	return r[0], true
}
