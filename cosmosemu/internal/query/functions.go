package query

import (
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
)

// builtin describes a built-in scalar function. Exactly one of fn1, fn2 and
// fnN is set; fn1/fn2 are used when the call has exactly 1/2 arguments.
type builtin struct {
	name    string // canonical (upper-case) name
	minArgs int
	maxArgs int // -1: unbounded
	fn1     func(a any) any
	fn2     func(a, b any) any
	fnN     func(args []any) any
}

// isAggregateName reports whether the upper-cased name is an aggregate function.
func isAggregateName(up string) bool {
	switch up {
	case "COUNT", "SUM", "MIN", "MAX", "AVG":
		return true
	}
	return false
}

// lookupBuiltin returns the built-in scalar function with the given
// upper-cased name. Function names are case-insensitive.
func lookupBuiltin(up string) (builtin, bool) {
	b := builtin{name: up}
	switch up {
	// type checking
	case "IS_DEFINED":
		b.fn1 = func(a any) any { return kindOf(a) != kUndefined }
	case "IS_NULL":
		b.fn1 = func(a any) any { return kindOf(a) == kNull }
	case "IS_BOOL":
		b.fn1 = func(a any) any { return kindOf(a) == kBool }
	case "IS_NUMBER":
		b.fn1 = func(a any) any { return kindOf(a) == kNumber }
	case "IS_STRING":
		b.fn1 = func(a any) any { return kindOf(a) == kString }
	case "IS_ARRAY":
		b.fn1 = func(a any) any { return kindOf(a) == kArray }
	case "IS_OBJECT":
		b.fn1 = func(a any) any { return kindOf(a) == kObject }
	case "IS_PRIMITIVE":
		b.fn1 = func(a any) any {
			k := kindOf(a)
			return k == kNull || k == kBool || k == kNumber || k == kString
		}
	case "IS_FINITE_NUMBER":
		b.fn1 = func(a any) any {
			f, ok := toNumber(a)
			return ok && !math.IsInf(f, 0) && !math.IsNaN(f)
		}
	case "IS_INTEGER":
		b.fn1 = func(a any) any {
			f, ok := toNumber(a)
			return ok && f == math.Trunc(f) && math.Abs(f) <= 1<<53
		}

	// strings
	case "STARTSWITH":
		b.minArgs, b.maxArgs, b.fnN = 2, 3, func(args []any) any {
			return stringPredicate(args, strings.HasPrefix)
		}
	case "ENDSWITH":
		b.minArgs, b.maxArgs, b.fnN = 2, 3, func(args []any) any {
			return stringPredicate(args, strings.HasSuffix)
		}
	case "CONTAINS":
		b.minArgs, b.maxArgs, b.fnN = 2, 3, func(args []any) any {
			return stringPredicate(args, strings.Contains)
		}
	case "STRINGEQUALS":
		b.minArgs, b.maxArgs, b.fnN = 2, 3, func(args []any) any {
			return stringPredicate(args, func(a, b string) bool { return a == b })
		}
	case "LOWER":
		b.fn1 = stringFn(strings.ToLower)
	case "UPPER":
		b.fn1 = stringFn(strings.ToUpper)
	case "TRIM":
		b.fn1 = stringFn(strings.TrimSpace)
	case "LTRIM":
		b.fn1 = stringFn(func(s string) string { return strings.TrimLeft(s, " \t\n\r\v\f") })
	case "RTRIM":
		b.fn1 = stringFn(func(s string) string { return strings.TrimRight(s, " \t\n\r\v\f") })
	case "REVERSE":
		b.fn1 = stringFn(func(s string) string {
			u := utf16Of(s)
			for i, j := 0, len(u)-1; i < j; i, j = i+1, j-1 {
				u[i], u[j] = u[j], u[i]
			}
			return string(utf16.Decode(u))
		})
	case "LENGTH":
		b.fn1 = func(a any) any {
			s, ok := a.(string)
			if !ok {
				return Undefined
			}
			return float64(utf16Len(s))
		}
	case "CONCAT":
		b.minArgs, b.maxArgs, b.fnN = 2, -1, func(args []any) any {
			var sb strings.Builder
			for _, a := range args {
				s, ok := a.(string)
				if !ok {
					return Undefined
				}
				sb.WriteString(s)
			}
			return sb.String()
		}
	case "SUBSTRING":
		b.minArgs, b.maxArgs, b.fnN = 3, 3, func(args []any) any {
			s, ok := args[0].(string)
			start, ok2 := toNumber(args[1])
			length, ok3 := toNumber(args[2])
			if !ok || !ok2 || !ok3 {
				return Undefined
			}
			return substring(s, start, length)
		}
	case "LEFT":
		b.fn2 = func(a, n any) any {
			s, ok := a.(string)
			l, ok2 := toNumber(n)
			if !ok || !ok2 {
				return Undefined
			}
			return substring(s, 0, l)
		}
	case "RIGHT":
		b.fn2 = func(a, n any) any {
			s, ok := a.(string)
			l, ok2 := toNumber(n)
			if !ok || !ok2 {
				return Undefined
			}
			total := float64(utf16Len(s))
			if l > total {
				l = total
			}
			if l < 0 {
				l = 0
			}
			return substring(s, total-l, l)
		}
	case "INDEX_OF":
		b.minArgs, b.maxArgs, b.fnN = 2, 3, func(args []any) any {
			s, ok := args[0].(string)
			sub, ok2 := args[1].(string)
			if !ok || !ok2 {
				return Undefined
			}
			start := 0.0
			if len(args) == 3 {
				f, ok := toNumber(args[2])
				if !ok {
					return Undefined
				}
				start = math.Trunc(f)
			}
			return indexOf(s, sub, start)
		}
	case "REPLACE":
		b.minArgs, b.maxArgs, b.fnN = 3, 3, func(args []any) any {
			s, ok := args[0].(string)
			find, ok2 := args[1].(string)
			repl, ok3 := args[2].(string)
			if !ok || !ok2 || !ok3 {
				return Undefined
			}
			if find == "" {
				return s
			}
			return strings.ReplaceAll(s, find, repl)
		}
	case "REPLICATE":
		b.fn2 = func(a, n any) any {
			s, ok := a.(string)
			f, ok2 := toNumber(n)
			if !ok || !ok2 || f < 0 {
				return Undefined
			}
			count := int(math.Trunc(math.Min(f, 10001)))
			if utf16Len(s)*count > 10000 {
				return Undefined
			}
			return strings.Repeat(s, count)
		}
	case "TOSTRING":
		b.fn1 = toStringFn
	case "STRINGTONUMBER":
		b.fn1 = func(a any) any {
			s, ok := a.(string)
			if !ok {
				return Undefined
			}
			s = strings.TrimSpace(s)
			if !isJSONNumber(s) {
				return Undefined
			}
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return Undefined
			}
			return f
		}

	// math
	case "ABS":
		b.fn1 = mathFn(math.Abs)
	case "FLOOR":
		b.fn1 = mathFn(math.Floor)
	case "CEILING":
		b.fn1 = mathFn(math.Ceil)
	case "ROUND":
		b.fn1 = mathFn(math.Round) // half away from zero, as the service
	case "TRUNC":
		b.fn1 = mathFn(math.Trunc)
	case "SQRT":
		b.fn1 = mathFn(math.Sqrt)
	case "SIGN":
		b.fn1 = mathFn(func(f float64) float64 {
			switch {
			case f > 0:
				return 1
			case f < 0:
				return -1
			}
			return 0
		})
	case "POWER":
		b.fn2 = func(a, c any) any {
			x, ok := toNumber(a)
			y, ok2 := toNumber(c)
			if !ok || !ok2 {
				return Undefined
			}
			return numberResult(math.Pow(x, y))
		}

	// arrays
	case "ARRAY_LENGTH":
		b.fn1 = func(a any) any {
			if arr, ok := a.([]any); ok {
				return float64(len(arr))
			}
			return Undefined
		}
	case "ARRAY_CONTAINS":
		b.minArgs, b.maxArgs, b.fnN = 2, 3, arrayContains
	case "ARRAY_CONCAT":
		b.minArgs, b.maxArgs, b.fnN = 2, -1, func(args []any) any {
			var out []any
			for _, a := range args {
				arr, ok := a.([]any)
				if !ok {
					return Undefined
				}
				out = append(out, arr...)
			}
			if out == nil {
				out = []any{}
			}
			return out
		}
	case "ARRAY_SLICE":
		b.minArgs, b.maxArgs, b.fnN = 2, 3, arraySlice

	// full-text search (approximated: case-insensitive word matching, no
	// stemming or stop words)
	case "FULLTEXTCONTAINS", "FULLTEXTCONTAINSALL":
		b.minArgs, b.maxArgs, b.fnN = 2, -1, func(args []any) any { return fullTextContains(args, true) }
	case "FULLTEXTCONTAINSANY":
		b.minArgs, b.maxArgs, b.fnN = 2, -1, func(args []any) any { return fullTextContains(args, false) }
	default:
		return b, false
	}
	if b.fn1 != nil {
		b.minArgs, b.maxArgs = 1, 1
	}
	if b.fn2 != nil {
		b.minArgs, b.maxArgs = 2, 2
	}
	return b, true
}

