package epk

import "strings"

// SplitPath turns a partition key path of a container's definition ("/a/b",
// or "/\"a b\"/c" for names that need quoting) into its property names.
func SplitPath(p string) []string {
	var out []string
	rest := strings.TrimPrefix(p, "/")
	for rest != "" {
		if rest[0] == '"' {
			end := strings.Index(rest[1:], "\"")
			if end < 0 {
				out = append(out, rest[1:])
				break
			}
			out = append(out, rest[1:end+1])
			rest = strings.TrimPrefix(rest[end+2:], "/")
			continue
		}
		seg, tail, _ := strings.Cut(rest, "/")
		out = append(out, seg)
		rest = tail
	}
	return out
}

// Components reads a document's partition key components, one per path
// (each split by SplitPath). A missing path yields Undefined, as does a
// value that is an object or an array: the service treats such a document
// as lacking that component.
func Components(doc map[string]any, paths [][]string) []any {
	out := make([]any, len(paths))
	for i, segs := range paths {
		var cur any = doc
		for _, s := range segs {
			m, ok := cur.(map[string]any)
			if !ok {
				cur = Undefined
				break
			}
			v, ok := m[s]
			if !ok {
				cur = Undefined
				break
			}
			cur = v
		}
		switch cur.(type) {
		case string, float64, bool, nil:
		default:
			cur = Undefined
		}
		out[i] = cur
	}
	return out
}

// KeyOf is Compute for a key read from a document or a request: a key
// whose components are all Undefined is the "none" partition key, as the
// service places it (for MultiHash too, whatever the number of levels).
func KeyOf(kind Kind, version int, components []any) (string, error) {
	for _, c := range components {
		if c != Undefined {
			return Compute(kind, version, components)
		}
	}
	return Compute(kind, version, nil)
}
