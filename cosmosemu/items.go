package cosmosemu

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// systemProps are the properties the service owns on a document; values a
// client sends for them are replaced.
var systemProps = [...]string{"_rid", "_self", "_etag", "_attachments", "_ts", "_lsn"}

// docID validates the id of a document body the way the service does on a
// write: a non-empty string of at most 1023 bytes. Ids that cannot be
// addressed later ('/', '\\', '#', trailing whitespace, control characters)
// are accepted on create, as by the service.
func docID(doc map[string]any) (string, *apiError) {
	v, ok := doc["id"]
	if !ok {
		return "", errBadRequest(msgMissingID)
	}
	id, ok := v.(string)
	if !ok {
		return "", errBadRequest("The input content is invalid because the 'id' property must be a string.")
	}
	if id == "" || len(id) > maxIDBytes {
		return "", errBadRequest("The input name '%s' is invalid. Ensure to provide a unique non-empty string less than '1024' characters.", truncate(id, 64))
	}
	return id, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// encodeUser marshals the user-owned part of a document (system properties
// dropped) without HTML escaping, as stored by the service.
func encodeUser(doc map[string]any) ([]byte, error) {
	for _, k := range systemProps {
		delete(doc, k)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// finishDocument appends the system properties to the user JSON and sets
// them on data, producing an installable version.
func (c *container) finishDocument(user []byte, data map[string]any, d *document) {
	self := "dbs/" + c.db.rid + "/colls/" + c.rid + "/docs/" + d.rid + "/"
	var b bytes.Buffer
	b.Grow(len(user) + 160)
	b.Write(user[:len(user)-1])
	if len(user) > 2 {
		b.WriteByte(',')
	}
	b.WriteString(`"_rid":"`)
	b.WriteString(d.rid)
	b.WriteString(`","_self":"`)
	b.WriteString(self)
	b.WriteString(`","_etag":`)
	etag, _ := json.Marshal(d.etag)
	b.Write(etag)
	b.WriteString(`,"_attachments":"attachments/","_ts":`)
	b.WriteString(strconv.FormatInt(d.ts, 10))
	b.WriteByte('}')
	data["_rid"] = d.rid
	data["_self"] = self
	data["_etag"] = d.etag
	data["_attachments"] = "attachments/"
	data["_ts"] = float64(d.ts)
	d.ttl = itemTTL(data)
	d.body = b.Bytes()
	d.data = data
}

// withLSN returns the body with "_lsn" added, as the change feed serves it.
func (d *document) withLSN() []byte {
	out := make([]byte, 0, len(d.body)+24)
	out = append(out, d.body[:len(d.body)-1]...)
	out = append(out, `,"_lsn":`...)
	out = strconv.AppendInt(out, d.lsn, 10)
	return append(out, '}')
}

func writeCharge(size int) float64 {
	kb := (size + 1023) / 1024
	if kb < 1 {
		kb = 1
	}
	return 5.71 * float64(kb)
}

func readCharge(size int) float64 {
	kb := (size + 1023) / 1024
	if kb < 1 {
		kb = 1
	}
	return float64(kb)
}

// itemResponse renders a point-operation answer with the service's headers.
func (s *Server) itemResponse(req *Request, status int, p *partition, lsn int64, d *document, withBody bool, charge float64) *Response {
	h := http.Header{}
	var body []byte
	if d != nil {
		h.Set("etag", d.etag)
		if withBody {
			body = d.body
			h.Set("Content-Type", "application/json")
		}
	}
	h.Set("x-ms-session-token", p.sessionToken(lsn))
	ls := strconv.FormatInt(lsn, 10)
	h.Set("lsn", ls)
	h.Set("x-ms-cosmos-llsn", ls)
	h.Set("x-ms-alt-content-path", "dbs/"+req.Database+"/colls/"+req.Container)
	h.Set("x-ms-content-path", req.tgt.coll.rid)
	return &Response{Status: status, Header: h, Body: body, RequestCharge: charge}
}

func wantsContent(req *Request) bool {
	return !strings.EqualFold(strings.TrimSpace(req.HTTP.Header.Get("Prefer")), "return=minimal")
}

// checkDocPK verifies the body's partition key equals the header's.
func (t *target) checkDocPK(doc map[string]any) *apiError {
	if pkKey(t.def.extractPK(doc)) != pkKey(t.pk) {
		return newErrSub(http.StatusBadRequest, subStatusPartitionKeyMismatch, msgPKMismatch)
	}
	return nil
}

func (s *Server) handleWriteNew(req *Request) (*Response, *apiError) {
	t := req.tgt
	id, err := docID(t.doc)
	if err != nil {
		return nil, err
	}
	if err := t.checkDocPK(t.doc); err != nil {
		return nil, err
	}
	user, jerr := encodeUser(t.doc)
	if jerr != nil {
		return nil, errBadRequest("The input content is invalid: %s", jerr.Error())
	}
	if len(user) > defaultMaxDocumentBytes {
		return nil, errTooLarge()
	}
	c := t.coll
	view := c.ttlView()
	if err := checkItemTTL(view.cfg, t.doc); err != nil {
		return nil, err
	}
	ifMatch := req.HTTP.Header.Get("If-Match")
	key := pkKey(t.pk)
	etag := s.store.newETag()

	p, lerr := t.lockPoint(true)
	if lerr != nil {
		return nil, lerr
	}
	p.purgeExpired(view)
	existing := p.find(key, id, view)
	if existing != nil && req.Operation == OpCreate {
		p.mu.Unlock()
		return nil, errConflict()
	}
	if ifMatch != "" && ifMatch != "*" && (existing == nil || existing.etag != ifMatch) {
		p.mu.Unlock()
		if existing == nil {
			return nil, errNotFound()
		}
		return nil, errPrecondition()
	}
	d := &document{id: id, lp: p.logicalFor(key, t.pk, t.epk), etag: etag}
	if existing != nil {
		d.seq, d.rid = existing.seq, existing.rid
	} else {
		d.seq, d.rid = c.nextDocRID()
	}
	p.lsn++
	d.lsn = p.lsn
	d.ts = p.nextTS()
	c.finishDocument(user, t.doc, d)
	p.install(d)
	p.mu.Unlock()

	status := http.StatusCreated
	if existing != nil {
		status = http.StatusOK
	}
	return s.itemResponse(req, status, p, d.lsn, d, wantsContent(req), writeCharge(len(d.body))), nil
}

func (s *Server) handleReadItem(req *Request) (*Response, *apiError) {
	t := req.tgt
	id := req.path[5]
	view := t.coll.ttlView()
	p, lerr := t.lockPoint(false)
	if lerr != nil {
		return nil, lerr
	}
	d := p.find(pkKey(t.pk), id, view)
	lsn := p.lsn
	p.mu.RUnlock()
	if d == nil {
		return nil, errNotFound()
	}
	if inm := req.HTTP.Header.Get("If-None-Match"); inm != "" && (inm == "*" || inm == d.etag) {
		resp := s.itemResponse(req, http.StatusNotModified, p, lsn, d, false, 1)
		return resp, nil
	}
	return s.itemResponse(req, http.StatusOK, p, lsn, d, req.HTTP.Method != http.MethodHead, readCharge(len(d.body))), nil
}

func (s *Server) handleReplaceItem(req *Request) (*Response, *apiError) {
	t := req.tgt
	id := req.path[5]
	bodyID, err := docID(t.doc)
	if err != nil {
		return nil, err
	}
	if bodyID != id {
		return nil, errBadRequest("The value of the 'id' property in the document does not match the id in the request URI.")
	}
	if err := t.checkDocPK(t.doc); err != nil {
		return nil, err
	}
	user, jerr := encodeUser(t.doc)
	if jerr != nil {
		return nil, errBadRequest("The input content is invalid: %s", jerr.Error())
	}
	view := t.coll.ttlView()
	if err := checkItemTTL(view.cfg, t.doc); err != nil {
		return nil, err
	}
	ifMatch := req.HTTP.Header.Get("If-Match")
	key := pkKey(t.pk)
	etag := s.store.newETag()

	p, lerr := t.lockPoint(true)
	if lerr != nil {
		return nil, lerr
	}
	p.purgeExpired(view)
	existing := p.find(key, id, view)
	if existing == nil {
		p.mu.Unlock()
		return nil, errNotFound()
	}
	if ifMatch != "" && ifMatch != "*" && existing.etag != ifMatch {
		p.mu.Unlock()
		return nil, errPrecondition()
	}
	d := &document{id: id, lp: existing.lp, etag: etag, seq: existing.seq, rid: existing.rid}
	p.lsn++
	d.lsn = p.lsn
	d.ts = p.nextTS()
	t.coll.finishDocument(user, t.doc, d)
	p.install(d)
	p.mu.Unlock()
	return s.itemResponse(req, http.StatusOK, p, d.lsn, d, wantsContent(req), writeCharge(len(d.body))), nil
}

func (s *Server) handleDeleteItem(req *Request) (*Response, *apiError) {
	t := req.tgt
	id := req.path[5]
	ifMatch := req.HTTP.Header.Get("If-Match")
	view := t.coll.ttlView()
	p, lerr := t.lockPoint(true)
	if lerr != nil {
		return nil, lerr
	}
	p.purgeExpired(view)
	existing := p.find(pkKey(t.pk), id, view)
	if existing == nil {
		p.mu.Unlock()
		return nil, errNotFound()
	}
	if ifMatch != "" && ifMatch != "*" && existing.etag != ifMatch {
		p.mu.Unlock()
		return nil, errPrecondition()
	}
	p.lsn++
	lsn := p.lsn
	p.remove(existing)
	p.mu.Unlock()
	return s.itemResponse(req, http.StatusNoContent, p, lsn, nil, false, writeCharge(len(existing.body))), nil
}

func (s *Server) handlePatchItem(req *Request) (*Response, *apiError) {
	t := req.tgt
	id := req.path[5]
	spec, err := parsePatch(req.body)
	if err != nil {
		return nil, err
	}
	ifMatch := req.HTTP.Header.Get("If-Match")
	key := pkKey(t.pk)
	etag := s.store.newETag()
	view := t.coll.ttlView()

	p, lerr := t.lockPoint(true)
	if lerr != nil {
		return nil, lerr
	}
	p.purgeExpired(view)
	existing := p.find(key, id, view)
	if existing == nil {
		p.mu.Unlock()
		return nil, errNotFound()
	}
	if ifMatch != "" && ifMatch != "*" && existing.etag != ifMatch {
		p.mu.Unlock()
		return nil, errPrecondition()
	}
	data, user, perr := spec.apply(existing, t.def)
	if perr == nil {
		perr = checkItemTTL(view.cfg, data)
	}
	if perr != nil {
		p.mu.Unlock()
		return nil, perr
	}
	d := &document{id: id, lp: existing.lp, etag: etag, seq: existing.seq, rid: existing.rid}
	p.lsn++
	d.lsn = p.lsn
	d.ts = p.nextTS()
	t.coll.finishDocument(user, data, d)
	p.install(d)
	p.mu.Unlock()
	return s.itemResponse(req, http.StatusOK, p, d.lsn, d, wantsContent(req), writeCharge(len(d.body))), nil
}