func stringFn(f func(string) string) func(any) any {
	return func(a any) any {
		if s, ok := a.(string); ok {
			return f(s)
		}
		return Undefined
	}
}

func mathFn(f func(float64) float64) func(any) any {
	return func(a any) any {
		if x, ok := toNumber(a); ok {
			return numberResult(f(x))
		}
		return Undefined
	}
}

// stringPredicate implements STARTSWITH/ENDSWITH/CONTAINS/STRINGEQUALS with
// the optional ignore-case boolean third argument.
func stringPredicate(args []any, pred func(s, t string) bool) any {
	s, ok := args[0].(string)
	t, ok2 := args[1].(string)
	if !ok || !ok2 {
		return Undefined
	}
	if len(args) == 3 {
		ic, ok := args[2].(bool)
		if !ok {
			return Undefined
		}
		if ic {
			s, t = strings.ToLower(s), strings.ToLower(t)
		}
	}
	return pred(s, t)
}

func toStringFn(a any) any {
	switch x := a.(type) {
	case string:
		return x
	case bool:
		if x {
			return "true"
		}
		return "false"
	case nil:
		return "null"
	case map[string]any, []any:
		return toJSONText(x)
	}
	if f, ok := toNumber(a); ok {
		return formatNumber(f)
	}
	return Undefined
}

