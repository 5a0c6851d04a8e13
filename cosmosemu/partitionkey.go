package cosmosemu

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/durafeed/durafeed/internal/epk"
)

// pkDefinition is a container's partition key definition.
type pkDefinition struct {
	Kind    epk.Kind
	Version int
	Paths   []string
	parsed  [][]string
}

// parsePKDefinition validates the "partitionKey" property of a container.
func parsePKDefinition(v any) (pkDefinition, *apiError) {
	m, ok := v.(map[string]any)
	if !ok {
		return pkDefinition{}, errBadRequest("The partition key definition is missing or invalid. Learn more: https://aka.ms/CosmosDB/sql/errors/missing-partition-key-definition")
	}
	var def pkDefinition
	paths, _ := m["paths"].([]any)
	if len(paths) == 0 {
		return def, errBadRequest("The partition key definition must contain at least one path.")
	}
	for _, p := range paths {
		s, ok := p.(string)
		if !ok || !strings.HasPrefix(s, "/") || len(s) < 2 {
			return def, errBadRequest("The partition key path %v is invalid.", p)
		}
		def.Paths = append(def.Paths, s)
		def.parsed = append(def.parsed, epk.SplitPath(s))
	}
	kind, _ := m["kind"].(string)
	switch {
	case kind == "" && len(paths) > 1:
		def.Kind = epk.MultiHash
	case kind == "" || kind == string(epk.Hash):
		def.Kind = epk.Hash
	case kind == string(epk.MultiHash):
		def.Kind = epk.MultiHash
	default:
		return def, errBadRequest("The partition key kind '%s' is not supported.", kind)
	}
	if def.Kind == epk.Hash && len(paths) != 1 {
		return def, errBadRequest("A partition key of kind Hash must have exactly one path; use MultiHash for hierarchical partition keys.")
	}
	if def.Kind == epk.MultiHash && len(paths) > epk.MaxLevels {
		return def, errBadRequest("A hierarchical partition key can have at most %d paths.", epk.MaxLevels)
	}
	if ver, ok := m["version"].(float64); ok {
		def.Version = int(ver)
		if def.Version != 1 && def.Version != 2 {
			return def, errBadRequest("The partition key version %d is not supported.", def.Version)
		}
	}
	if def.Kind == epk.MultiHash {
		if def.Version == 1 {
			return def, errBadRequest("Hierarchical partition keys require partition key version 2.")
		}
		def.Version = 2
	}
	return def, nil
}

// toJSON renders the definition as the service returns it.
func (d pkDefinition) toJSON() map[string]any {
	paths := make([]any, len(d.Paths))
	for i, p := range d.Paths {
		paths[i] = p
	}
	m := map[string]any{"paths": paths, "kind": string(d.Kind)}
	if d.Version != 0 {
		m["version"] = float64(d.Version)
	}
	return m
}

// extractPK reads the partition key components from a document; a missing
// path yields epk.Undefined, as does a value that is an object or array.
func (d pkDefinition) extractPK(doc map[string]any) []any {
	return epk.Components(doc, d.parsed)
}

// parsePKHeader decodes x-ms-documentdb-partitionkey: a JSON array of
// components where {} stands for undefined and [] for the "none" key.
func parsePKHeader(h string) ([]any, *apiError) {
	dec := json.NewDecoder(strings.NewReader(h))
	var raw []any
	if err := dec.Decode(&raw); err != nil {
		return nil, errBadRequest("Partition key provided either doesn't correspond to definition in the collection or doesn't match partition key field values specified in the document.")
	}
	out := make([]any, len(raw))
	for i, v := range raw {
		switch t := v.(type) {
		case string, float64, bool, nil:
			out[i] = t
		case map[string]any:
			if len(t) != 0 {
				return nil, errBadRequest("Partition key provided either doesn't correspond to definition in the collection or doesn't match partition key field values specified in the document.")
			}
			out[i] = epk.Undefined
		default:
			return nil, errBadRequest("Partition key provided either doesn't correspond to definition in the collection or doesn't match partition key field values specified in the document.")
		}
	}
	return out, nil
}

// pkKey is the canonical form of a full partition key, used as the map key
// of a logical partition. The "none" key ([]) equals all-undefined.
func pkKey(components []any) string {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, c := range components {
		if i > 0 {
			b.WriteByte(',')
		}
		writeComponent(&b, c)
	}
	b.WriteByte(']')
	return b.String()
}

func writeComponent(b *bytes.Buffer, c any) {
	switch v := c.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if v {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case float64:
		if v == 0 {
			v = 0 // fold -0
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			b.WriteString("null")
			return
		}
		b.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
	case string:
		q, _ := json.Marshal(v)
		b.Write(q)
	default:
		b.WriteString("{}")
	}
}

// normalizeNone turns the "none" key (no components) into all-undefined
// components for a definition.
func (d pkDefinition) normalizeNone(components []any) []any {
	if len(components) != 0 {
		return components
	}
	out := make([]any, len(d.Paths))
	for i := range out {
		out[i] = epk.Undefined
	}
	return out
}

// epkOf computes the effective partition key of full or prefix components.
func (d pkDefinition) epkOf(components []any) (string, *apiError) {
	e, err := epk.KeyOf(d.Kind, d.Version, components)
	if err != nil {
		return "", errBadRequest("Partition key provided either doesn't correspond to definition in the collection or doesn't match partition key field values specified in the document.")
	}
	return e, nil
}

// checkHeaderArity validates the number of components in a header value:
// full keys always, prefixes only for MultiHash when allowPrefix.
func (d pkDefinition) checkHeaderArity(components []any, allowPrefix bool) *apiError {
	n := len(components)
	if n == 0 {
		return nil
	}
	if n == len(d.Paths) {
		return nil
	}
	if n < len(d.Paths) && allowPrefix && d.Kind == epk.MultiHash {
		return nil
	}
	return errBadRequest("Partition key provided either doesn't correspond to definition in the collection or doesn't match partition key field values specified in the document.")
}

// hasPrefix reports whether full starts with prefix (canonical equality per
// component).
func hasPKPrefix(full, prefix []any) bool {
	if len(prefix) > len(full) {
		return false
	}
	for i := range prefix {
		if pkKey(full[i:i+1]) != pkKey(prefix[i:i+1]) {
			return false
		}
	}
	return true
}
