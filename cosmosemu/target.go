package cosmosemu

import (
	"bytes"
	"encoding/json"
)

// target is the resolved destination of a document operation.
type target struct {
	err    *apiError
	coll   *container
	def    pkDefinition
	hasPK  bool  // a partition key was given (header or, for writes, body)
	pk     []any // full or prefix components, "none" expanded to undefined
	prefix bool  // pk is a strict prefix of a hierarchical key
	epk    string
	parts  []*partition // physical partitions touched, in EPK order
	byID   bool         // parts was chosen by x-ms-documentdb-partitionkeyrangeid
	doc    map[string]any
}

// resolve finds the container and physical partitions of a document
// operation. Errors are recorded on the target and answered by the handler,
// so middleware still sees the request.
func (s *Server) resolve(req *Request) *target {
	t := &target{}
	c, err := s.store.container(req.Database, req.Container)
	if err != nil {
		t.err = errOwnerNotFound()
		return t
	}
	t.coll = c
	t.def = c.definition()
	h := req.HTTP.Header

	switch req.Operation {
	case OpCreate, OpUpsert, OpReplace:
		doc, perr := parseDocument(req.body)
		if perr != nil {
			t.err = perr
			return t
		}
		t.doc = doc
	}

	if hv := h.Get("x-ms-documentdb-partitionkey"); hv != "" {
		comps, perr := parsePKHeader(hv)
		if perr != nil {
			t.err = perr
			return t
		}
		allowPrefix := req.Operation == OpQuery || req.Operation == OpQueryPlan || req.Operation == OpChangeFeed || req.Operation == OpReadFeed
		if aerr := t.def.checkHeaderArity(comps, allowPrefix); aerr != nil {
			t.err = aerr
			return t
		}
		t.hasPK = true
		t.pk = t.def.normalizeNone(comps)
		t.prefix = len(t.pk) < len(t.def.Paths)
	} else if (req.Operation == OpCreate || req.Operation == OpUpsert) && t.doc != nil {
		t.hasPK = true
		t.pk = t.def.extractPK(t.doc)
	}

	if t.hasPK {
		e, eerr := t.def.epkOf(t.pk)
		if eerr != nil {
			t.err = eerr
			return t
		}
		t.epk = e
		if t.prefix {
			t.parts = c.partitionsOverlapping(e, e+"FF")
		} else {
			t.parts = []*partition{c.partitionFor(e)}
		}
	}

	if rid := h.Get("x-ms-documentdb-partitionkeyrangeid"); rid != "" {
		p := c.partitionByID(rid)
		if p == nil {
			t.err = errRangeGone(rid, c)
			return t
		}
		if t.hasPK {
			found := false
			for _, q := range t.parts {
				found = found || q == p
			}
			if found {
				t.parts = []*partition{p}
			} else {
				// The key lives in another range: nothing of it is here.
				t.parts = []*partition{}
			}
		} else {
			t.parts = []*partition{p}
		}
		t.byID = true
	}

	switch req.Operation {
	case OpBatch:
		// A bulk (non-atomic) batch may address a range instead of a key.
		if !t.hasPK && !(t.byID && isBulkRequest(h)) {
			t.err = errBadRequest(msgPKMissing)
			return t
		}
	case OpRead, OpReplace, OpDelete, OpPatch:
		if !t.hasPK {
			t.err = errBadRequest(msgPKMissing)
			return t
		}
	case OpQuery, OpQueryPlan, OpReadFeed, OpChangeFeed:
		if !t.hasPK && !t.byID {
			t.parts = c.partitions()
		}
	}
	for _, p := range t.parts {
		req.PartitionKeyRangeIDs = append(req.PartitionKeyRangeIDs, p.id)
	}
	return t
}

// parseDocument decodes a JSON object body.
func parseDocument(body []byte) (map[string]any, *apiError) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, errBadRequest("The input content is invalid. The document must be a JSON object.")
	}
	var doc map[string]any
	if err := json.Unmarshal(trimmed, &doc); err != nil {
		return nil, errBadRequest("The input content is invalid: %s", err.Error())
	}
	return doc, nil
}

// single returns the one partition of a point operation.
func (t *target) single() *partition {
	if len(t.parts) == 0 {
		return nil
	}
	return t.parts[0]
}

// lockPoint locks the partition of a point operation (for writing when
// write is set) and returns it; the caller unlocks it. A partition split
// since routing is followed to the child owning the key, unless the request
// named the range, which then answers 410/1002 like the service.
func (t *target) lockPoint(write bool) (*partition, *apiError) {
	for {
		p := t.single()
		if p == nil {
			return nil, errNotFound()
		}
		if write {
			p.mu.Lock()
		} else {
			p.mu.RLock()
		}
		if !p.gone {
			return p, nil
		}
		if write {
			p.mu.Unlock()
		} else {
			p.mu.RUnlock()
		}
		if t.byID {
			return nil, errRangeGone(p.id, t.coll)
		}
		t.rerouteByKey()
	}
}

// rerouteByKey recomputes the partitions of a request routed by partition
// key from the container's current ranges (after a split).
func (t *target) rerouteByKey() {
	if t.prefix {
		t.parts = t.coll.partitionsOverlapping(t.epk, t.epk+"FF")
	} else {
		t.parts = []*partition{t.coll.partitionFor(t.epk)}
	}
}
