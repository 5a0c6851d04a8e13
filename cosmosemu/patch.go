package cosmosemu

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/durafeed/durafeed/cosmosemu/internal/query"
)

// patchOp is one partial-update operation of the service's patch body.
type patchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	From  string          `json:"from"`
	Value json.RawMessage `json:"value"`
}

// patchSpec is a parsed patch request.
type patchSpec struct {
	ops       []patchOp
	values    []any
	condition *query.Query
}

// parsePatch parses a patch body: {"operations": [...], "condition": ...}
// as the Go SDK sends it, or a bare array of operations, which other SDKs
// send and the service accepts.
func parsePatch(body []byte) (*patchSpec, *apiError) {
	var raw struct {
		Operations []patchOp `json:"operations"`
		Condition  *string   `json:"condition"`
	}
	if trimmed := bytes.TrimSpace(body); len(trimmed) > 0 && trimmed[0] == '[' {
		if err := json.Unmarshal(trimmed, &raw.Operations); err != nil {
			return nil, errBadRequest("The patch request body is invalid: %s", err.Error())
		}
		return buildPatch(raw.Operations, nil)
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, errBadRequest("The patch request body is invalid: %s", err.Error())
	}
	return buildPatch(raw.Operations, raw.Condition)
}

func buildPatch(ops []patchOp, condition *string) (*patchSpec, *apiError) {
	if len(ops) == 0 {
		return nil, errBadRequest("Patch request has no operations.")
	}
	if len(ops) > maxPatchOperations {
		return nil, errBadRequest("Patch request has more than %d operations.", maxPatchOperations)
	}
	spec := &patchSpec{ops: ops, values: make([]any, len(ops))}
	for i, op := range ops {
		op.Op = strings.ToLower(op.Op)
		spec.ops[i].Op = op.Op
		switch op.Op {
		case "add", "set", "replace", "incr":
			if len(op.Value) == 0 {
				return nil, errBadRequest("Value is required for patch operation '%s' at path '%s'.", op.Op, op.Path)
			}
			if err := json.Unmarshal(op.Value, &spec.values[i]); err != nil {
				return nil, errBadRequest("Invalid value for patch operation at path '%s'.", op.Path)
			}
			if op.Op == "incr" {
				if _, ok := spec.values[i].(float64); !ok {
					return nil, errBadRequest("Value for an increment operation at path '%s' must be a number.", op.Path)
				}
			}
		case "remove":
		case "move":
			if op.From == "" {
				return nil, errBadRequest("From is required for patch operation 'move'.")
			}
		default:
			return nil, errBadRequest("Invalid patch operation type '%s'.", op.Op)
		}
		if !strings.HasPrefix(op.Path, "/") || op.Path == "/" {
			return nil, errBadRequest("Invalid patch path '%s'.", op.Path)
		}
	}
	if condition != nil && strings.TrimSpace(*condition) != "" {
		q, err := query.Parse("SELECT * " + *condition)
		if err != nil {
			return nil, queryError(err)
		}
		spec.condition = q
	}
	return spec, nil
}

// apply evaluates the condition against the current version and applies
// the operations to a copy; it returns the new data and its user JSON.
func (spec *patchSpec) apply(cur *document, def pkDefinition) (map[string]any, []byte, *apiError) {
	if spec.condition != nil {
		ok, err := spec.condition.Filter(cur.data, map[string]any{})
		if err != nil {
			return nil, nil, queryError(err)
		}
		if !ok {
			return nil, nil, errPrecondition()
		}
	}
	doc := deepCopy(cur.data).(map[string]any)
	for _, k := range systemProps {
		delete(doc, k)
	}
	for i, op := range spec.ops {
		if err := applyOp(doc, op, spec.values[i]); err != nil {
			return nil, nil, err
		}
	}
	if id, _ := doc["id"].(string); id != cur.id {
		return nil, nil, errBadRequest("The 'id' of a document cannot be changed by a patch operation.")
	}
	if pkKey(def.extractPK(doc)) != pkKey(def.extractPK(cur.data)) {
		return nil, nil, errBadRequest("Partition key path(s) of a document cannot be modified by a patch operation.")
	}
	user, err := encodeUser(doc)
	if err != nil {
		return nil, nil, errBadRequest("The patched document is invalid: %s", err.Error())
	}
	if len(user) > defaultMaxDocumentBytes {
		return nil, nil, errTooLarge()
	}
	return doc, user, nil
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		a := make([]any, len(t))
		for i, x := range t {
			a[i] = deepCopy(x)
		}
		return a
	default:
		return v
	}
}

// splitPointer decodes a JSON pointer into its tokens.
func splitPointer(p string) []string {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, s := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
	}
	return parts
}

func patchPathErr(op, path string) *apiError {
	return errBadRequest("Patch operation '%s' failed: the path '%s' does not exist or is not valid for the document.", op, path)
}

