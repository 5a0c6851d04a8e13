package epk

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"unicode/utf8"
)

// undefinedType is the type of Undefined.
type undefinedType struct{}

// String renders the sentinel for diagnostics.
func (undefinedType) String() string { return "undefined" }

// Undefined is the partition key component of a document that lacks the
// partition key path (the "none" partition key). It is distinct from nil,
// which stands for an explicit JSON null. Pass it as a component to Compute.
var Undefined = undefinedType{}

// Kind is the partition key kind of a container's partition key definition,
// spelled exactly as in the definition's "kind" property.
type Kind string

const (
	// Hash is single-level hash partitioning (one partition key path).
	Hash Kind = "Hash"
	// MultiHash is hierarchical partitioning (one to MaxLevels paths).
	MultiHash Kind = "MultiHash"
)

// MaxLevels is the largest number of components a MultiHash key can have
// (the service allows at most three partition key paths).
const MaxLevels = 3

// Component type markers of the service's partition key serialization.
const (
	tagUndefined byte = 0x00
	tagNull      byte = 0x01
	tagFalse     byte = 0x02
	tagTrue      byte = 0x03
	tagNumber    byte = 0x05
	tagString    byte = 0x08
)

const (
	// v1MaxStringChars is the number of UTF-16 code units a version-1 string
	// component is truncated to before hashing and encoding.
	v1MaxStringChars = 100
	// v1MaxStringBytes is the number of UTF-8 bytes the version-1 binary
	// encoding keeps of a string (one more is written for longer strings).
	v1MaxStringBytes = 100
	// canonicalNaN is the bit pattern .NET (and so the service) uses for NaN.
	canonicalNaN uint64 = 0xFFF8000000000000
)

// value is a validated partition key component.
type value struct {
	tag byte
	num float64
	str string
}

// Compute returns the effective partition key of the partition key whose
// components are given, for a container whose partition key definition has
// the given kind and version.
//
// Components are decoded JSON values: string, float64, bool, nil (JSON null)
// or Undefined. For convenience the other Go integer and float types and
// json.Number are accepted and converted to float64, as the service converts
// every JSON number to a double. Any other type is an error. An empty (or nil)
// components slice denotes the "none" partition key and is hashed like
// []any{Undefined}, as azcosmos does.
//
// Numbers are hashed by their IEEE-754 bits, so -0 and +0 differ (as on the
// service); every NaN is hashed as .NET's NaN (0xFFF8000000000000). Strings are
// hashed as their UTF-8 bytes; they should be valid UTF-8, which everything
// produced by encoding/json is.
//
// Versions: 1 and 2 are the hash versions. Version 0 means "absent from the
// definition" and resolves as the service does: version 1 for Hash and
// version 2 for MultiHash. MultiHash only exists with version 2 (version 1 is
// an error) and takes 1 to MaxLevels components. An empty kind is taken as
// Hash, as by the service. Any other kind or version is an error.
//
// Results: Hash version 2 gives 32 hex digits, first digit 0-3; MultiHash gives
// 32 digits per component; Hash version 1 gives the service's variable-length
// binary encoding (see the package documentation).
func Compute(kind Kind, version int, components []any) (string, error) {
	if kind == "" {
		kind = Hash
	}
	switch kind {
	case Hash:
		if version < 0 || version > 2 {
			return "", fmt.Errorf("epk: unsupported partition key version %d (want 1 or 2)", version)
		}
	case MultiHash:
		if version != 0 && version != 2 {
			return "", fmt.Errorf("epk: MultiHash partition keys require version 2, got %d", version)
		}
		if len(components) > MaxLevels {
			return "", fmt.Errorf("epk: MultiHash partition key has %d components, at most %d allowed", len(components), MaxLevels)
		}
	default:
		return "", fmt.Errorf("epk: unsupported partition key kind %q", string(kind))
	}

	var fixed [MaxLevels]value
	vals := fixed[:0]
	if len(components) == 0 {
		vals = append(vals, value{tag: tagUndefined})
	}
	for i, c := range components {
		v, err := toValue(c)
		if err != nil {
			return "", fmt.Errorf("epk: partition key component %d: %w", i, err)
		}
		vals = append(vals, v)
	}

	switch {
	case kind == MultiHash:
		return computeMultiHash(vals), nil
	case version == 2:
		return computeV2(vals), nil
	default:
		return computeV1(vals), nil
	}
}

// toValue validates and normalizes one component.
func toValue(c any) (value, error) {
	switch v := c.(type) {
	case nil:
		return value{tag: tagNull}, nil
	case undefinedType:
		return value{tag: tagUndefined}, nil
	case bool:
		if v {
			return value{tag: tagTrue}, nil
		}
		return value{tag: tagFalse}, nil
	case string:
		return value{tag: tagString, str: v}, nil
	case float64:
		return number(v), nil
	case float32:
		return number(float64(v)), nil
	case int:
		return number(float64(v)), nil
	case int8:
		return number(float64(v)), nil
	case int16:
		return number(float64(v)), nil
	case int32:
		return number(float64(v)), nil
	case int64:
		return number(float64(v)), nil
	case uint:
		return number(float64(v)), nil
	case uint8:
		return number(float64(v)), nil
	case uint16:
		return number(float64(v)), nil
	case uint32:
		return number(float64(v)), nil
	case uint64:
		return number(float64(v)), nil
	case json.Number:
		f, err := v.Float64()
		if err != nil {
			return value{}, fmt.Errorf("invalid number %q: %w", string(v), err)
		}
		return number(f), nil
	default:
		return value{}, fmt.Errorf("unsupported type %T (want string, float64, bool, nil or epk.Undefined)", c)
	}
}

