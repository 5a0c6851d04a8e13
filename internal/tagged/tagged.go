// Package tagged encodes and strictly decodes the JSON tagged unions of
// durafeed's wire format: a JSON object whose "type" member names the variant
// and whose other members are the variant's fields.
//
// Decoding is strict so that stored data is never silently misread: a member
// that is not a field of the variant is an error, a field without
// `omitempty` in its json tag is required, and JSON null is accepted only for
// pointer, slice, map and interface fields. Adding an optional (omitempty)
// field to a variant is therefore backwards compatible: older data without it
// still decodes. Nothing here panics on any input.
package tagged

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// TypeKey is the member that carries a variant's name.
const TypeKey = "type"

// ErrMalformed is wrapped by every decoding error of this package, so callers
// can tell corrupt wire data from other failures with errors.Is.
var ErrMalformed = errors.New("malformed tagged JSON")

// Marshal encodes the struct v as a JSON object whose first member is
// "type": tag followed by v's own members. v must encode to a JSON object.
func Marshal(tag string, v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", tag, err)
	}
	if len(body) < 2 || body[0] != '{' {
		return nil, fmt.Errorf("encode %s: variant is not a JSON object", tag)
	}
	tagJSON, err := json.Marshal(tag)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", tag, err)
	}
	var buf bytes.Buffer
	buf.Grow(len(body) + len(tagJSON) + 10)
	buf.WriteString(`{"` + TypeKey + `":`)
	buf.Write(tagJSON)
	if len(body) > 2 {
		buf.WriteByte(',')
		buf.Write(body[1:])
	} else {
		buf.WriteByte('}')
	}
	return buf.Bytes(), nil
}

// Members is a decoded JSON object, member name to raw value.
type Members map[string]json.RawMessage

// Split decodes data as a JSON object and returns the string value of its
// "type" member and the remaining members.
func Split(data []byte) (string, Members, error) {
	var m Members
	if err := json.Unmarshal(data, &m); err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if m == nil {
		return "", nil, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	raw, ok := m[TypeKey]
	if !ok {
		return "", nil, fmt.Errorf("%w: missing %q member", ErrMalformed, TypeKey)
	}
	var tag string
	if err := json.Unmarshal(raw, &tag); err != nil || tag == "" {
		return "", nil, fmt.Errorf("%w: %q member is not a non-empty string", ErrMalformed, TypeKey)
	}
	delete(m, TypeKey)
	return tag, m, nil
}

// Take removes the named members from m and returns them as a new Members.
func (m Members) Take(names ...string) Members {
	out := make(Members, len(names))
	for _, n := range names {
		if raw, ok := m[n]; ok {
			out[n] = raw
			delete(m, n)
		}
	}
	return out
}

// Decode strictly decodes members into the struct that v points to; see the
// package documentation for the rules. what names the value in errors.
func Decode(what string, members Members, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("decode %s: target must be a non-nil pointer to a struct", what)
	}
	sv := rv.Elem()
	fields := fieldsOf(sv.Type())
	for name := range members {
		if _, ok := fields[name]; !ok {
			return fmt.Errorf("%w: %s has no field %q", ErrMalformed, what, name)
		}
	}
	for name, f := range fields {
		raw, ok := members[name]
		if !ok {
			if f.required {
				return fmt.Errorf("%w: %s is missing required field %q", ErrMalformed, what, name)
			}
			continue
		}
		fv := sv.Field(f.index)
		if isNull(raw) {
			switch fv.Kind() {
			case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
				fv.SetZero()
				continue
			default:
				return fmt.Errorf("%w: %s field %q must not be null", ErrMalformed, what, name)
			}
		}
		if err := json.Unmarshal(raw, fv.Addr().Interface()); err != nil {
			return fmt.Errorf("%w: %s field %q: %v", ErrMalformed, what, name, err)
		}
	}
	return nil
}

type field struct {
	index    int
	required bool
}

// fieldsOf lists the JSON-visible fields of a struct type by member name.
func fieldsOf(t reflect.Type) map[string]field {
	out := make(map[string]field, t.NumField())
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = sf.Name
		}
		out[name] = field{index: i, required: !hasOption(opts, "omitempty") && !hasOption(opts, "omitzero")}
	}
	return out
}

func hasOption(opts, want string) bool {
	for opts != "" {
		var o string
		o, opts, _ = strings.Cut(opts, ",")
		if o == want {
			return true
		}
	}
	return false
}

func isNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}
