package query

import (
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// UndefinedType is the type of Undefined.
type UndefinedType uint8

// Undefined is the value of a missing property or of an expression whose
// result is undefined (for example a comparison across types). It only
// exists during evaluation: Execute drops or omits undefined values and never
// returns it.
const Undefined UndefinedType = 0

// kind is the JSON type of a value, numbered in the service's cross-type
// ORDER BY order: undefined < null < boolean < number < string < array < object.
type kind uint8

const (
	kUndefined kind = iota
	kNull
	kBool
	kNumber
	kString
	kArray
	kObject
)

// kindOf classifies a value. Besides the types encoding/json produces it
// accepts json.Number and Go integer types as numbers; anything else is
// treated as undefined.
func kindOf(v any) kind {
	switch v.(type) {
	case string:
		return kString
	case float64:
		return kNumber
	case bool:
		return kBool
	case nil:
		return kNull
	case map[string]any:
		return kObject
	case []any:
		return kArray
	case UndefinedType:
		return kUndefined
	case json.Number, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32:
		return kNumber
	}
	return kUndefined
}

// toNumber returns v as a float64 when v is a number.
func toNumber(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	case int:
		return float64(n), true
	case int8:
		return float64(n), true
	case int16:
		return float64(n), true
	case int32:
		return float64(n), true
	case int64:
		return float64(n), true
	case uint:
		return float64(n), true
	case uint8:
		return float64(n), true
	case uint16:
		return float64(n), true
	case uint32:
		return float64(n), true
	case uint64:
		return float64(n), true
	case float32:
		return float64(n), true
	}
	return 0, false
}

// numberResult wraps an arithmetic result; non-finite values (which JSON can
// not represent) become undefined.
func numberResult(f float64) any {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return Undefined
	}
	return f
}

// normalize converts a parameter value into the representation used during
// evaluation: Go numbers become float64, and maps/slices of other element
// types are left alone unless they are the JSON ones.
func normalize(v any) any {
	switch x := v.(type) {
	case nil, string, float64, bool, UndefinedType:
		return v
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = normalize(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e)
		}
		return out
	case []string:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = e
		}
		return out
	}
	if f, ok := toNumber(v); ok {
		return f
	}
	// Anything else (structs, typed slices...) goes through a JSON round
	// trip so that it is seen as the service would see it.
	b, err := json.Marshal(v)
	if err != nil {
		return Undefined
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return Undefined
	}
	return out
}

// equalValues implements '=': undefined when either side is undefined or the
// types differ, otherwise deep equality.
func equalValues(a, b any) any {
	ka, kb := kindOf(a), kindOf(b)
	if ka == kUndefined || kb == kUndefined || ka != kb {
		return Undefined
	}
	return deepEqual(a, b, ka)
}

// deepEqual compares two values of the same kind k.
func deepEqual(a, b any, k kind) bool {
	switch k {
	case kNull:
		return true
	case kBool:
		return a.(bool) == b.(bool)
	case kNumber:
		x, _ := toNumber(a)
		y, _ := toNumber(b)
		return x == y
	case kString:
		return a.(string) == b.(string)
	case kArray:
		x, y := a.([]any), b.([]any)
		if len(x) != len(y) {
			return false
		}
		for i := range x {
			kx, ky := kindOf(x[i]), kindOf(y[i])
			if kx != ky || !deepEqual(x[i], y[i], kx) {
				return false
			}
		}
		return true
	case kObject:
		x, y := a.(map[string]any), b.(map[string]any)
		nx, ny := 0, 0
		for _, v := range x {
			if kindOf(v) != kUndefined {
				nx++
			}
		}
		for k, v := range y {
			kv := kindOf(v)
			if kv == kUndefined {
				continue
			}
			ny++
			w, ok := x[k]
			if !ok || kindOf(w) != kv || !deepEqual(w, v, kv) {
				return false
			}
		}
		return nx == ny
	}
	return true
}

// compareScalars orders two values of the same primitive kind k
// (null, boolean, number, string): -1, 0 or 1.
func compareScalars(a, b any, k kind) int {
	switch k {
	case kBool:
		x, y := a.(bool), b.(bool)
		switch {
		case x == y:
			return 0
		case !x:
			return -1
		}
		return 1
	case kNumber:
		x, _ := toNumber(a)
		y, _ := toNumber(b)
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	case kString:
		return strings.Compare(a.(string), b.(string))
	}
	return 0
}

