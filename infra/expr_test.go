package infra

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// evalExpr evaluates the part of Bicep's expression language the
// deployment's switches are written in: identifiers bound in env, true,
// false, null, strings, !, &&, ||, ?: and parentheses, and the functions
// empty and fail. Only the branch a condition takes is evaluated, as ARM
// evaluates if(); fail(message) evaluated is an error holding message.
// Anything else is an error, so a switch rewritten beyond this subset fails
// its test instead of passing unread.
func evalExpr(src string, env map[string]any) (any, error) {
	toks, err := exprTokens(src)
	if err != nil {
		return nil, err
	}
	p := &exprParser{toks: toks, env: env}
	v, err := p.ternary(true)
	if err == nil && p.pos < len(p.toks) {
		err = fmt.Errorf("unexpected %q in %q", p.toks[p.pos], src)
	}
	return v, err
}

// errFail marks the error of an evaluated fail().
var errFail = errors.New("fail")

// exprTokens splits src into identifiers, strings (quotes kept) and operators.
func exprTokens(src string) ([]string, error) {
	var toks []string
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ':
			i++
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i + 1
			for j < len(src) && (src[j] == '_' || src[j] >= 'a' && src[j] <= 'z' || src[j] >= 'A' && src[j] <= 'Z' || src[j] >= '0' && src[j] <= '9') {
				j++
			}
			toks, i = append(toks, src[i:j]), j
		case c == '\'':
			j := i + 1
			for j < len(src) && src[j] != '\'' {
				if src[j] == '\\' || src[j] == '$' {
					return nil, fmt.Errorf("escape or interpolation in %q is not supported", src)
				}
				j++
			}
			if j == len(src) {
				return nil, fmt.Errorf("unterminated string in %q", src)
			}
			toks, i = append(toks, src[i:j+1]), j+1
		case strings.HasPrefix(src[i:], "&&") || strings.HasPrefix(src[i:], "||"):
			toks, i = append(toks, src[i:i+2]), i+2
		case strings.IndexByte("()?:!,", c) >= 0:
			toks, i = append(toks, src[i:i+1]), i+1
		default:
			return nil, fmt.Errorf("unsupported %q in %q", c, src)
		}
	}
	return toks, nil
}

// exprParser evaluates while it parses; live is false in a branch not
// taken, which is parsed but not evaluated.
type exprParser struct {
	toks []string
	pos  int
	env  map[string]any
}

func (p *exprParser) next() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return ""
}

func (p *exprParser) accept(tok string) bool {
	if p.next() == tok {
		p.pos++
		return true
	}
	return false
}

func (p *exprParser) expect(tok string) error {
	if !p.accept(tok) {
		return fmt.Errorf("expected %q, found %q", tok, p.next())
	}
	return nil
}

// condition is v as a condition, which must be a bool when live.
func condition(v any, live bool) (bool, error) {
	b, ok := v.(bool)
	if live && !ok {
		return false, fmt.Errorf("condition %#v is not a bool", v)
	}
	return b, nil
}

func (p *exprParser) ternary(live bool) (any, error) {
	c, err := p.binary(live, "||")
	if err != nil || !p.accept("?") {
		return c, err
	}
	cond, err := condition(c, live)
	if err != nil {
		return nil, err
	}
	yes, err := p.ternary(live && cond)
	if err != nil {
		return nil, err
	}
	if err := p.expect(":"); err != nil {
		return nil, err
	}
	no, err := p.ternary(live && !cond)
	if cond {
		return yes, err
	}
	return no, err
}

// binary parses a chain of op ("||", or "&&" below it), short-circuiting:
// "||" is decided by a true operand, "&&" by a false one.
func (p *exprParser) binary(live bool, op string) (any, error) {
	operand := func(live bool) (any, error) {
		if op == "||" {
			return p.binary(live, "&&")
		}
		return p.unary(live)
	}
	v, err := operand(live)
	if err != nil {
		return nil, err
	}
	for p.accept(op) {
		l, err := condition(v, live)
		if err != nil {
			return nil, err
		}
		decided := l == (op == "||")
		r, err := operand(live && !decided)
		if err != nil {
			return nil, err
		}
		if live && !decided {
			if _, err := condition(r, true); err != nil {
				return nil, err
			}
			v = r
		}
	}
	return v, nil
}

