package cosmosemu

import (
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// Transactional batch
//
// All operations of a batch address one logical partition, so one physical
// partition: the batch runs entirely under that partition's write lock,
// staging its effects in an overlay; nothing is installed unless every
// operation succeeds, and then all versions are installed with one LSN (the
// service commits a batch as one transaction). Concurrent writers therefore
// observe either none or all of a batch, and the change feed never returns
// part of it (see the same-LSN rule in changefeed.go).

type batchOp struct {
	OperationType string          `json:"operationType"`
	ID            string          `json:"id"`
	IfMatch       string          `json:"ifMatch"`
	IfNoneMatch   string          `json:"ifNoneMatch"`
	PartitionKey  json.RawMessage `json:"partitionKey"`
	ResourceBody  json.RawMessage `json:"resourceBody"`
}

type batchResult struct {
	StatusCode    int             `json:"statusCode"`
	SubStatusCode int             `json:"subStatusCode,omitempty"`
	RequestCharge float64         `json:"requestCharge"`
	ETag          string          `json:"eTag,omitempty"`
	ResourceBody  json.RawMessage `json:"resourceBody,omitempty"`
}

// decodeBatchOps reads a batch body (transactional or bulk): 1 to
// maxBatchOperations operations, else the service's 400.
func decodeBatchOps(body []byte) ([]batchOp, *apiError) {
	var ops []batchOp
	if err := json.Unmarshal(body, &ops); err != nil {
		return nil, errBadRequest("The batch request body is invalid: %s", err.Error())
	}
	if len(ops) == 0 {
		return nil, errBadRequest(msgBatchEmpty)
	}
	if len(ops) > maxBatchOperations {
		return nil, errBadRequest(msgBatchTooMany)
	}
	return ops, nil
}

func (s *Server) handleBatch(req *Request) (*Response, *apiError) {
	if isBulkRequest(req.HTTP.Header) {
		return s.handleBulk(req)
	}
	t := req.tgt
	ops, aerr := decodeBatchOps(req.body)
	if aerr != nil {
		return nil, aerr
	}
	for i := range ops {
		comps, has, err := opPartitionKey(ops[i].PartitionKey)
		if has && (err != nil || pkKey(t.def.normalizeNone(comps)) != pkKey(t.pk)) {
			return nil, errBadRequest("All operations of a transactional batch must target the partition key of the request.")
		}
	}
	withContent := wantsContent(req)
	key := pkKey(t.pk)
	c := t.coll
	view := c.ttlView()

	type staged struct {
		doc     *document // nil: deleted
		touched bool
	}
	overlay := map[string]*staged{}
	var installs []*document
	var removes []*document
	results := make([]batchResult, len(ops))
	failed := -1
	var failure *apiError

	p, lerr := t.lockPoint(true)
	if lerr != nil {
		return nil, lerr
	}
	p.purgeExpired(view)
	current := func(id string) *document {
		if st, ok := overlay[id]; ok {
			return st.doc
		}
		return p.find(key, id, view)
	}
	ts := p.nextTS()
	lp := p.logicalFor(key, t.pk, t.epk)
	for i, op := range ops {
		res, doc, removed, err := s.batchStep(t, c, lp, op, current, ts, view.cfg)
		if err != nil {
			failed, failure = i, err
			break
		}
		if doc != nil {
			overlay[doc.id] = &staged{doc: doc, touched: true}
		}
		if removed != nil {
			overlay[removed.id] = &staged{doc: nil, touched: true}
		}
		if !withContent && op.OperationType != "Read" {
			res.ResourceBody = nil
		}
		results[i] = res
	}
	var lsn int64
	if failed < 0 {
		p.lsn++
		lsn = p.lsn
		for id, st := range overlay {
			if st.doc != nil {
				st.doc.lsn = lsn
				installs = append(installs, st.doc)
			} else if old := p.lookup(key, id); old != nil {
				removes = append(removes, old)
			}
		}
		sortDocsBySeq(installs)
		for _, d := range installs {
			p.install(d)
		}
		for _, d := range removes {
			p.remove(d)
		}
	} else {
		if len(lp.docs) == 0 {
			delete(p.logical, key)
		}
		lsn = p.lsn
	}
	p.mu.Unlock()

	var total float64
	if failed >= 0 {
		for i := range results {
			results[i] = batchResult{StatusCode: http.StatusFailedDependency, RequestCharge: 0}
		}
		results[failed] = batchResult{StatusCode: failure.status, SubStatusCode: failure.sub, RequestCharge: 1}
		total = 1
	} else {
		for i := range results {
			total += results[i].RequestCharge
		}
	}
	body, _ := json.Marshal(results)
	status := http.StatusOK
	if failed >= 0 {
		status = http.StatusMultiStatus
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("x-ms-session-token", p.sessionToken(lsn))
	h.Set("lsn", itoa64(lsn))
	return &Response{Status: status, Header: h, Body: body, RequestCharge: total}, nil
}

// batchStep executes one operation against the staged view. It returns the
// result, a new version to install and/or a version to remove.
func (s *Server) batchStep(t *target, c *container, lp *logicalPart, op batchOp, current func(string) *document, ts int64, ttl *ttlConfig) (batchResult, *document, *document, *apiError) {
	kind := strings.ToLower(op.OperationType)
	newVersion := func(id string, user []byte, data map[string]any, prev *document) *document {
		d := &document{id: id, lp: lp, etag: s.store.newETag(), ts: ts}
		if prev != nil {
			d.seq, d.rid = prev.seq, prev.rid
		} else {
			d.seq, d.rid = c.nextDocRID()
		}
		c.finishDocument(user, data, d)
		return d
	}
	checkMatch := func(d *document) *apiError {
		if op.IfMatch != "" && op.IfMatch != "*" && d.etag != op.IfMatch {
			return errPrecondition()
		}
		return nil
	}
	parseBody := func() (string, map[string]any, []byte, *apiError) {
		doc, err := parseDocument(op.ResourceBody)
		if err != nil {
			return "", nil, nil, err
		}
		id, err := docID(doc)
		if err != nil {
			return "", nil, nil, err
		}
		if err := t.checkDocPK(doc); err != nil {
			return "", nil, nil, err
		}
		if err := checkItemTTL(ttl, doc); err != nil {
			return "", nil, nil, err
		}
		user, jerr := encodeUser(doc)
		if jerr != nil {
			return "", nil, nil, errBadRequest("invalid document: %s", jerr.Error())
		}
		return id, doc, user, nil
	}
	ok := func(status int, d *document) batchResult {
		r := batchResult{StatusCode: status}
		if d != nil {
			r.ETag = d.etag
			r.ResourceBody = d.body
			r.RequestCharge = writeCharge(len(d.body))
		} else {
			r.RequestCharge = 5.71
		}
		return r
	}
	switch kind {
	case "create":
		id, data, user, err := parseBody()
		if err != nil {
			return batchResult{}, nil, nil, err
		}
		if current(id) != nil {
			return batchResult{}, nil, nil, errConflict()
		}
		d := newVersion(id, user, data, nil)
		return ok(http.StatusCreated, d), d, nil, nil
	case "upsert":
		id, data, user, err := parseBody()
		if err != nil {
			return batchResult{}, nil, nil, err
		}
		prev := current(id)
		if op.IfMatch != "" && prev == nil {
			return batchResult{}, nil, nil, errNotFound()
		}
		if prev != nil {
			if err := checkMatch(prev); err != nil {
				return batchResult{}, nil, nil, err
			}
		}
		d := newVersion(id, user, data, prev)
		status := http.StatusCreated
		if prev != nil {
			status = http.StatusOK
		}
		return ok(status, d), d, nil, nil
	case "replace":
		id, data, user, err := parseBody()
		if err != nil {
			return batchResult{}, nil, nil, err
		}
		if op.ID != "" && op.ID != id {
			return batchResult{}, nil, nil, errBadRequest("The value of the 'id' property in the document does not match the id of the operation.")
		}
		prev := current(id)
		if prev == nil {
			return batchResult{}, nil, nil, errNotFound()
		}
		if err := checkMatch(prev); err != nil {
			return batchResult{}, nil, nil, err
		}
		d := newVersion(id, user, data, prev)
		return ok(http.StatusOK, d), d, nil, nil
	case "read":
		prev := current(op.ID)
		if prev == nil {
			return batchResult{}, nil, nil, errNotFound()
		}
		if op.IfNoneMatch != "" && (op.IfNoneMatch == "*" || op.IfNoneMatch == prev.etag) {
			return batchResult{StatusCode: http.StatusNotModified, ETag: prev.etag, RequestCharge: 1}, nil, nil, nil
		}
		return batchResult{StatusCode: http.StatusOK, ETag: prev.etag, ResourceBody: prev.body, RequestCharge: readCharge(len(prev.body))}, nil, nil, nil
	case "delete":
		prev := current(op.ID)
		if prev == nil {
			return batchResult{}, nil, nil, errNotFound()
		}
		if err := checkMatch(prev); err != nil {
			return batchResult{}, nil, nil, err
		}
		return ok(http.StatusNoContent, nil), nil, prev, nil
	case "patch":
		prev := current(op.ID)
		if prev == nil {
			return batchResult{}, nil, nil, errNotFound()
		}
		if err := checkMatch(prev); err != nil {
			return batchResult{}, nil, nil, err
		}
		spec, err := parsePatch(op.ResourceBody)
		if err != nil {
			return batchResult{}, nil, nil, err
		}
		data, user, err := spec.apply(prev, t.def)
		if err == nil {
			err = checkItemTTL(ttl, data)
		}
		if err != nil {
			return batchResult{}, nil, nil, err
		}
		d := newVersion(op.ID, user, data, prev)
		return ok(http.StatusOK, d), d, nil, nil
	}
	return batchResult{}, nil, nil, errBadRequest("Unknown batch operation type '%s'.", op.OperationType)
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

func sortDocsBySeq(ds []*document) {
	sort.Slice(ds, func(i, j int) bool { return ds[i].seq < ds[j].seq })
}