// compareRelational implements < <= > >=: it returns the ordering of a and b
// and ok=false when the comparison is undefined (undefined operand, different
// types, objects or arrays).
func compareRelational(a, b any) (int, bool) {
	ka, kb := kindOf(a), kindOf(b)
	if ka != kb || ka == kUndefined || ka == kArray || ka == kObject {
		return 0, false
	}
	return compareScalars(a, b, ka), true
}

// compareTotal is the ORDER BY ordering: a total order across all types
// (undefined < null < false < true < numbers < strings < arrays < objects).
// Arrays and objects, which the service orders by an internal hash, are
// ordered here by their canonical JSON text so that results are stable.
func compareTotal(a, b any) int {
	ka, kb := kindOf(a), kindOf(b)
	if ka != kb {
		if ka < kb {
			return -1
		}
		return 1
	}
	switch ka {
	case kArray, kObject:
		return strings.Compare(canonicalKey(a), canonicalKey(b))
	}
	return compareScalars(a, b, ka)
}

// canonicalKey encodes v as canonical JSON (object keys sorted, undefined
// object members omitted, undefined itself encoded as "~"), so that two values
// have the same key exactly when they are deep-equal.
func canonicalKey(v any) string {
	var b strings.Builder
	writeCanonicalValue(&b, v)
	return b.String()
}

func writeCanonicalValue(b *strings.Builder, v any) {
	switch kindOf(v) {
	case kUndefined:
		b.WriteString("~")
	case kNull:
		b.WriteString("null")
	case kBool:
		if v.(bool) {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case kNumber:
		f, _ := toNumber(v)
		b.WriteString(formatNumber(f))
	case kString:
		writeJSONString(b, v.(string))
	case kArray:
		b.WriteByte('[')
		for i, e := range v.([]any) {
			if i > 0 {
				b.WriteByte(',')
			}
			if kindOf(e) == kUndefined {
				b.WriteString("null")
				continue
			}
			writeCanonicalValue(b, e)
		}
		b.WriteByte(']')
	case kObject:
		m := v.(map[string]any)
		keys := make([]string, 0, len(m))
		for k, e := range m {
			if kindOf(e) != kUndefined {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(b, k)
			b.WriteByte(':')
			writeCanonicalValue(b, m[k])
		}
		b.WriteByte('}')
	}
}

const hexDigits = "0123456789abcdef"

// writeJSONString writes s as a JSON string literal (without HTML escaping).
func writeJSONString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			case c == '\n':
				b.WriteString(`\n`)
			case c == '\r':
				b.WriteString(`\r`)
			case c == '\t':
				b.WriteString(`\t`)
			case c < 0x20:
				b.WriteString(`\u00`)
				b.WriteByte(hexDigits[c>>4])
				b.WriteByte(hexDigits[c&0xf])
			default:
				b.WriteByte(c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteString(`\ufffd`)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	b.WriteByte('"')
}

// formatNumber formats f the way JavaScript's Number.prototype.toString does
// (shortest round-trip digits; exponent form below 1e-6 and from 1e21 up).
func formatNumber(f float64) string {
	if f == 0 {
		return "0"
	}
	abs := math.Abs(f)
	if abs >= 1e-6 && abs < 1e21 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	s := strconv.FormatFloat(f, 'e', -1, 64)
	// Go writes e-07 / e+21; JavaScript writes e-7 / e+21.
	if i := strings.IndexByte(s, 'e'); i >= 0 && i+2 < len(s) {
		mant, sign, exp := s[:i], s[i+1], strings.TrimLeft(s[i+2:], "0")
		if exp == "" {
			exp = "0"
		}
		s = mant + "e" + string(sign) + exp
	}
	return s
}

// toJSONText renders a value as compact JSON text (used by TOSTRING).
func toJSONText(v any) string {
	var b strings.Builder
	writeJSONText(&b, v)
	return b.String()
}

func writeJSONText(b *strings.Builder, v any) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k, e := range x {
			if kindOf(e) != kUndefined {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(b, k)
			b.WriteByte(':')
			writeJSONText(b, x[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONText(b, e)
		}
		b.WriteByte(']')
	default:
		if kindOf(v) == kUndefined {
			b.WriteString("null")
			return
		}
		writeCanonicalValue(b, v)
	}
}
