package query

import "math"

// maxDepth bounds expression nesting so hostile input can not exhaust the stack.
const maxDepth = 200

// parser is a recursive-descent parser over the token slice of one query.
type parser struct {
	toks  []token
	i     int
	depth int
}

// parseText parses a complete query text into a selectStmt.
func parseText(text string) (*selectStmt, error) {
	toks, err := lex(text)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	st, err := p.parseSelect()
	if err != nil {
		return nil, err
	}
	if p.peek().kind != tEOF {
		return nil, p.errHere()
	}
	return st, nil
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) peekAt(n int) token {
	if p.i+n < len(p.toks) {
		return p.toks[p.i+n]
	}
	return p.toks[len(p.toks)-1]
}

func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

// back undoes next for token t (a no-op for the EOF token, which next does
// not consume).
func (p *parser) back(t token) {
	if t.kind != tEOF {
		p.i--
	}
}

func (p *parser) isKw(kw string) bool {
	t := p.peek()
	return t.kind == tKeyword && t.text == kw
}

func (p *parser) isPunct(s string) bool {
	t := p.peek()
	return t.kind == tPunct && t.text == s
}

func (p *parser) acceptKw(kw string) bool {
	if p.isKw(kw) {
		p.i++
		return true
	}
	return false
}

func (p *parser) acceptPunct(s string) bool {
	if p.isPunct(s) {
		p.i++
		return true
	}
	return false
}

func (p *parser) expectKw(kw string) error {
	if !p.acceptKw(kw) {
		return p.errHere()
	}
	return nil
}

func (p *parser) expectPunct(s string) error {
	if !p.acceptPunct(s) {
		return p.errHere()
	}
	return nil
}

// errHere reports a syntax error at the current token, worded like the service.
func (p *parser) errHere() error {
	t := p.peek()
	if t.kind == tEOF {
		return syntaxErrorEOF()
	}
	return syntaxErrorNear(t.raw)
}

func (p *parser) parseSelect() (*selectStmt, error) {
	if err := p.expectKw("SELECT"); err != nil {
		return nil, err
	}
	st := &selectStmt{}
	st.distinct = p.acceptKw("DISTINCT")
	if p.acceptKw("TOP") {
		c, err := p.parseCount("TOP")
		if err != nil {
			return nil, err
		}
		st.top = c
	}
	switch {
	case p.acceptPunct("*"):
		st.star = true
	case p.acceptKw("VALUE"):
		e, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		st.value = e
	default:
		for {
			e, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			item := selectItem{expr: e}
			if p.acceptKw("AS") {
				t := p.next()
				if t.kind != tIdent {
					p.back(t)
					return nil, p.errHere()
				}
				item.alias = t.text
			} else if p.peek().kind == tIdent {
				item.alias = p.next().text
			}
			st.items = append(st.items, item)
			if !p.acceptPunct(",") {
				break
			}
		}
	}
	if p.acceptKw("FROM") {
		if err := p.parseFrom(st); err != nil {
			return nil, err
		}
	}
	if p.acceptKw("WHERE") {
		e, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		st.where = e
	}
	if p.acceptKw("GROUP") {
		if err := p.expectKw("BY"); err != nil {
			return nil, err
		}
		for {
			e, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			st.groupBy = append(st.groupBy, e)
			if !p.acceptPunct(",") {
				break
			}
		}
	}
	if p.acceptKw("ORDER") {
		if err := p.expectKw("BY"); err != nil {
			return nil, err
		}
		if p.isKw("RANK") {
			return nil, unsupported("ORDER BY RANK is not supported by this emulator.")
		}
		for {
			e, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			item := orderItem{expr: e}
			if p.acceptKw("DESC") {
				item.desc = true
			} else {
				p.acceptKw("ASC")
			}
			st.orderBy = append(st.orderBy, item)
			if !p.acceptPunct(",") {
				break
			}
		}
	}
	if p.acceptKw("OFFSET") {
		off, err := p.parseCount("OFFSET")
		if err != nil {
			return nil, err
		}
		if err := p.expectKw("LIMIT"); err != nil {
			return nil, err
		}
		lim, err := p.parseCount("LIMIT")
		if err != nil {
			return nil, err
		}
		st.offset, st.limit = off, lim
	}
	return st, nil
}