// resolveParent walks to the container of the last token.
func resolveParent(doc map[string]any, tokens []string) (any, bool) {
	var cur any = doc
	for _, t := range tokens[:len(tokens)-1] {
		switch c := cur.(type) {
		case map[string]any:
			next, ok := c[t]
			if !ok {
				return nil, false
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// setAt replaces the value at tokens inside doc, rebuilding the slice in its
// parent when an array grows or shrinks.
func setChild(doc map[string]any, tokens []string, fn func(parent any, last string) (any, *apiError)) *apiError {
	if len(tokens) == 1 {
		_, err := fn(doc, tokens[0])
		return err
	}
	parentTokens := tokens[:len(tokens)-1]
	grand, ok := resolveParent(doc, parentTokens)
	if !ok {
		return errBadRequest("path not found")
	}
	key := parentTokens[len(parentTokens)-1]
	var parent any
	switch g := grand.(type) {
	case map[string]any:
		p, ok := g[key]
		if !ok {
			return errBadRequest("path not found")
		}
		parent = p
	case []any:
		i, err := strconv.Atoi(key)
		if err != nil || i < 0 || i >= len(g) {
			return errBadRequest("path not found")
		}
		parent = g[i]
	default:
		return errBadRequest("path not found")
	}
	updated, err := fn(parent, tokens[len(tokens)-1])
	if err != nil {
		return err
	}
	if arr, ok := updated.([]any); ok {
		switch g := grand.(type) {
		case map[string]any:
			g[key] = arr
		case []any:
			i, _ := strconv.Atoi(key)
			g[i] = arr
		}
	}
	return nil
}

func applyOp(doc map[string]any, op patchOp, value any) *apiError {
	tokens := splitPointer(op.Path)
	fail := func() *apiError { return patchPathErr(op.Op, op.Path) }
	var err *apiError
	switch op.Op {
	case "add", "set":
		err = setChild(doc, tokens, func(parent any, last string) (any, *apiError) {
			switch c := parent.(type) {
			case map[string]any:
				c[last] = value
				return nil, nil
			case []any:
				if last == "-" {
					return append(c, value), nil
				}
				i, e := strconv.Atoi(last)
				if e != nil || i < 0 || i > len(c) {
					return nil, fail()
				}
				if op.Op == "set" && i < len(c) {
					c[i] = value
					return c, nil
				}
				out := make([]any, 0, len(c)+1)
				out = append(out, c[:i]...)
				out = append(out, value)
				return append(out, c[i:]...), nil
			}
			return nil, fail()
		})
	case "replace":
		err = setChild(doc, tokens, func(parent any, last string) (any, *apiError) {
			switch c := parent.(type) {
			case map[string]any:
				if _, ok := c[last]; !ok {
					return nil, fail()
				}
				c[last] = value
				return nil, nil
			case []any:
				i, e := strconv.Atoi(last)
				if e != nil || i < 0 || i >= len(c) {
					return nil, fail()
				}
				c[i] = value
				return c, nil
			}
			return nil, fail()
		})
	case "remove":
		_, err = removeAt(doc, tokens, fail)
	case "incr":
		err = setChild(doc, tokens, func(parent any, last string) (any, *apiError) {
			inc := value.(float64)
			switch c := parent.(type) {
			case map[string]any:
				cur, ok := c[last]
				if !ok {
					c[last] = inc
					return nil, nil
				}
				n, ok := cur.(float64)
				if !ok {
					return nil, errBadRequest("Patch increment at path '%s' targets a value that is not a number.", op.Path)
				}
				c[last] = addNumbers(n, inc)
				return nil, nil
			case []any:
				i, e := strconv.Atoi(last)
				if e != nil || i < 0 || i >= len(c) {
					return nil, fail()
				}
				n, ok := c[i].(float64)
				if !ok {
					return nil, errBadRequest("Patch increment at path '%s' targets a value that is not a number.", op.Path)
				}
				c[i] = addNumbers(n, inc)
				return c, nil
			}
			return nil, fail()
		})
	case "move":
		if strings.HasPrefix(op.Path+"/", op.From+"/") {
			return errBadRequest("Patch move: 'from' cannot be a prefix of 'path'.")
		}
		moved, rerr := removeAt(doc, splitPointer(op.From), func() *apiError { return patchPathErr(op.Op, op.From) })
		if rerr != nil {
			return rerr
		}
		return applyOp(doc, patchOp{Op: "set", Path: op.Path}, moved)
	}
	if err != nil && err.msg == "path not found" {
		return fail()
	}
	return err
}

func removeAt(doc map[string]any, tokens []string, fail func() *apiError) (any, *apiError) {
	var removed any
	err := setChild(doc, tokens, func(parent any, last string) (any, *apiError) {
		switch c := parent.(type) {
		case map[string]any:
			v, ok := c[last]
			if !ok {
				return nil, fail()
			}
			removed = v
			delete(c, last)
			return nil, nil
		case []any:
			i, e := strconv.Atoi(last)
			if e != nil || i < 0 || i >= len(c) {
				return nil, fail()
			}
			removed = c[i]
			out := make([]any, 0, len(c)-1)
			out = append(out, c[:i]...)
			return append(out, c[i+1:]...), nil
		}
		return nil, fail()
	})
	if err != nil && err.msg == "path not found" {
		return nil, fail()
	}
	return removed, err
}

func addNumbers(a, b float64) float64 {
	s := a + b
	if math.IsInf(s, 0) {
		return a
	}
	return s
}

// queryError maps a query package error to a 400 answer.
func queryError(err error) *apiError {
	if qe, ok := err.(*query.Error); ok {
		e := newErr(http.StatusBadRequest, qe.Message)
		return e
	}
	return errBadRequest("%s", err.Error())
}