// isASCII reports whether s has only single-byte characters, in which case
// byte offsets and UTF-16 offsets coincide.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// utf16Of returns s as UTF-16 code units; string positions in the service's
// string functions are counted in UTF-16 code units.
func utf16Of(s string) []uint16 { return utf16.Encode([]rune(s)) }

func utf16Len(s string) int {
	if isASCII(s) {
		return len(s)
	}
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// substring returns length code units of s from start, clamped to the string.
func substring(s string, start, length float64) any {
	start, length = math.Trunc(start), math.Trunc(length)
	if start < 0 {
		start = 0
	}
	if length <= 0 {
		return ""
	}
	if isASCII(s) {
		n := float64(len(s))
		if start >= n {
			return ""
		}
		end := math.Min(n, start+length)
		return s[int(start):int(end)]
	}
	u := utf16Of(s)
	n := float64(len(u))
	if start >= n {
		return ""
	}
	end := math.Min(n, start+length)
	return string(utf16.Decode(u[int(start):int(end)]))
}

// indexOf returns the first UTF-16 position of sub in s at or after start, or -1.
func indexOf(s, sub string, start float64) any {
	if start < 0 {
		start = 0
	}
	if isASCII(s) && isASCII(sub) {
		if start > float64(len(s)) {
			return -1.0
		}
		i := strings.Index(s[int(start):], sub)
		if i < 0 {
			return -1.0
		}
		return float64(i) + start
	}
	u, v := utf16Of(s), utf16Of(sub)
	if start > float64(len(u)) {
		return -1.0
	}
	for i := int(start); i+len(v) <= len(u); i++ {
		match := true
		for j := range v {
			if u[i+j] != v[j] {
				match = false
				break
			}
		}
		if match {
			return float64(i)
		}
	}
	return -1.0
}

// arrayContains implements ARRAY_CONTAINS(arr, value [, partial]). With
// partial true, an object value matches any element object that contains all
// of its properties.
func arrayContains(args []any) any {
	arr, ok := args[0].([]any)
	if !ok {
		return Undefined
	}
	partial := false
	if len(args) == 3 {
		p, ok := args[2].(bool)
		if !ok {
			return Undefined
		}
		partial = p
	}
	v := args[1]
	kv := kindOf(v)
	if kv == kUndefined {
		return false
	}
	pm, isObj := v.(map[string]any)
	for _, e := range arr {
		ke := kindOf(e)
		if ke != kv {
			continue
		}
		if partial && isObj {
			em := e.(map[string]any)
			match := true
			for k, want := range pm {
				got, ok := em[k]
				kw := kindOf(want)
				if !ok || kindOf(got) != kw || !deepEqual(got, want, kw) {
					match = false
					break
				}
			}
			if match {
				return true
			}
			continue
		}
		if deepEqual(e, v, kv) {
			return true
		}
	}
	return false
}

// arraySlice implements ARRAY_SLICE(arr, start [, length]); a negative start
// counts from the end.
func arraySlice(args []any) any {
	arr, ok := args[0].([]any)
	f, ok2 := toNumber(args[1])
	if !ok || !ok2 {
		return Undefined
	}
	n := len(arr)
	start := int(math.Max(math.Min(math.Trunc(f), float64(n)), -float64(n)))
	if start < 0 {
		start += n
	}
	end := n
	if len(args) == 3 {
		l, ok := toNumber(args[2])
		if !ok {
			return Undefined
		}
		l = math.Trunc(l)
		if l <= 0 {
			return []any{}
		}
		end = int(math.Min(float64(start)+l, float64(n)))
	}
	out := make([]any, end-start)
	copy(out, arr[start:end])
	return out
}

// fullTextContains reports whether the words of the text args[0] include all
// (or, with all false, any) of the terms args[1:]; a term of several words
// matches when all its words occur.
func fullTextContains(args []any, all bool) any {
	text, ok := args[0].(string)
	if !ok {
		return false
	}
	words := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(text), notWordRune) {
		words[w] = true
	}
	for _, a := range args[1:] {
		term, ok := a.(string)
		if !ok {
			return Undefined
		}
		found := true
		tw := strings.FieldsFunc(strings.ToLower(term), notWordRune)
		for _, w := range tw {
			if !words[w] {
				found = false
				break
			}
		}
		found = found && len(tw) > 0
		if found && !all {
			return true
		}
		if !found && all {
			return false
		}
	}
	return all
}

func notWordRune(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }

// isJSONNumber reports whether s is a JSON number literal.
func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	if i >= len(s) || !isDigit(s[i]) {
		return false
	}
	if s[i] == '0' {
		i++
	} else {
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || !isDigit(s[i]) {
			return false
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || !isDigit(s[i]) {
			return false
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	return i == len(s)
}
