package cosmosemu

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Bulk (non-atomic batch)
//
// The .NET, Java and JavaScript SDKs' bulk executors group operations by
// physical partition and send each group as a batch addressed by range:
// POST .../docs with x-ms-cosmos-is-batch-request: True,
// x-ms-cosmos-batch-atomic: False, x-ms-cosmos-batch-continue-on-error
// (True by default in current SDKs) and x-ms-documentdb-partitionkeyrangeid
// instead of x-ms-documentdb-partitionkey; each operation carries its own
// partitionKey (the JSON text of the key array, as a JSON string, or the
// array itself). Every operation is its own write: it commits with its own
// LSN and stays committed whatever the others do. The answer is the JSON
// array of per-operation results, 200 when every operation succeeded and
// 207 Multi-Status otherwise. Without continue-on-error the operations
// after the first failure are not attempted and answer 424. An operation
// whose key lies outside the addressed range answers 410/1002
// (PartitionKeyRangeGone), the status the SDKs' bulk retry policies refresh
// their routing map on and re-route the operation for; a request naming a
// range that no longer exists answers 410/1002 as a whole.

// isBulkRequest reports whether a batch request is a non-atomic (bulk) one.
func isBulkRequest(h http.Header) bool {
	return strings.EqualFold(strings.TrimSpace(h.Get("x-ms-cosmos-batch-atomic")), "false")
}

// opPartitionKey decodes an operation's partitionKey: the SDKs send the JSON
// text of the key array as a JSON string; the array itself is accepted too.
// ok is false when the operation has none.
func opPartitionKey(raw json.RawMessage) ([]any, bool, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, false, nil
	}
	text := string(raw)
	var s string
	if json.Unmarshal(raw, &s) == nil {
		text = s
	}
	comps, err := parsePKHeader(text)
	if err != nil {
		return nil, true, err
	}
	return comps, true, nil
}

func (s *Server) handleBulk(req *Request) (*Response, *apiError) {
	t := req.tgt
	ops, aerr := decodeBatchOps(req.body)
	if aerr != nil {
		return nil, aerr
	}
	continueOnError := isTrue(req.HTTP.Header.Get("x-ms-cosmos-batch-continue-on-error"))
	withContent := wantsContent(req)

	// Resolve every operation's key first: the ones not owned by the
	// addressed range answer 410/1002 without being attempted.
	type routed struct {
		pk  []any
		epk string
		err *apiError
	}
	keys := make([]routed, len(ops))
	for i, op := range ops {
		comps, has, err := opPartitionKey(op.PartitionKey)
		switch {
		case err != nil:
			keys[i].err = err
			continue
		case !has && t.hasPK:
			comps = t.pk
		case !has:
			keys[i].err = errBadRequest(msgPKMissing)
			continue
		}
		if aerr := t.def.checkHeaderArity(comps, false); aerr != nil {
			keys[i].err = aerr
			continue
		}
		keys[i].pk = t.def.normalizeNone(comps)
		e, eerr := t.def.epkOf(keys[i].pk)
		if eerr != nil {
			keys[i].err = eerr
			continue
		}
		keys[i].epk = e
	}

	p, lerr := t.lockPoint(true)
	if lerr != nil {
		return nil, lerr
	}
	c := t.coll
	view := c.ttlView()
	p.purgeExpired(view)
	results := make([]batchResult, len(ops))
	failed := false
	var total float64
	for i, op := range ops {
		if failed && !continueOnError {
			results[i] = batchResult{StatusCode: http.StatusFailedDependency}
			continue
		}
		k := keys[i]
		err := k.err
		if err == nil && !p.rng.Contains(k.epk) {
			err = errRangeGone(p.id, c)
		}
		var res batchResult
		if err == nil {
			res, err = s.bulkStep(t, p, op, k.pk, k.epk, view)
		}
		if err != nil {
			failed = true
			res = batchResult{StatusCode: err.status, SubStatusCode: err.sub, RequestCharge: 1}
		} else if !withContent && !strings.EqualFold(op.OperationType, "Read") {
			res.ResourceBody = nil
		}
		results[i] = res
		total += res.RequestCharge
	}
	lsn := p.lsn
	p.mu.Unlock()

	body, _ := json.Marshal(results)
	status := http.StatusOK
	if failed {
		status = http.StatusMultiStatus
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("x-ms-session-token", p.sessionToken(lsn))
	h.Set("lsn", itoa64(lsn))
	return &Response{Status: status, Header: h, Body: body, RequestCharge: total}, nil
}

// bulkStep runs one bulk operation as its own write in p (whose write lock
// the caller holds): on success its effect is installed at a new LSN.
func (s *Server) bulkStep(t *target, p *partition, op batchOp, pk []any, e string, view ttlView) (batchResult, *apiError) {
	ot := *t
	ot.hasPK, ot.pk, ot.prefix, ot.epk = true, pk, false, e
	key := pkKey(pk)
	lp := p.logicalFor(key, pk, e)
	current := func(id string) *document { return p.find(key, id, view) }
	res, doc, removed, err := s.batchStep(&ot, ot.coll, lp, op, current, p.nextTS(), view.cfg)
	if err != nil {
		if len(lp.docs) == 0 {
			delete(p.logical, key)
		}
		return batchResult{}, err
	}
	if doc == nil && removed == nil {
		if len(lp.docs) == 0 {
			delete(p.logical, key)
		}
		return res, nil // a read
	}
	p.lsn++
	if doc != nil {
		doc.lsn = p.lsn
		p.install(doc)
	}
	if removed != nil {
		if old := p.lookup(key, removed.id); old != nil {
			p.remove(old)
		}
	}
	return res, nil
}
