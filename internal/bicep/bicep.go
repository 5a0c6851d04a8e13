// Package bicep is a small, strict reader of Azure Bicep files, for the
// tests that hold the deployment under infra/bicep to the Go code it
// deploys. It keeps the declarations (params, vars, resources, modules,
// outputs) and their literal values; anything that is not a literal is
// kept as its source text. It checks no types and evaluates nothing: the
// grammar check (infra/lint) and the Bicep compiler do that.
package bicep

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Value is one of: Object, Array, string (a literal string
// without interpolation), int64, bool, nil (the literal null), Expr
// (anything else).
type Value any

// Object is an object literal; Keys holds its property names in source order.
type Object struct {
	Keys   []string
	Values map[string]Value
}

// Array is an array literal.
type Array []Value

// Expr is a non-literal value: its source text with each run of
// whitespace, newlines and comments outside strings replaced by one space.
type Expr struct{ Text string }

// Decorator is `@Name(Args...)`; Name may be namespaced ("sys.description").
type Decorator struct {
	Name string
	Args []Value
}

// Param is `param Name Type [= Default]`; Line is the keyword's line.
type Param struct {
	Name, Type string
	Default    Value
	HasDefault bool
	Decorators []Decorator
	Line       int
}

// Var is `var Name = Value`.
type Var struct {
	Name  string
	Value Value
	Line  int
}

// Resource is `resource Symbol 'Type@APIVersion' [existing] = body`.
// Condition is set for `= if (cond) {...}`, Loop for `= [for x in y: {...}]`.
// A resource nested in a parent's body is listed with Symbol "parent::child",
// its Type prefixed by the parent's type and, without '@', the parent's APIVersion.
type Resource struct {
	Symbol, Type, APIVersion string
	Existing                 bool
	Condition                *Expr
	Loop                     *Expr
	Body                     Value
	Decorators               []Decorator
	Line                     int
}

// Module is `module Symbol 'Path' = body`, with Condition and Loop as for resources.
type Module struct {
	Symbol, Path string
	Condition    *Expr
	Loop         *Expr
	Body         Value
	Decorators   []Decorator
	Line         int
}

// Output is `output Name Type = Value`.
type Output struct {
	Name, Type string
	Value      Value
	Decorators []Decorator
	Line       int
}

// File holds the declarations of one Bicep file in source order.
type File struct {
	Path        string
	TargetScope Value
	Params      []*Param
	Vars        []*Var
	Resources   []*Resource
	Modules     []*Module
	Outputs     []*Output
}

// ReadFile reads and parses the file at path.
func ReadFile(path string) (*File, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bicep: %w", err)
	}
	return Parse(path, src)
}

// Parse parses src; errors read "path:line:col: expected X, found Y".
func Parse(path string, src []byte) (*File, error) {
	p := &parser{src: src, file: &File{Path: path}, lines: []int{0}}
	for i, c := range src {
		if c == '\n' {
			p.lines = append(p.lines, i+1)
		}
	}
	if p.parseFile(); p.err != nil {
		return nil, p.err
	}
	return p.file, nil
}

// Param returns the param named name, or nil.
func (f *File) Param(name string) *Param {
	return find(f.Params, name, (*Param).key)
}

// Resource returns the resource with that symbolic name, or nil.
func (f *File) Resource(symbol string) *Resource {
	return find(f.Resources, symbol, (*Resource).key)
}

// Module returns the module with that symbolic name, or nil.
func (f *File) Module(symbol string) *Module {
	return find(f.Modules, symbol, (*Module).key)
}

// Output returns the output named name, or nil.
func (f *File) Output(name string) *Output {
	return find(f.Outputs, name, (*Output).key)
}

// Var returns the var named name, or nil.
func (f *File) Var(name string) *Var { return find(f.Vars, name, (*Var).key) }

// ResourcesOfType returns the resources whose Type equals typ, ignoring case.
func (f *File) ResourcesOfType(typ string) []*Resource {
	var out []*Resource
	for _, r := range f.Resources {
		if strings.EqualFold(r.Type, typ) {
			out = append(out, r)
		}
	}
	return out
}