// parseCount parses the numeric literal or parameter after TOP, OFFSET or LIMIT.
func (p *parser) parseCount(clause string) (*countSpec, error) {
	t := p.peek()
	switch t.kind {
	case tNumber:
		p.i++
		n, err := countValue(clause, t.num)
		if err != nil {
			return nil, err
		}
		return &countSpec{lit: n}, nil
	case tParam:
		p.i++
		return &countSpec{param: t.text}, nil
	}
	return nil, p.errHere()
}

// countValue validates a TOP/OFFSET/LIMIT value: a non-negative integer.
func countValue(clause string, v float64) (int, error) {
	if v < 0 || v != math.Trunc(v) || v > math.MaxInt32 {
		return 0, newError(CodeInvalid, "The %s value must be a non-negative integer; got %s.", clause, formatNumber(v))
	}
	return int(v), nil
}

func (p *parser) parseFrom(st *selectStmt) error {
	for {
		src, err := p.parseFromSource()
		if err != nil {
			return err
		}
		st.from = append(st.from, src)
		if !p.acceptKw("JOIN") {
			return nil
		}
	}
}

func (p *parser) parseFromSource() (fromSource, error) {
	var src fromSource
	if p.peek().kind == tIdent && p.peekAt(1).kind == tKeyword && p.peekAt(1).text == "IN" {
		src.alias = p.next().text
		p.next() // IN
		src.iterate = true
		if err := p.parseCollection(&src); err != nil {
			return src, err
		}
		return src, nil
	}
	if err := p.parseCollection(&src); err != nil {
		return src, err
	}
	if p.acceptKw("AS") {
		t := p.next()
		if t.kind != tIdent {
			p.back(t)
			return src, p.errHere()
		}
		src.alias = t.text
	} else if p.peek().kind == tIdent {
		src.alias = p.next().text
	} else if len(src.path) == 0 {
		src.alias = src.input
	}
	return src, nil
}