func number(f float64) value {
	if math.IsNaN(f) {
		f = math.Float64frombits(canonicalNaN)
	}
	return value{tag: tagNumber, num: f}
}

// appendHashInput appends the hashing serialization of v; strings end with
// strEnd (0x00 for version 1, 0xFF for version 2).
func appendHashInput(dst []byte, v value, strEnd byte) []byte {
	dst = append(dst, v.tag)
	switch v.tag {
	case tagNumber:
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(v.num))
	case tagString:
		dst = append(dst, v.str...)
		dst = append(dst, strEnd)
	}
	return dst
}

// appendV2Hex hashes input with MurmurHash3 x64 128 and appends the 32-digit
// V2 EPK: high half first, big-endian, top two bits cleared.
func appendV2Hex(dst, input []byte) []byte {
	h1, h2 := murmur3x64_128(input, 0)
	var b [16]byte
	binary.BigEndian.PutUint64(b[0:], h2)
	binary.BigEndian.PutUint64(b[8:], h1)
	b[0] &= 0x3F
	return appendHexUpper(dst, b[:])
}

func computeV2(vals []value) string {
	var scratch [128]byte
	input := scratch[:0]
	for _, v := range vals {
		input = appendHashInput(input, v, 0xFF)
	}
	var out [32]byte
	return string(appendV2Hex(out[:0], input))
}

func computeMultiHash(vals []value) string {
	var scratch [128]byte
	var outBuf [32 * MaxLevels]byte
	out := outBuf[:0]
	for _, v := range vals {
		out = appendV2Hex(out, appendHashInput(scratch[:0], v, 0xFF))
	}
	return string(out)
}

func computeV1(vals []value) string {
	var scratch [128]byte
	input := scratch[:0]
	for i := range vals {
		if vals[i].tag == tagString {
			vals[i].str = truncateUTF16(vals[i].str, v1MaxStringChars)
		}
		input = appendHashInput(input, vals[i], 0x00)
	}
	hash := murmur3x86_32(input, 0)

	var encBuf [128]byte
	enc := appendV1Binary(encBuf[:0], value{tag: tagNumber, num: float64(hash)})
	for _, v := range vals {
		enc = appendV1Binary(enc, v)
	}
	out := make([]byte, 0, 2*len(enc))
	return string(appendHexUpper(out, enc))
}

// truncateUTF16 returns the prefix of s made of its first max UTF-16 code
// units, as .NET's String.Substring(0, max) followed by UTF-8 encoding does:
// a surrogate pair cut in half leaves a lone high surrogate, which the UTF-8
// encoder replaces with U+FFFD. Invalid UTF-8 bytes count as one unit each.
func truncateUTF16(s string, max int) string {
	units := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		w := 1
		if r >= 0x10000 {
			w = 2
		}
		if units+w > max {
			if units < max { // only half of a surrogate pair fits
				return s[:i] + string(utf8.RuneError)
			}
			return s[:i]
		}
		units += w
		i += size
	}
	return s
}

// appendV1Binary appends the service's order-preserving binary encoding of v
// (the encoding version-1 EPKs are made of).
func appendV1Binary(dst []byte, v value) []byte {
	dst = append(dst, v.tag)
	switch v.tag {
	case tagNumber:
		// Map the double onto a uint64 whose unsigned order is the numeric
		// order, then write the first 8 bits as is and the rest in 7-bit
		// groups, each shifted left by one with a low "more follows" bit.
		p := math.Float64bits(v.num)
		if p&(1<<63) == 0 {
			p ^= 1 << 63
		} else {
			p = -p
		}
		dst = append(dst, byte(p>>56))
		p <<= 8
		for {
			b := byte(p>>56) | 0x01
			p <<= 7
			if p == 0 {
				return append(dst, b&^0x01)
			}
			dst = append(dst, b)
		}
	case tagString:
		// Bytes are shifted up by one so that 0x00 can terminate short
		// strings; long strings keep one byte more and no terminator.
		short := len(v.str) <= v1MaxStringBytes
		n := len(v.str)
		if !short {
			n = v1MaxStringBytes + 1
		}
		for i := 0; i < n; i++ {
			c := v.str[i]
			if c < 0xFF {
				c++
			}
			dst = append(dst, c)
		}
		if short {
			dst = append(dst, 0x00)
		}
	}
	return dst
}

const hexDigits = "0123456789ABCDEF"

func appendHexUpper(dst, src []byte) []byte {
	for _, b := range src {
		dst = append(dst, hexDigits[b>>4], hexDigits[b&0x0F])
	}
	return dst
}