// OnlyResourceOfType returns the one resource of the type in f, or an
// error naming how many there are.
func (f *File) OnlyResourceOfType(typ string) (*Resource, error) {
	rs := f.ResourcesOfType(typ)
	if len(rs) != 1 {
		return nil, fmt.Errorf("bicep: %s declares %d resources of type %s, want 1", f.Path, len(rs), typ)
	}
	return rs[0], nil
}

// key methods name each declaration for find.
func (x *Param) key() string    { return x.Name }
func (x *Resource) key() string { return x.Symbol }
func (x *Module) key() string   { return x.Symbol }
func (x *Output) key() string   { return x.Name }
func (x *Var) key() string      { return x.Name }

// find returns the first element whose key is name, or nil.
func find[T any](xs []*T, name string, key func(*T) string) *T {
	for _, x := range xs {
		if key(x) == name {
			return x
		}
	}
	return nil
}

// Get walks nested objects by key; false if a key is missing or a step is not an object.
func (o Object) Get(path ...string) (Value, bool) {
	var cur Value = o
	for _, k := range path {
		obj, ok := cur.(Object)
		if !ok {
			return nil, false
		}
		if cur, ok = obj.Values[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// Literal converts a fully literal value to plain Go as encoding/json would
// decode it (objects to map[string]any, arrays to []any, int64 to float64).
// It fails on the first Expr, naming its path and text.
func Literal(v Value) (any, error) { return literalAt(v, "$") }

// literalAt is literal with at naming v's position for errors.
func literalAt(v Value, at string) (any, error) {
	switch x := v.(type) {
	case nil, string, bool:
		return x, nil
	case int64:
		return float64(x), nil
	case Object:
		m := make(map[string]any, len(x.Keys))
		for _, k := range x.Keys {
			lit, err := literalAt(x.Values[k], at+"."+k)
			if err != nil {
				return nil, err
			}
			m[k] = lit
		}
		return m, nil
	case Array:
		a := make([]any, len(x))
		for i, e := range x {
			lit, err := literalAt(e, fmt.Sprintf("%s[%d]", at, i))
			if err != nil {
				return nil, err
			}
			a[i] = lit
		}
		return a, nil
	case Expr:
		return nil, fmt.Errorf("%s is the expression %q, not a Literal", at, x.Text)
	}
	return nil, fmt.Errorf("%s has unexpected type %T", at, v)
}

// parser is a cursor over one file. After the first error (kept in err) pos
// stays at the end of src, so every loop ends and later errors are dropped.
type parser struct {
	src     []byte
	pos     int
	lines   []int // offset of each line start
	file    *File
	parents []*Resource // resources whose body is being parsed
	err     error
}

// lineCol returns the 1-based line and column (in runes) of offset at.
func (p *parser) lineCol(at int) (line, col int) {
	line = sort.SearchInts(p.lines, at+1)
	return line, utf8.RuneCount(p.src[p.lines[line-1]:at]) + 1
}

// line returns the 1-based line of offset at.
func (p *parser) line(at int) int {
	l, _ := p.lineCol(at)
	return l
}

// where describes offset at as "line:col".
func (p *parser) where(at int) string {
	l, c := p.lineCol(at)
	return fmt.Sprintf("%d:%d", l, c)
}

// failf records an error located at offset at (if none is recorded yet) and
// moves to the end of input.
func (p *parser) failf(at int, format string, args ...any) {
	if p.err == nil {
		l, c := p.lineCol(at)
		p.err = fmt.Errorf("%s:%d:%d: %s", p.file.Path, l, c, fmt.Sprintf(format, args...))
	}
	p.pos = len(p.src)
}

// expected records "expected what, found <the next character>".
func (p *parser) expected(what string) {
	found := "end of file"
	if !p.eof() {
		r, _ := utf8.DecodeRune(p.src[p.pos:])
		found = strconv.QuoteRune(r)
		if r == '\n' {
			found = "newline"
		}
	}
	p.failf(p.pos, "expected %s, found %s", what, found)
}

// eof reports whether the input is used up.
func (p *parser) eof() bool { return p.pos >= len(p.src) }

// peek returns the next byte, or 0 at end of input.
func (p *parser) peek() byte {
	if p.eof() {
		return 0
	}
	return p.src[p.pos]
}

// has reports whether the input at p.pos starts with s.
func (p *parser) has(s string) bool {
	return bytes.HasPrefix(p.src[min(p.pos, len(p.src)):], []byte(s))
}

// expect consumes c, or records what was expected.
func (p *parser) expect(c byte, what string) {
	if p.peek() != c {
		p.expected(what)
		return
	}
	p.pos++
}

// skipBlank skips spaces, comments and '#' directives, and newlines when nl is
// set; it reports whether a skipped block comment held a newline.
func (p *parser) skipBlank(nl bool) (sawNL bool) {
	for !p.eof() {
		switch c := p.peek(); {
		case c == ' ' || c == '\t' || c == '\r' || (nl && c == '\n'):
			p.pos++
		case p.has("//") || c == '#':
			for !p.eof() && p.peek() != '\n' {
				p.pos++
			}
		case p.has("/*"):
			end := bytes.Index(p.src[p.pos+2:], []byte("*/"))
			if end < 0 {
				p.failf(p.pos, "unterminated comment: expected */")
				return false
			}
			sawNL = sawNL || bytes.IndexByte(p.src[p.pos:p.pos+2+end], '\n') >= 0
			p.pos += end + 4
		default:
			return sawNL
		}
	}
	return sawNL
}

// identByte reports whether c may be in an identifier (at its start if first).
func identByte(c byte, first bool) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && digit(c)
}

// digit reports whether c is an ASCII digit.
func digit(c byte) bool { return c >= '0' && c <= '9' }

// ident consumes an identifier and returns it, or "" if none is here.
func (p *parser) ident() string {
	start := p.pos
	for identByte(p.peek(), p.pos == start) {
		p.pos++
	}
	return string(p.src[start:p.pos])
}

// keyword consumes the identifier kw if it is next, reporting whether it was.
func (p *parser) keyword(kw string) bool {
	end := p.pos + len(kw)
	if !p.has(kw) || end < len(p.src) && identByte(p.src[end], false) {
		return false
	}
	p.pos = end
	return true
}

// parseFile parses statements until end of input, attaching decorators to
// the statement after them.
func (p *parser) parseFile() {
	var decs []Decorator
	for p.skipBlank(true); !p.eof(); p.skipBlank(true) {
		if p.peek() == '@' {
			decs = append(decs, p.parseDecorator())
			continue
		}
		p.parseStatement(decs)
		decs = nil
		if !p.skipBlank(false) && !p.eof() && p.peek() != '\n' {
			p.expected("end of line")
		}
	}
	if len(decs) > 0 {
		p.expected("a declaration after decorator")
	}
}

// parseStatement parses one top-level statement from its keyword on.
func (p *parser) parseStatement(decs []Decorator) {
	at := p.pos
	switch p.ident() {
	case "targetScope":
		p.file.TargetScope = p.parseAssign()
	case "param":
		prm := &Param{Name: p.name("a parameter name"), Decorators: decs, Line: p.line(at)}
		prm.Type = p.parseType()
		if prm.HasDefault = p.peek() == '='; prm.HasDefault {
			prm.Default = p.parseAssign()
		}
		p.file.Params = append(p.file.Params, prm)
	case "var":
		v := &Var{Name: p.name("a variable name"), Line: p.line(at)}
		if p.skipBlank(false); p.peek() != '=' { // typed: `var x string = ...`
			p.parseType()
		}
		v.Value = p.parseAssign()
		p.file.Vars = append(p.file.Vars, v)
	case "output":
		o := &Output{Name: p.name("an output name"), Decorators: decs, Line: p.line(at)}
		o.Type = p.parseType()
		o.Value = p.parseAssign()
		p.file.Outputs = append(p.file.Outputs, o)
	case "resource":
		p.parseResource(at, decs)
	case "module":
		m := &Module{Symbol: p.name("a module symbolic name"), Decorators: decs, Line: p.line(at)}
		m.Path = p.plainString("a module path string")
		p.skipBlank(false)
		p.expect('=', "'='")
		p.file.Modules = append(p.file.Modules, m)
		m.Body, m.Condition, m.Loop = p.parseBody(false)
	case "metadata", "import", "type", "func", "extension", "provider", "using", "assert":
		p.scanExpr("", false)
	default:
		p.pos = at
		p.expected("a statement keyword")
	}
}

// parseAssign parses `= value`.
func (p *parser) parseAssign() Value {
	p.skipBlank(false)
	p.expect('=', "'='")
	p.skipBlank(false)
	return p.parseValue()
}

// name parses the identifier naming a declaration.
func (p *parser) name(what string) string {
	p.skipBlank(false)
	n := p.ident()
	if n == "" {
		p.expected(what)
	}
	return n
}

// parseType scans a type up to '=' or the end of the line.
func (p *parser) parseType() string {
	typ := p.scanExpr("=", false)
	if typ == "" {
		p.expected("a type")
	}
	return typ
}

// plainString parses a string literal without interpolation.
func (p *parser) plainString(what string) string {
	p.skipBlank(false)
	at := p.pos
	if p.peek() != '\'' {
		p.expected(what)
		return ""
	}
	s, interp := p.scanString()
	if interp {
		p.failf(at, "expected %s without interpolation", what)
	}
	return s
}

// parseResource parses a resource declaration after its keyword (at is the
// keyword's offset), as a child of the innermost of p.parents if any.
func (p *parser) parseResource(at int, decs []Decorator) {
	r := &Resource{Symbol: p.name("a resource symbolic name"), Decorators: decs, Line: p.line(at)}
	p.skipBlank(false)
	typAt := p.pos
	typ := p.plainString("'type@apiVersion'")
	var parent *Resource
	if n := len(p.parents); n > 0 {
		parent = p.parents[n-1]
		r.Symbol = parent.Symbol + "::" + r.Symbol
	}
	r.Type, r.APIVersion = p.splitType(typAt, typ, parent)
	p.skipBlank(false)
	r.Existing = p.keyword("existing")
	p.skipBlank(false)
	p.expect('=', "'='")
	p.file.Resources = append(p.file.Resources, r)
	p.parents = append(p.parents, r)
	r.Body, r.Condition, r.Loop = p.parseBody(true)
	p.parents = p.parents[:len(p.parents)-1]
}

// splitType splits 'type@version'; a child resource's type is relative to
// its parent's and may omit the version.
func (p *parser) splitType(at int, s string, parent *Resource) (typ, ver string) {
	i := strings.LastIndexByte(s, '@')
	switch {
	case i > 0 && i < len(s)-1:
		typ, ver = s[:i], s[i+1:]
	case i < 0 && parent != nil:
		typ, ver = s, parent.APIVersion
	default:
		p.failf(at, "expected 'type@apiVersion', found %q", s)
	}
	if parent != nil && !strings.Contains(typ, "/") {
		typ = parent.Type + "/" + typ
	}
	return typ, ver
}

// parseBody parses what follows a resource's or module's '=': `{...}`,
// `if (cond) {...}` or `[for head: body]`. With nested set, the body may
// declare child resources.
func (p *parser) parseBody(nested bool) (body Value, cond, loop *Expr) {
	p.skipBlank(false)
	if p.peek() != '[' {
		body, cond = p.parseCondBody(nested)
		return body, cond, nil
	}
	open := p.pos
	p.pos++
	if p.skipBlank(true); !p.keyword("for") {
		p.expected("'for'")
	}
	loop = &Expr{Text: p.scanExpr(":", false)}
	p.expect(':', "':' after the loop head")
	p.skipBlank(true)
	body, cond = p.parseCondBody(nested)
	p.skipBlank(true)
	p.expect(']', "']' to close '[' at "+p.where(open))
	return body, cond, loop
}

// parseCondBody parses an object body, optionally preceded by `if (cond)`.
func (p *parser) parseCondBody(nested bool) (Value, *Expr) {
	var cond *Expr
	if p.keyword("if") {
		p.skipBlank(false)
		p.expect('(', "'(' after 'if'")
		cond = &Expr{Text: p.scanExpr("", true)}
		p.expect(')', "')' to close the condition")
		p.skipBlank(false)
	}
	if p.peek() != '{' {
		p.expected("'{'")
		return nil, cond
	}
	start := p.pos
	body, ok := p.parseObject(nested)
	return p.orExpr(start, body, ok), cond
}

// parseDecorator parses `@name(args)` or `@ns.name(args)`.
func (p *parser) parseDecorator() Decorator {
	p.pos++ // '@'
	d := Decorator{Name: p.ident()}
	for d.Name != "" && p.peek() == '.' {
		p.pos++
		d.Name += "." + p.ident()
	}
	if d.Name == "" || strings.HasSuffix(d.Name, ".") {
		p.expected("a decorator name")
	}
	p.expect('(', "'(' after the decorator name")
	for p.skipBlank(true); !p.eof() && p.peek() != ')'; p.skipBlank(true) {
		d.Args = append(d.Args, p.parseValue())
		if p.skipBlank(true); p.peek() == ',' {
			p.pos++
		} else if p.peek() != ')' {
			p.expected("',' or ')'")
		}
	}
	p.expect(')', "')'")
	return d
}

// parseValue parses a literal, or else the expression at p.pos as Expr.
// A literal followed on its line by more than a separator is an expression.
func (p *parser) parseValue() Value {
	start := p.pos
	v, ok := p.parseLiteral()
	if end := p.pos; ok {
		nl := p.skipBlank(false)
		ok = nl || p.eof() || strings.IndexByte("\n,)]}", p.peek()) >= 0
		p.pos = end
	}
	return p.orExpr(start, v, ok)
}

// orExpr returns v if it is a literal (ok), else rescans from start as an expression.
func (p *parser) orExpr(start int, v Value, ok bool) Value {
	if ok || p.err != nil {
		return v
	}
	p.pos = start
	text := p.scanExpr(",", false)
	if text == "" {
		p.expected("a value")
	}
	return Expr{Text: text}
}

// parseLiteral parses a literal at p.pos; ok is false if none starts here.
func (p *parser) parseLiteral() (v Value, ok bool) {
	switch c := p.peek(); {
	case c == '{':
		return p.parseObject(false)
	case c == '[':
		return p.parseArray()
	case c == '\'':
		s, interp := p.scanString()
		return s, !interp
	case c == '-' || digit(c):
		return p.parseInt()
	}
	switch p.ident() {
	case "true":
		return true, true
	case "false":
		return false, true
	case "null":
		return nil, true
	}
	return nil, false
}

// parseInt parses an optionally negative 64-bit integer.
func (p *parser) parseInt() (Value, bool) {
	start := p.pos
	if p.peek() == '-' {
		p.pos++
	}
	digits := p.pos
	for digit(p.peek()) {
		p.pos++
	}
	if p.pos == digits {
		return nil, false
	}
	n, err := strconv.ParseInt(string(p.src[start:p.pos]), 10, 64)
	if err != nil {
		p.failf(start, "expected a 64-bit integer: %v", err)
	}
	return n, true
}

// parseObject parses `{ key: value ... }`; ok is false for objects kept as
// expressions (spread, interpolated keys). With nested set, `resource`
// declarations become child resources instead of properties.
func (p *parser) parseObject(nested bool) (v Value, ok bool) {
	open := p.pos
	p.pos++
	obj := Object{Values: map[string]Value{}}
	var decs []Decorator
	for p.skipBlank(true); !p.eof() && p.peek() != '}'; p.skipBlank(true) {
		if p.has("...") {
			return nil, false
		}
		if p.peek() == '@' {
			decs = append(decs, p.parseDecorator())
			continue
		}
		keyAt := p.pos
		key, ok := p.parseKey()
		if !ok {
			return nil, false
		}
		if p.skipBlank(false); nested && key == "resource" && identByte(p.peek(), true) {
			p.parseResource(keyAt, decs)
		} else {
			p.parseProperty(&obj, key, keyAt)
		}
		decs = nil
		p.endItem('}')
	}
	p.expect('}', "'}' to close '{' at "+p.where(open))
	return obj, true
}

// parseKey parses a property name: an identifier or a string; ok is false
// for an interpolated key.
func (p *parser) parseKey() (key string, ok bool) {
	if p.peek() == '\'' {
		s, interp := p.scanString()
		return s, !interp
	}
	if key = p.ident(); key == "" {
		p.expected("a property name or '}'")
	}
	return key, true
}

// parseProperty parses `: value` and adds it to obj under a new key.
func (p *parser) parseProperty(obj *Object, key string, keyAt int) {
	if _, dup := obj.Values[key]; dup {
		p.failf(keyAt, "duplicate property %q: expected unique keys", key)
	}
	p.expect(':', "':' after the property name")
	p.skipBlank(false)
	obj.Keys = append(obj.Keys, key)
	obj.Values[key] = p.parseValue()
}

// endItem consumes what ends an object or array item: a ',' or a newline,
// or (left in place) the closer.
func (p *parser) endItem(closer byte) {
	switch nl := p.skipBlank(false); {
	case p.peek() == ',':
		p.pos++
	case !nl && !p.eof() && p.peek() != '\n' && p.peek() != closer:
		p.expected(fmt.Sprintf("newline, ',' or '%c'", closer))
	}
}

// parseArray parses `[ item ... ]`; ok is false for a `[for ...]` loop or a spread.
func (p *parser) parseArray() (v Value, ok bool) {
	open := p.pos
	p.pos++
	arr := Array{}
	if p.skipBlank(true); p.keyword("for") {
		return nil, false
	}
	for ; !p.eof() && p.peek() != ']'; p.skipBlank(true) {
		if p.has("...") {
			return nil, false
		}
		arr = append(arr, p.parseValue())
		p.endItem(']')
	}
	p.expect(']', "']' to close '[' at "+p.where(open))
	return arr, true
}

// scanString consumes a string literal and returns its decoded value, which
// is meaningful only when interp (the string has `${...}` holes) is false.
func (p *parser) scanString() (s string, interp bool) {
	start := p.pos
	if p.has("'''") {
		end := bytes.Index(p.src[p.pos+3:], []byte("'''"))
		if end < 0 {
			p.failf(start, "unterminated multi-line string: expected closing '''")
			return "", false
		}
		s = string(p.src[p.pos+3 : p.pos+3+end])
		p.pos += end + 6
		if t, ok := strings.CutPrefix(s, "\r\n"); ok { // a first newline is skipped
			return t, false
		}
		return strings.TrimPrefix(s, "\n"), false
	}
	var b strings.Builder
	for p.pos++; p.err == nil; {
		switch c := p.peek(); {
		case p.eof() || c == '\n':
			p.failf(start, "unterminated string: expected closing '")
		case c == '\'':
			p.pos++
			return b.String(), interp
		case c == '\\':
			p.scanEscape(&b)
		case p.has("${"):
			p.pos += 2
			p.scanExpr("", false)
			p.expect('}', "'}' to close '${'")
			interp = true
		default:
			b.WriteByte(c)
			p.pos++
		}
	}
	return "", false
}

// scanEscape decodes the escape sequence at p.pos into b.
func (p *parser) scanEscape(b *strings.Builder) {
	at := p.pos
	if at+1 >= len(p.src) {
		p.failf(at, "unterminated string: expected an escape after '\\'")
		return
	}
	p.pos += 2
	switch c := p.src[at+1]; c {
	case '\'', '\\', '$':
		b.WriteByte(c)
	case 'n':
		b.WriteByte('\n')
	case 'r':
		b.WriteByte('\r')
	case 't':
		b.WriteByte('\t')
	case 'u':
		end := bytes.IndexByte(p.src[p.pos:], '}')
		r, err := uint64(0), error(nil)
		if p.has("{") && end >= 2 {
			r, err = strconv.ParseUint(string(p.src[p.pos+1:p.pos+end]), 16, 32)
		}
		if !p.has("{") || end < 2 || err != nil || r > utf8.MaxRune {
			p.failf(at, "expected \\u{hex} with a valid code point")
			return
		}
		b.WriteRune(rune(r))
		p.pos += end + 1
	default:
		p.failf(at, "expected one of \\' \\\\ \\n \\r \\t \\$ \\u{...} as escape")
	}
}

// scanExpr consumes balanced source text up to, at bracket depth 0, an
// unmatched closer, a byte of stops, or a newline (unless multiline), and
// returns it whitespace-normalized; strings are copied verbatim.
func (p *parser) scanExpr(stops string, multiline bool) string {
	var buf []byte
	var open []int // offsets of unclosed brackets
	for !p.eof() {
		c, depth := p.peek(), len(open)
		if depth == 0 && stops == "," && juxtaposed(buf, c) {
			p.expected("an operator, ',' or end of line")
			return ""
		}
		switch {
		case c == '\'':
			start := p.pos
			p.scanString()
			buf = append(buf, p.src[start:p.pos]...)
			continue
		case c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '#' || p.has("//") || p.has("/*"):
			nl := depth > 0 || multiline
			if sawNL := p.skipBlank(nl); !nl && (sawNL || p.peek() == '\n') {
				return p.endScan(buf, open)
			}
			if len(buf) > 0 && buf[len(buf)-1] != ' ' {
				buf = append(buf, ' ')
			}
			continue
		case strings.IndexByte("([{", c) >= 0:
			open = append(open, p.pos)
		case strings.IndexByte(")]}", c) >= 0:
			if depth == 0 {
				return p.endScan(buf, open)
			}
			if o := p.src[open[depth-1]]; c != closer(o) {
				p.expected(fmt.Sprintf("'%c' to close '%c' at %s", closer(o), o, p.where(open[depth-1])))
				return ""
			}
			open = open[:depth-1]
		case depth == 0 && p.isStop(stops):
			return p.endScan(buf, open)
		}
		buf = append(buf, c)
		p.pos++
	}
	return p.endScan(buf, open)
}

// endScan finishes scanExpr, requiring its brackets to be balanced.
func (p *parser) endScan(buf []byte, open []int) string {
	if n := len(open); n > 0 {
		o := p.src[open[n-1]]
		p.expected(fmt.Sprintf("'%c' to close '%c' at %s", closer(o), o, p.where(open[n-1])))
	}
	return strings.TrimSpace(string(buf))
}

// isStop reports whether the byte at p.pos is in stops and not part of a
// two-byte operator such as "==", "=>", "<=", "!=" or "::".
func (p *parser) isStop(stops string) bool {
	c, next, prev := p.peek(), byte(0), byte(0)
	if strings.IndexByte(stops, c) < 0 {
		return false
	}
	if p.pos+1 < len(p.src) {
		next = p.src[p.pos+1]
	}
	if p.pos > 0 {
		prev = p.src[p.pos-1]
	}
	switch c {
	case '=':
		return next != '=' && next != '>' && strings.IndexByte("=!<>", prev) < 0
	case ':':
		return next != ':' && prev != ':'
	}
	return true
}

// juxtaposed reports whether c starts an operand right after an operand and
// a space, which no value expression allows at bracket depth 0 (e.g. "1 c").
func juxtaposed(buf []byte, c byte) bool {
	n := len(buf)
	if n < 2 || buf[n-1] != ' ' || (c != '\'' && !identByte(c, false)) {
		return false
	}
	prev := buf[n-2]
	return prev == '\'' || identByte(prev, false) || strings.IndexByte(")]}", prev) >= 0
}

// closer returns the bracket closing the opener o.
func closer(o byte) byte {
	switch o {
	case '(':
		return ')'
	case '[':
		return ']'
	}
	return '}'
}