func (p *exprParser) unary(live bool) (any, error) {
	if !p.accept("!") {
		return p.primary(live)
	}
	v, err := p.unary(live)
	if err != nil || !live {
		return nil, err
	}
	b, err := condition(v, live)
	return !b, err
}

func (p *exprParser) primary(live bool) (any, error) {
	tok := p.next()
	p.pos++
	switch {
	case tok == "(":
		v, err := p.ternary(live)
		if err == nil {
			err = p.expect(")")
		}
		return v, err
	case strings.HasPrefix(tok, "'"):
		return strings.Trim(tok, "'"), nil
	case tok == "true" || tok == "false":
		return tok == "true", nil
	case tok == "null":
		return nil, nil
	case tok == "" || strings.IndexByte("()?:!,&|", tok[0]) >= 0:
		return nil, fmt.Errorf("expected a value, found %q", tok)
	case p.next() == "(":
		return p.call(tok, live)
	}
	v, ok := p.env[tok]
	if !ok {
		return nil, fmt.Errorf("%s is not bound", tok)
	}
	return v, nil
}

// call evaluates empty(x) or fail(message) after the function's name.
func (p *exprParser) call(name string, live bool) (any, error) {
	p.pos++ // "("
	arg, err := p.ternary(live)
	if err == nil {
		err = p.expect(")")
	}
	if err != nil || !live {
		return nil, err
	}
	switch name {
	case "empty":
		switch a := arg.(type) {
		case nil:
			return true, nil
		case string:
			return a == "", nil
		}
		return nil, fmt.Errorf("empty(%#v) is not supported", arg)
	case "fail":
		return nil, fmt.Errorf("%w: %v", errFail, arg)
	}
	return nil, fmt.Errorf("function %s is not supported", name)
}

// TestEvalExpr holds the evaluator the switch tests rely on to Bicep's
// meaning: short-circuits, precedence, and refusal of the unknown.
func TestEvalExpr(t *testing.T) {
	env := map[string]any{"on": true, "off": false, "s": "x", "none": ""}
	tests := []struct {
		src     string
		want    any
		wantErr string
	}{
		{src: "on ? 'a' : fail('no')", want: "a"},
		{src: "off ? fail('no') : 'b'", want: "b"},
		{src: "off ? (empty(none) ? fail('no') : true) : false", want: false},
		{src: "on ? (empty(none) ? fail('needs s') : true) : false", wantErr: "fail: needs s"},
		{src: "on ? (!empty(s) && !empty(none) ? true : fail('m')) : false", wantErr: "fail: m"},
		{src: "on ? (!empty(s) && empty(none) ? true : fail('m')) : false", want: true},
		{src: "off && fail('no')", want: false},
		{src: "on || fail('no')", want: true},
		{src: "off || on && !off", want: true},
		{src: "on && off || on", want: true},
		{src: "!on || !off", want: true},
		{src: "on && !empty(s) && !empty(none)", want: false},
		{src: "empty(null)", want: true},
		{src: "missing", wantErr: "not bound"},
		{src: "on ? 1 : 2", wantErr: "unsupported"},
		{src: "s ? 'a' : 'b'", wantErr: "not a bool"},
		{src: "s && on", wantErr: "not a bool"},
		{src: "on && s", wantErr: "not a bool"},
		{src: "length(s)", wantErr: "not supported"},
		{src: "on on", wantErr: "unexpected"},
		{src: "(on", wantErr: "expected \")\""},
		{src: "'${s}'", wantErr: "interpolation"},
	}
	for _, tc := range tests {
		t.Run(tc.src, func(t *testing.T) {
			got, err := evalExpr(tc.src, env)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