// parseCollection parses "identifier path" of a FROM source.
func (p *parser) parseCollection(src *fromSource) error {
	if p.isPunct("(") && p.peekAt(1).kind == tKeyword && p.peekAt(1).text == "SELECT" {
		return unsupported("Subqueries in the FROM clause are not supported by this emulator.")
	}
	t := p.next()
	if t.kind != tIdent {
		p.back(t)
		return p.errHere()
	}
	src.input = t.text
	for {
		switch {
		case p.acceptPunct("."):
			t := p.next()
			if t.kind != tIdent {
				p.back(t)
				return p.errHere()
			}
			src.path = append(src.path, pathSeg{name: t.text})
		case p.acceptPunct("["):
			t := p.next()
			switch t.kind {
			case tString:
				src.path = append(src.path, pathSeg{name: t.text})
			case tNumber:
				if t.num < 0 || t.num != math.Trunc(t.num) || t.num > math.MaxInt32 {
					return syntaxErrorNear(t.raw)
				}
				src.path = append(src.path, pathSeg{index: int(t.num), isIndex: true})
			default:
				p.back(t)
				return p.errHere()
			}
			if err := p.expectPunct("]"); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// Expression grammar, lowest precedence first:
//
//	ternary    := coalesce ['?' ternary ':' ternary]
//	coalesce   := or ['??' coalesce]
//	or         := and {OR and}
//	and        := predicate {AND predicate}
//	predicate  := binary [[NOT] IN (list) | [NOT] BETWEEN binary AND binary | [NOT] LIKE binary [ESCAPE string]]
//	binary     := unary {binop unary}   (|| < | < ^ < & < = != <> < relational < shifts < + - < * / %)
//	unary      := ('-' | '+' | '~' | NOT) unary | postfix
//	postfix    := primary {'.' identifier | '[' ternary ']'}
func (p *parser) parseExpr() (*node, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxDepth {
		return nil, newError(CodeInvalid, "The query expression is nested too deeply.")
	}
	c, err := p.parseCoalesce()
	if err != nil {
		return nil, err
	}
	if !p.acceptPunct("?") {
		return c, nil
	}
	a, err := p.parseExpr()
	if err != nil {
		return nil, err
	}
	if err := p.expectPunct(":"); err != nil {
		return nil, err
	}
	b, err := p.parseExpr()
	if err != nil {
		return nil, err
	}
	return &node{kind: nCond, kids: []*node{c, a, b}}, nil
}

func (p *parser) parseCoalesce() (*node, error) {
	l, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	if !p.acceptPunct("??") {
		return l, nil
	}
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxDepth {
		return nil, newError(CodeInvalid, "The query expression is nested too deeply.")
	}
	r, err := p.parseCoalesce()
	if err != nil {
		return nil, err
	}
	return &node{kind: nCoalesce, kids: []*node{l, r}}, nil
}

func (p *parser) parseOr() (*node, error) {
	l, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.acceptKw("OR") {
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		l = &node{kind: nOr, kids: []*node{l, r}}
	}
	return l, nil
}

func (p *parser) parseAnd() (*node, error) {
	l, err := p.parsePredicate()
	if err != nil {
		return nil, err
	}
	for p.acceptKw("AND") {
		r, err := p.parsePredicate()
		if err != nil {
			return nil, err
		}
		l = &node{kind: nAnd, kids: []*node{l, r}}
	}
	return l, nil
}

func (p *parser) parsePredicate() (*node, error) {
	x, err := p.parseBinary(1)
	if err != nil {
		return nil, err
	}
	not := false
	if p.isKw("NOT") {
		nt := p.peekAt(1)
		if nt.kind == tKeyword && (nt.text == "IN" || nt.text == "BETWEEN" || nt.text == "LIKE") {
			p.i++
			not = true
		}
	}
	switch {
	case p.acceptKw("IN"):
		if err := p.expectPunct("("); err != nil {
			return nil, err
		}
		if p.isKw("SELECT") {
			return nil, unsupported("Subqueries are not supported by this emulator.")
		}
		kids := []*node{x}
		for {
			e, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			kids = append(kids, e)
			if !p.acceptPunct(",") {
				break
			}
		}
		if err := p.expectPunct(")"); err != nil {
			return nil, err
		}
		return &node{kind: nIn, not: not, kids: kids}, nil
	case p.acceptKw("BETWEEN"):
		lo, err := p.parseBinary(1)
		if err != nil {
			return nil, err
		}
		if err := p.expectKw("AND"); err != nil {
			return nil, err
		}
		hi, err := p.parseBinary(1)
		if err != nil {
			return nil, err
		}
		return &node{kind: nBetween, not: not, kids: []*node{x, lo, hi}}, nil
	case p.acceptKw("LIKE"):
		pat, err := p.parseBinary(1)
		if err != nil {
			return nil, err
		}
		kids := []*node{x, pat}
		if p.acceptKw("ESCAPE") {
			t := p.next()
			if t.kind != tString {
				p.back(t)
				return nil, p.errHere()
			}
			kids = append(kids, &node{kind: nLit, val: t.text})
		}
		return &node{kind: nLike, not: not, kids: kids}, nil
	}
	return x, nil
}

// binaryPrec returns the precedence of a binary operator token (0 if t is not one).
func binaryPrec(t token) int {
	if t.kind != tPunct {
		return 0
	}
	switch t.text {
	case "||":
		return 1
	case "|":
		return 2
	case "^":
		return 3
	case "&":
		return 4
	case "=", "!=", "<>":
		return 5
	case "<", ">", "<=", ">=":
		return 6
	case "<<", ">>", ">>>":
		return 7
	case "+", "-":
		return 8
	case "*", "/", "%":
		return 9
	}
	return 0
}

// parseBinary parses left-associative binary operators of precedence >= minPrec.
func (p *parser) parseBinary(minPrec int) (*node, error) {
	l, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		prec := binaryPrec(t)
		if prec == 0 || prec < minPrec {
			return l, nil
		}
		p.i++
		p.depth++
		if p.depth > maxDepth {
			return nil, newError(CodeInvalid, "The query expression is nested too deeply.")
		}
		r, err := p.parseBinary(prec + 1)
		p.depth--
		if err != nil {
			return nil, err
		}
		op := t.text
		if op == "<>" {
			op = "!="
		}
		l = &node{kind: nBinary, op: op, kids: []*node{l, r}}
	}
}

func (p *parser) parseUnary() (*node, error) {
	t := p.peek()
	op := ""
	switch {
	case t.kind == tPunct && (t.text == "-" || t.text == "+" || t.text == "~"):
		op = t.text
	case t.kind == tKeyword && t.text == "NOT":
		op = "NOT"
	}
	if op == "" {
		return p.parsePostfix()
	}
	p.i++
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxDepth {
		return nil, newError(CodeInvalid, "The query expression is nested too deeply.")
	}
	x, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	if op == "-" && x.kind == nLit {
		if f, ok := x.val.(float64); ok {
			return &node{kind: nLit, val: -f}, nil
		}
	}
	return &node{kind: nUnary, op: op, kids: []*node{x}}, nil
}

func (p *parser) parsePostfix() (*node, error) {
	x, err := p.parsePrimary()
	if err != nil {
		return nil, err
	}
	for {
		switch {
		case p.acceptPunct("."):
			t := p.next()
			if t.kind != tIdent {
				p.back(t)
				return nil, p.errHere()
			}
			x = &node{kind: nProp, name: t.text, kids: []*node{x}}
		case p.acceptPunct("["):
			idx, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			if err := p.expectPunct("]"); err != nil {
				return nil, err
			}
			x = &node{kind: nIndex, kids: []*node{x, idx}}
		default:
			return x, nil
		}
	}
}

func (p *parser) parsePrimary() (*node, error) {
	t := p.peek()
	switch t.kind {
	case tIdent:
		p.i++
		if p.isPunct("(") {
			return p.parseCall(t.text)
		}
		return &node{kind: nIdent, name: t.text}, nil
	case tParam:
		p.i++
		return &node{kind: nParam, name: t.text}, nil
	case tNumber:
		p.i++
		return &node{kind: nLit, val: t.num}, nil
	case tString:
		p.i++
		return &node{kind: nLit, val: t.text}, nil
	case tKeyword:
		switch t.text {
		case "true":
			p.i++
			return &node{kind: nLit, val: true}, nil
		case "false":
			p.i++
			return &node{kind: nLit, val: false}, nil
		case "null":
			p.i++
			return &node{kind: nLit, val: nil}, nil
		case "undefined":
			p.i++
			return &node{kind: nLit, val: Undefined}, nil
		case "udf":
			if p.peekAt(1).kind == tPunct && p.peekAt(1).text == "." {
				return nil, unsupported("User-defined functions (udf.) are not supported by this emulator.")
			}
		case "LEFT", "RIGHT":
			if p.peekAt(1).kind == tPunct && p.peekAt(1).text == "(" {
				p.i++
				return p.parseCall(t.text)
			}
		case "EXISTS", "ARRAY":
			if p.peekAt(1).kind == tPunct && p.peekAt(1).text == "(" {
				return nil, unsupported("%s subqueries are not supported by this emulator.", t.text)
			}
		}
	case tPunct:
		switch t.text {
		case "(":
			p.i++
			if p.isKw("SELECT") {
				return nil, unsupported("Subqueries are not supported by this emulator.")
			}
			e, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			if err := p.expectPunct(")"); err != nil {
				return nil, err
			}
			return e, nil
		case "[":
			p.i++
			n := &node{kind: nArray}
			if p.acceptPunct("]") {
				return n, nil
			}
			for {
				e, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				n.kids = append(n.kids, e)
				if !p.acceptPunct(",") {
					break
				}
			}
			if err := p.expectPunct("]"); err != nil {
				return nil, err
			}
			return n, nil
		case "{":
			p.i++
			n := &node{kind: nObject}
			if p.acceptPunct("}") {
				return n, nil
			}
			for {
				k := p.next()
				if k.kind != tString && k.kind != tIdent {
					p.back(k)
					return nil, p.errHere()
				}
				if err := p.expectPunct(":"); err != nil {
					return nil, err
				}
				e, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, k.text)
				n.kids = append(n.kids, e)
				if !p.acceptPunct(",") {
					break
				}
			}
			if err := p.expectPunct("}"); err != nil {
				return nil, err
			}
			return n, nil
		}
	}
	return nil, p.errHere()
}

// parseCall parses the argument list of a function call; the current token is '('.
func (p *parser) parseCall(name string) (*node, error) {
	p.i++ // (
	n := &node{kind: nCall, name: name}
	if p.acceptPunct(")") {
		return n, nil
	}
	for {
		e, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		n.kids = append(n.kids, e)
		if !p.acceptPunct(",") {
			break
		}
	}
	if err := p.expectPunct(")"); err != nil {
		return nil, err
	}
	return n, nil
}
