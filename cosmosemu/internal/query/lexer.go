package query

import (
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// tokKind classifies a lexical token.
type tokKind uint8

const (
	tEOF     tokKind = iota
	tIdent           // identifier (not a keyword)
	tKeyword         // reserved keyword; text holds the upper-cased keyword
	tNumber          // numeric literal; num holds the value
	tString          // string literal; text holds the decoded value
	tParam           // @name; text holds "@name"
	tPunct           // operator or punctuation; text holds it
)

// token is one lexical unit of a query text.
type token struct {
	kind tokKind
	text string  // normalised text (see tokKind)
	raw  string  // text as written in the query, for error messages
	num  float64 // value of a tNumber
	pos  int     // byte offset in the query text
}

// isKeyword reports whether the upper-cased word is a reserved keyword of the
// dialect (case-insensitive). Keywords can not be used as identifiers, not
// even after a dot: c.value is a syntax error in the service too and
// c["value"] must be used.
func isKeyword(up string) bool {
	switch up {
	case "AND", "ARRAY", "AS", "ASC", "BETWEEN", "BY", "DESC", "DISTINCT",
		"ESCAPE", "EXISTS", "FROM", "GROUP", "IN", "JOIN", "LEFT", "LIKE",
		"LIMIT", "NOT", "OFFSET", "OR", "ORDER", "RANK", "RIGHT", "SELECT",
		"TOP", "VALUE", "WHERE":
		return true
	}
	return false
}

// isLiteralKeyword reports whether word is one of the literal keywords, which
// the service's grammar only recognises in lower case (TRUE is an identifier).
func isLiteralKeyword(word string) bool {
	switch word {
	case "true", "false", "null", "undefined", "udf":
		return true
	}
	return false
}

// multiCharPunct returns the multi-character operator starting s, if any.
func multiCharPunct(s string) string {
	if strings.HasPrefix(s, ">>>") {
		return ">>>"
	}
	if len(s) >= 2 {
		switch s[:2] {
		case "<=", ">=", "!=", "<>", "||", "??", "<<", ">>":
			return s[:2]
		}
	}
	return ""
}

const singleCharPuncts = "()[]{},.:?*/%+-<>=&|^~"

// lex splits text into tokens. The final token is always tEOF.
func lex(text string) ([]token, error) {
	toks := make([]token, 0, len(text)/3+2)
	i := 0
	for i < len(text) {
		c := text[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
			continue
		case c == '-' && i+1 < len(text) && text[i+1] == '-':
			// line comment
			for i < len(text) && text[i] != '\n' {
				i++
			}
			continue
		case isIdentStart(c):
			start := i
			for i < len(text) && isIdentPart(text[i]) {
				i++
			}
			word := text[start:i]
			up := strings.ToUpper(word)
			switch {
			case isKeyword(up):
				toks = append(toks, token{kind: tKeyword, text: up, raw: word, pos: start})
			case isLiteralKeyword(word):
				toks = append(toks, token{kind: tKeyword, text: word, raw: word, pos: start})
			default:
				toks = append(toks, token{kind: tIdent, text: word, raw: word, pos: start})
			}
			continue
		case c == '@':
			start := i
			i++
			if i >= len(text) || !isIdentStart(text[i]) {
				return nil, syntaxErrorNear(text[start:i])
			}
			for i < len(text) && isIdentPart(text[i]) {
				i++
			}
			toks = append(toks, token{kind: tParam, text: text[start:i], raw: text[start:i], pos: start})
			continue
		case isDigit(c) || (c == '.' && i+1 < len(text) && isDigit(text[i+1])):
			start := i
			tok, next, err := lexNumber(text, i)
			if err != nil {
				return nil, err
			}
			tok.pos = start
			toks = append(toks, tok)
			i = next
			continue
		case c == '\'' || c == '"':
			start := i
			s, next, err := lexString(text, i)
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{kind: tString, text: s, raw: text[start:next], pos: start})
			i = next
			continue
		}
		matched := false
		if p := multiCharPunct(text[i:]); p != "" {
			toks = append(toks, token{kind: tPunct, text: p, raw: p, pos: i})
			i += len(p)
			matched = true
		}
		if !matched && strings.IndexByte(singleCharPuncts, c) >= 0 {
			toks = append(toks, token{kind: tPunct, text: text[i : i+1], raw: text[i : i+1], pos: i})
			i++
			matched = true
		}
		if !matched {
			_, size := utf8.DecodeRuneInString(text[i:])
			return nil, syntaxErrorNear(text[i : i+size])
		}
	}
	toks = append(toks, token{kind: tEOF, pos: len(text)})
	return toks, nil
}

func isIdentStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdentPart(c byte) bool { return isIdentStart(c) || isDigit(c) }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// lexNumber scans DIGIT+ ('.' DIGIT*)? (E [-+]? DIGIT+)? or '.' DIGIT+ (E ...)?,
// and also 0x-prefixed hexadecimal integers.
func lexNumber(text string, i int) (token, int, error) {
	start := i
	if text[i] == '0' && i+1 < len(text) && (text[i+1] == 'x' || text[i+1] == 'X') {
		j := i + 2
		for j < len(text) && isHex(text[j]) {
			j++
		}
		if j == i+2 || (j < len(text) && isIdentPart(text[j])) {
			return token{}, 0, syntaxErrorNear(text[start:min(j+1, len(text))])
		}
		v, err := strconv.ParseUint(text[i+2:j], 16, 64)
		if err != nil {
			return token{}, 0, syntaxErrorNear(text[start:j])
		}
		return token{kind: tNumber, num: float64(v), raw: text[start:j]}, j, nil
	}
	for i < len(text) && isDigit(text[i]) {
		i++
	}
	if i < len(text) && text[i] == '.' {
		i++
		for i < len(text) && isDigit(text[i]) {
			i++
		}
	}
	if i < len(text) && (text[i] == 'e' || text[i] == 'E') {
		j := i + 1
		if j < len(text) && (text[j] == '+' || text[j] == '-') {
			j++
		}
		if j < len(text) && isDigit(text[j]) {
			for j < len(text) && isDigit(text[j]) {
				j++
			}
			i = j
		}
	}
	if i < len(text) && isIdentStart(text[i]) {
		// 12abc: the service reports the number+letters as the bad token.
		j := i
		for j < len(text) && isIdentPart(text[j]) {
			j++
		}
		return token{}, 0, syntaxErrorNear(text[start:j])
	}
	raw := text[start:i]
	v, err := strconv.ParseFloat(raw, 64)
	if err != nil {
		// Only range errors are possible here; ±Inf is not a JSON number.
		return token{}, 0, syntaxErrorNear(raw)
	}
	return token{kind: tNumber, num: v, raw: raw}, i, nil
}

func isHex(c byte) bool {
	return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// lexString decodes a '...' or "..." literal starting at text[i] with JSON-style
// escapes (\' is accepted too). It returns the value and the index after the
// closing quote.
func lexString(text string, i int) (string, int, error) {
	quote := text[i]
	start := i
	i++
	var b strings.Builder
	for {
		if i >= len(text) {
			return "", 0, syntaxErrorNear(text[start:])
		}
		c := text[i]
		switch {
		case c == quote:
			return b.String(), i + 1, nil
		case c == '\\':
			if i+1 >= len(text) {
				return "", 0, syntaxErrorNear(text[start:])
			}
			e := text[i+1]
			i += 2
			switch e {
			case '\'', '"', '\\', '/':
				b.WriteByte(e)
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'u':
				r, ok := hex4(text, i)
				if !ok {
					return "", 0, syntaxErrorNear(text[start:min(i+4, len(text))])
				}
				i += 4
				if utf16.IsSurrogate(r) {
					// try to combine with a following \uXXXX low surrogate
					if i+6 <= len(text) && text[i] == '\\' && text[i+1] == 'u' {
						if r2, ok := hex4(text, i+2); ok {
							if c := utf16.DecodeRune(r, r2); c != utf8.RuneError {
								b.WriteRune(c)
								i += 6
								continue
							}
						}
					}
					b.WriteRune(utf8.RuneError)
					continue
				}
				b.WriteRune(r)
			default:
				return "", 0, syntaxErrorNear(text[i-2 : i])
			}
		case c < 0x20:
			return "", 0, syntaxErrorNear(text[start : i+1])
		default:
			b.WriteByte(c)
			i++
		}
	}
}

func hex4(text string, i int) (rune, bool) {
	if i+4 > len(text) {
		return 0, false
	}
	v, err := strconv.ParseUint(text[i:i+4], 16, 32)
	if err != nil {
		return 0, false
	}
	return rune(v), true
}
