package cosmosemu

import (
	"strconv"
	"strings"
	"unicode"

	"github.com/durafeed/durafeed/internal/epk"
)

// pinnedPartitionKey finds partition key values fixed by a query's WHERE
// clause (top-level conjuncts "alias.path = literal-or-@param"), the way the
// gateway's query plan narrows a query without a partition key header to
// one logical partition. It returns the full key, or for hierarchical keys a
// leading prefix, and false when the key is not pinned.
func pinnedPartitionKey(text string, params map[string]any, def pkDefinition) ([]any, bool) {
	toks := lexSQL(text)
	alias := ""
	where := -1
	end := len(toks)
	for i := 0; i < len(toks); i++ {
		up := strings.ToUpper(toks[i].text)
		if toks[i].kind != tkIdent {
			continue
		}
		switch up {
		case "FROM":
			if alias == "" && i+1 < len(toks) && toks[i+1].kind == tkIdent {
				alias = toks[i+1].text
				if i+2 < len(toks) && toks[i+2].kind == tkIdent && !isSQLKeyword(toks[i+2].text) {
					alias = toks[i+2].text
				}
				if i+3 < len(toks) && strings.EqualFold(toks[i+2].text, "AS") && toks[i+3].kind == tkIdent {
					alias = toks[i+3].text
				}
			}
		case "JOIN":
			return nil, false
		case "WHERE":
			if where < 0 {
				where = i + 1
			}
		case "ORDER", "GROUP", "OFFSET":
			if where >= 0 && end == len(toks) {
				end = i
			}
		}
	}
	if alias == "" || where < 0 {
		return nil, false
	}
	clause := toks[where:end]
	// Split into top-level conjuncts; any top-level OR/NOT defeats pinning.
	var conjuncts [][]token
	depth, startIdx := 0, 0
	for i, tk := range clause {
		switch {
		case tk.kind == tkPunct && (tk.text == "(" || tk.text == "["):
			depth++
		case tk.kind == tkPunct && (tk.text == ")" || tk.text == "]"):
			depth--
		case depth == 0 && tk.kind == tkIdent && strings.EqualFold(tk.text, "OR"):
			return nil, false
		case depth == 0 && tk.kind == tkIdent && strings.EqualFold(tk.text, "NOT"):
			return nil, false
		case depth == 0 && tk.kind == tkIdent && strings.EqualFold(tk.text, "AND"):
			conjuncts = append(conjuncts, clause[startIdx:i])
			startIdx = i + 1
		}
	}
	conjuncts = append(conjuncts, clause[startIdx:])
	found := map[string]any{}
	for _, c := range conjuncts {
		for len(c) >= 2 && c[0].text == "(" && c[len(c)-1].text == ")" {
			c = c[1 : len(c)-1]
		}
		if path, val, ok := equality(c, alias, params); ok {
			found[path] = val
		}
	}
	var out []any
	for _, p := range def.Paths {
		v, ok := found[strings.Join(epk.SplitPath(p), "/")]
		if !ok {
			break
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, false
	}
	if len(out) < len(def.Paths) && def.Kind != "MultiHash" {
		return nil, false
	}
	return out, true
}

// equality matches "path = value" or "value = path".
func equality(c []token, alias string, params map[string]any) (string, any, bool) {
	eq := -1
	for i, tk := range c {
		if tk.kind == tkPunct && tk.text == "=" {
			if eq >= 0 {
				return "", nil, false
			}
			eq = i
		}
	}
	if eq <= 0 || eq == len(c)-1 {
		return "", nil, false
	}
	left, right := c[:eq], c[eq+1:]
	if p, ok := propertyPath(left, alias); ok {
		if v, ok := literal(right, params); ok {
			return p, v, true
		}
	}
	if p, ok := propertyPath(right, alias); ok {
		if v, ok := literal(left, params); ok {
			return p, v, true
		}
	}
	return "", nil, false
}

func propertyPath(c []token, alias string) (string, bool) {
	if len(c) < 3 || c[0].kind != tkIdent || c[0].text != alias {
		return "", false
	}
	var segs []string
	for i := 1; i < len(c); {
		switch {
		case c[i].text == "." && i+1 < len(c) && c[i+1].kind == tkIdent:
			segs = append(segs, c[i+1].text)
			i += 2
		case c[i].text == "[" && i+2 < len(c) && c[i+1].kind == tkString && c[i+2].text == "]":
			segs = append(segs, c[i+1].text)
			i += 3
		default:
			return "", false
		}
	}
	return strings.Join(segs, "/"), len(segs) > 0
}

func literal(c []token, params map[string]any) (any, bool) {
	if len(c) == 2 && c[0].text == "-" && c[1].kind == tkNumber {
		f, err := strconv.ParseFloat(c[1].text, 64)
		return -f, err == nil
	}
	if len(c) != 1 {
		return nil, false
	}
	tk := c[0]
	switch tk.kind {
	case tkString:
		return tk.text, true
	case tkNumber:
		f, err := strconv.ParseFloat(tk.text, 64)
		return f, err == nil
	case tkParam:
		v, ok := params[tk.text]
		switch v.(type) {
		case string, float64, bool, nil:
			return v, ok
		}
		return nil, false
	case tkIdent:
		switch strings.ToLower(tk.text) {
		case "true":
			return true, true
		case "false":
			return false, true
		case "null":
			return nil, true
		}
	}
	return nil, false
}

func isSQLKeyword(s string) bool {
	switch strings.ToUpper(s) {
	case "WHERE", "ORDER", "GROUP", "OFFSET", "JOIN", "IN", "AS", "LIMIT":
		return true
	}
	return false
}

type tokenKind int

const (
	tkIdent tokenKind = iota
	tkString
	tkNumber
	tkParam
	tkPunct
)

type token struct {
	kind tokenKind
	text string
}

// lexSQL is a small tokenizer sufficient to find WHERE-clause equalities;
// it never fails (unknown characters become punctuation).
func lexSQL(s string) []token {
	var out []token
	r := []rune(s)
	for i := 0; i < len(r); {
		c := r[i]
		switch {
		case unicode.IsSpace(c):
			i++
		case c == '-' && i+1 < len(r) && r[i+1] == '-':
			for i < len(r) && r[i] != '\n' {
				i++
			}
		case c == '\'' || c == '"':
			q := c
			var b strings.Builder
			i++
			for i < len(r) && r[i] != q {
				if r[i] == '\\' && i+1 < len(r) {
					i++
					switch r[i] {
					case 'n':
						b.WriteRune('\n')
					case 't':
						b.WriteRune('\t')
					case 'r':
						b.WriteRune('\r')
					default:
						b.WriteRune(r[i])
					}
					i++
					continue
				}
				b.WriteRune(r[i])
				i++
			}
			i++
			out = append(out, token{tkString, b.String()})
		case c == '@':
			j := i + 1
			for j < len(r) && (unicode.IsLetter(r[j]) || unicode.IsDigit(r[j]) || r[j] == '_') {
				j++
			}
			out = append(out, token{tkParam, string(r[i:j])})
			i = j
		case unicode.IsDigit(c):
			j := i
			for j < len(r) && (unicode.IsDigit(r[j]) || r[j] == '.' || r[j] == 'e' || r[j] == 'E' ||
				((r[j] == '+' || r[j] == '-') && j > i && (r[j-1] == 'e' || r[j-1] == 'E'))) {
				j++
			}
			out = append(out, token{tkNumber, string(r[i:j])})
			i = j
		case unicode.IsLetter(c) || c == '_':
			j := i
			for j < len(r) && (unicode.IsLetter(r[j]) || unicode.IsDigit(r[j]) || r[j] == '_') {
				j++
			}
			out = append(out, token{tkIdent, string(r[i:j])})
			i = j
		default:
			if (c == '!' || c == '<' || c == '>') && i+1 < len(r) && r[i+1] == '=' {
				out = append(out, token{tkPunct, string(r[i : i+2])})
				i += 2
				continue
			}
			out = append(out, token{tkPunct, string(c)})
			i++
		}
	}
	return out
}
