package cosmosemu

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"hash/fnv"
	"math"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/durafeed/durafeed/cosmosemu/internal/query"
	"github.com/durafeed/durafeed/internal/epk"
)

// Queries
//
// A query without ORDER BY/TOP/DISTINCT/aggregates/OFFSET/GROUP BY streams,
// the way the gateway fans it out: range by range in EPK order, and within
// a physical partition in storage order (creation sequence, _rid order).
// Its continuation lists the EPK spans still to read, each with the
// creation sequence of the last document returned in it (and how many of
// that document's JOIN rows were), so a document that exists for the whole
// paging is returned exactly once even under concurrent writes (replaces
// keep the sequence; new documents come later in their range). Spans are
// EPK intervals, not range ids, so a continuation pointing into a range that
// has since split resumes on its children, each from the same position.
// Like the service, a full page always carries a continuation, so the last
// page may be empty. Other queries are evaluated whole on each page and
// paged by offset; they are only accepted within one partition (as by the
// gateway, which answers 400/1004 for them across partitions).

type queryRequest struct {
	text   string
	params map[string]any
	q      *query.Query
}

func parseQueryRequest(body []byte) (*queryRequest, *apiError) {
	var raw struct {
		Query      string `json:"query"`
		Parameters []struct {
			Name  string `json:"name"`
			Value any    `json:"value"`
		} `json:"parameters"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, errBadRequest("The query body is invalid: %s", err.Error())
	}
	if strings.TrimSpace(raw.Query) == "" {
		return nil, errBadRequest("The query text is missing.")
	}
	q, err := query.Parse(raw.Query)
	if err != nil {
		return nil, queryError(err)
	}
	params := make(map[string]any, len(raw.Parameters))
	for _, p := range raw.Parameters {
		params[p.Name] = p.Value
	}
	return &queryRequest{text: raw.Query, params: params, q: q}, nil
}

// filterResources answers feeds and queries over account-level resources
// (databases, containers, offers) in one page.
func (s *Server) filterResources(req *Request, items []map[string]any) ([]any, *apiError) {
	if req.Operation != OpQuery {
		out := make([]any, len(items))
		for i, it := range items {
			out[i] = it
		}
		return out, nil
	}
	qr, err := parseQueryRequest(req.body)
	if err != nil {
		return nil, err
	}
	res, qerr := qr.q.Execute(items, qr.params)
	if qerr != nil {
		return nil, queryError(qerr)
	}
	return res, nil
}

// pageSize reads x-ms-max-item-count; 0 means unlimited.
func pageSize(h http.Header, def int) (int, *apiError) {
	v := strings.TrimSpace(h.Get("x-ms-max-item-count"))
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < -1 {
		return 0, errBadRequest("Invalid value '%s' for header x-ms-max-item-count.", v)
	}
	if n == -1 {
		return 0, nil
	}
	if n == 0 {
		return def, nil
	}
	return n, nil
}

// queryCont is a query continuation: Spans (streaming queries) or Off
// (evaluated queries).
type queryCont struct {
	V     int         `json:"v"`
	Hash  uint64      `json:"h"`
	Spans []querySpan `json:"r,omitempty"`
	Off   int         `json:"o,omitempty"`
}

// querySpan is an EPK interval [Min, Max) still to be read, in storage
// order, after the document with creation sequence Seq (whose first Skip
// result rows were returned; Skip 0 means all of them). Seq 0 means from
// the start.
type querySpan struct {
	Min  string `json:"a"`
	Max  string `json:"b"`
	Seq  uint64 `json:"s,omitempty"`
	Skip int    `json:"k,omitempty"`
}

const queryContVersion = 2

func (c queryCont) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCont(s string, hash uint64) (queryCont, *apiError) {
	var c queryCont
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(b, &c) != nil || c.V != queryContVersion || c.Hash != hash || c.Off < 0 {
		return c, errBadRequest("Invalid Continuation Token")
	}
	for _, sp := range c.Spans {
		if epk.Compare(sp.Min, sp.Max) >= 0 || sp.Skip < 0 {
			return c, errBadRequest("Invalid Continuation Token")
		}
	}
	return c, nil
}

// mergeSpans joins adjacent spans at the same position, keeping
// continuations short.
func mergeSpans(in []querySpan) []querySpan {
	var out []querySpan
	for _, sp := range in {
		if n := len(out); n > 0 && out[n-1].Seq == sp.Seq && out[n-1].Skip == sp.Skip && epk.Compare(out[n-1].Max, sp.Min) == 0 {
			out[n-1].Max = sp.Max
			continue
		}
		out = append(out, sp)
	}
	return out
}

func queryHash(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// snapshot collects the current, unexpired versions of the documents in
// scope sc, in creation order, from parts (see docsIn). It reports the
// first partition found gone (split since it was resolved).
func snapshot(parts []*partition, sc *queryScope) ([]*document, *partition) {
	var out []*document
	for _, p := range parts {
		docs, ok := p.docsIn(sc, p.rng, true, 0)
		if !ok {
			return nil, p
		}
		out = append(out, docs...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out, nil
}

// docsIn returns, in creation order, the current versions in p of the
// documents of scope sc (sc.keep; all when nil) that sc.ttl does not hide,
// whose creation sequence is at least from and whose EPK lies in span
// (unless whole, when p lies entirely inside the span). With a plan
// (sc.plan, see index.go) only the versions the index selects for it are
// considered: a superset of those matching the query. ok is false when p
// is gone (split since it was resolved).
//
// The result depends only on those arguments, not on how selectDocs finds
// it: with sc.logicalKey set, the work is bounded by the size of that
// logical partition instead of growing with p's.
func (p *partition) docsIn(sc *queryScope, span epk.Range, whole bool, from uint64) ([]*document, bool) {
	if sc.plan != nil && !p.ensureIndexes(sc.plan) {
		return nil, false
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.gone {
		return nil, false
	}
	out, visits := p.selectDocs(sc, span, whole, from)
	p.coll.selectVisits.Add(uint64(visits))
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out, true
}

// selectDocs is docsIn's selection, in no particular order (caller holds
// p.mu; the plan's indexes exist). visits counts its work: each logical
// partition looked up or iterated and each version or index posting read.
//
// With sc.logicalKey set, the scope is one logical partition lp: the plan's
// candidates in it are the versions d of lp with sc.plan.Holds(d.data)
// (see candidates), so lp is read directly, testing Holds on each version,
// unless the plan's postings are fewer than lp's versions (estimateUpTo,
// which stops counting at len(lp.docs)); then those postings are read and
// filtered by sc.keep as for any scope. Either way the set is that of the
// postings path, and at most len(lp.docs) versions or postings are read.
func (p *partition) selectDocs(sc *queryScope, span epk.Range, whole bool, from uint64) (out []*document, visits int) {
	limit := math.MaxInt // bound of the postings read, for candidates
	inSpan := func(lp *logicalPart) bool { return whole || span.Contains(lp.epk) }
	add := func(d *document) {
		if d.seq >= from && !sc.ttl.hidden(d) {
			out = append(out, d)
		}
	}
	if sc.logicalKey != "" {
		visits++
		lp := p.logical[sc.logicalKey]
		if lp == nil || !inSpan(lp) {
			return nil, visits
		}
		if n := len(lp.docs); sc.plan == nil || p.estimateUpTo(sc.plan, n) >= n {
			for _, d := range lp.docs {
				visits++
				if sc.plan == nil || sc.plan.Holds(d.data) {
					add(d)
				}
			}
			return out, visits
		}
		limit = len(lp.docs) // fewer postings: read them below
	}
	if sc.plan != nil {
		set := map[*document]struct{}{}
		visits += p.candidates(sc.plan, set, limit)
		for d := range set {
			if (sc.keep == nil || sc.keep(d.lp)) && inSpan(d.lp) {
				add(d)
			}
		}
		return out, visits
	}
	for _, lp := range p.logical {
		visits++
		if (sc.keep != nil && !sc.keep(lp)) || !inSpan(lp) {
			continue
		}
		for _, d := range lp.docs {
			visits++
			add(d)
		}
	}
	return out, visits
}

func (s *Server) handleQuery(ctx context.Context, req *Request) (*Response, *apiError) {
	qr, err := parseQueryRequest(req.body)
	if err != nil {
		return nil, err
	}
	return s.runDocQuery(ctx, req, qr)
}

func (s *Server) handleReadFeed(ctx context.Context, req *Request) (*Response, *apiError) {
	q, _ := query.Parse("SELECT * FROM root r")
	return s.runDocQuery(ctx, req, &queryRequest{text: "readfeed", params: map[string]any{}, q: q})
}

// queryScope is where a document query reads: the physical partitions
// and EPK interval it covers and the logical-partition filter.
type queryScope struct {
	coll  *container
	named *partition // x-ms-documentdb-partitionkeyrangeid: only this range
	byID  bool
	rng   epk.Range // EPK interval of the scope
	keep  func(lp *logicalPart) bool
	pkKey string           // canonical key (or prefix) when scoped by partition key
	ttl   ttlView          // which versions are expired for this request
	plan  *query.IndexPlan // candidates through the index; nil: scan

	// logicalKey, when not "", is the key (logicalPart.key) of the one
	// logical partition in scope: the query names a whole partition key
	// value, not a hierarchical prefix, and keep admits exactly that
	// logical partition. It only lets docsIn find the same documents with
	// work bounded by that logical partition (see selectDocs).
	logicalKey string
}

// overlapping returns the current partitions of the scope intersecting
// [min, max), in EPK order.
func (sc *queryScope) overlapping(min, max string) []*partition {
	if sc.byID {
		if sc.named == nil || epk.Compare(sc.named.rng.Max, min) <= 0 || epk.Compare(sc.named.rng.Min, max) >= 0 {
			return nil
		}
		return []*partition{sc.named}
	}
	return sc.coll.partitionsOverlapping(min, max)
}

// gone answers a partition found split: 410/1002 when the request named
// it, nil (re-resolve) otherwise.
func (sc *queryScope) gone(p *partition) *apiError {
	if sc.byID {
		return errRangeGone(p.id, sc.coll)
	}
	return nil
}

func (s *Server) runDocQuery(ctx context.Context, req *Request, qr *queryRequest) (*Response, *apiError) {
	t := req.tgt
	h := req.HTTP.Header
	size, err := pageSize(h, defaultQueryPageSize)
	if err != nil {
		return nil, err
	}
	safe := qr.q.Features().CrossPartitionSafe()
	sc := &queryScope{coll: t.coll, byID: t.byID, rng: epk.Range{Min: epk.MinInclusive, Max: epk.MaxExclusive}, ttl: t.coll.ttlView()}
	pk, prefix, scoped := t.pk, t.prefix, t.hasPK
	if !scoped && !t.byID && req.Operation == OpQuery {
		if pinned, ok := pinnedPartitionKey(qr.text, qr.params, t.def); ok {
			pk, prefix, scoped = pinned, len(pinned) < len(t.def.Paths), true
		}
	}
	if !scoped && !t.byID && req.Operation == OpQuery {
		if !isTrue(h.Get("x-ms-documentdb-query-enablecrosspartition")) {
			return nil, errBadRequest(msgCrossPartitionOff)
		}
	}
	namedID := ""
	if t.byID {
		namedID = h.Get("x-ms-documentdb-partitionkeyrangeid")
		if len(t.parts) == 1 {
			sc.named = t.parts[0]
			sc.rng = sc.named.rng
		} else {
			// The requested key lives in another range: nothing is here.
			sc.rng = epk.Range{}
		}
	}
	if scoped {
		e, eerr := t.def.epkOf(pk)
		if eerr != nil {
			return nil, eerr
		}
		if !t.byID {
			// Keys with this EPK prefix sort in [e, e+"FF"); the key itself
			// is the point interval [e, e+"01") under epk.Compare.
			sc.rng = epk.Range{Min: e, Max: e + "01"}
			if prefix {
				sc.rng.Max = e + "FF"
			}
		}
		sc.pkKey = pkKey(pk)
		if !prefix && !s.store.noLogicalSelect.Load() {
			sc.logicalKey = sc.pkKey
		}
		want := sc.pkKey
		sc.keep = func(lp *logicalPart) bool {
			if prefix {
				return hasPKPrefix(lp.pk, pk)
			}
			return lp.key == want
		}
	}
	if !safe && len(sc.overlapping(sc.rng.Min, sc.rng.Max)) > 1 {
		return nil, newErrSub(http.StatusBadRequest, subStatusCrossPartitionNotServable, msgCrossPartitionQuery)
	}
	if req.Operation == OpQuery {
		if err := t.coll.indexing().checkIndexing(qr.q, h); err != nil {
			return nil, err
		}
	}
	if req.Operation == OpQuery && !s.store.noIndex {
		sc.plan = indexable(qr.q.IndexPlan(qr.params), t.coll.indexing())
	}
	hash := queryHash(qr.text, sc.pkKey, namedID)
	var cont queryCont
	ct := h.Get("x-ms-continuation")
	if ct != "" {
		if cont, err = decodeCont(ct, hash); err != nil {
			return nil, err
		}
	}

	run := &queryRun{ctx: ctx, qr: qr, sc: sc, size: size}
	var next *queryCont
	if safe {
		spans := cont.Spans
		if ct == "" && epk.Compare(sc.rng.Min, sc.rng.Max) < 0 {
			spans = []querySpan{{Min: sc.rng.Min, Max: sc.rng.Max}}
		}
		rest, err := run.stream(spans)
		if err != nil {
			return nil, err
		}
		if rest != nil {
			next = &queryCont{V: queryContVersion, Hash: hash, Spans: rest}
		}
	} else {
		off, err := run.evaluate(cont.Off)
		if err != nil {
			return nil, err
		}
		if off > 0 {
			next = &queryCont{V: queryContVersion, Hash: hash, Off: off}
		}
	}
	results := run.results

	var body bytes.Buffer
	body.WriteString(`{"_rid":"`)
	body.WriteString(t.coll.rid)
	body.WriteString(`","Documents":[`)
	for i, r := range results {
		if i > 0 {
			body.WriteByte(',')
		}
		body.Write(r)
	}
	body.WriteString(`],"_count":`)
	body.WriteString(strconv.Itoa(len(results)))
	body.WriteByte('}')

	resp := jsonResponse(http.StatusOK, body.Bytes(), 2.79+0.05*float64(run.retrieved))
	resp.Header.Set("x-ms-item-count", strconv.Itoa(len(results)))
	if next != nil {
		resp.Header.Set("x-ms-continuation", next.encode())
	}
	touched := run.touched
	if len(touched) == 0 {
		touched = sc.overlapping(sc.rng.Min, sc.rng.Max)
	}
	var tokens []string
	for _, p := range touched {
		p.mu.RLock()
		tokens = append(tokens, p.sessionToken(p.lsn))
		p.mu.RUnlock()
	}
	if len(tokens) > 0 {
		resp.Header.Set("x-ms-session-token", strings.Join(tokens, ","))
	}
	if isTrue(h.Get("x-ms-documentdb-populatequerymetrics")) {
		resp.Header.Set("x-ms-documentdb-query-metrics", "totalExecutionTimeInMs=0.10;queryCompileTimeInMs=0.01;queryLogicalPlanBuildTimeInMs=0.01;queryPhysicalPlanBuildTimeInMs=0.01;queryOptimizationTimeInMs=0.00;VMExecutionTimeInMs=0.05;indexLookupTimeInMs=0.00;documentLoadTimeInMs=0.01;systemFunctionExecuteTimeInMs=0.00;userFunctionExecuteTimeInMs=0.00;retrievedDocumentCount="+strconv.Itoa(run.retrieved)+";retrievedDocumentSize=0;outputDocumentCount="+strconv.Itoa(len(results))+";outputDocumentSize="+strconv.Itoa(run.bytesOut)+";writeOutputTimeInMs=0.00;indexUtilizationRatio=1.00")
	}
	if isTrue(h.Get("x-ms-cosmos-populateindexmetrics")) {
		im, _ := json.Marshal(map[string]any{"UtilizedSingleIndexes": []any{}, "PotentialSingleIndexes": []any{}, "UtilizedCompositeIndexes": []any{}, "PotentialCompositeIndexes": []any{}})
		resp.Header.Set("x-ms-cosmos-index-utilization", base64.StdEncoding.EncodeToString(im))
	}
	return resp, nil
}

// queryRun accumulates one page of a document query.
type queryRun struct {
	ctx       context.Context
	qr        *queryRequest
	sc        *queryScope
	size      int
	results   []json.RawMessage
	bytesOut  int
	retrieved int
	touched   []*partition
}

func (r *queryRun) full() bool {
	return (r.size > 0 && len(r.results) >= r.size) || r.bytesOut >= defaultMaxResponseBytes
}

func (r *queryRun) touch(p *partition) {
	for _, q := range r.touched {
		if q == p {
			return
		}
	}
	r.touched = append(r.touched, p)
}

// stream serves a streaming query over spans (in EPK order) range by range
// and returns the spans left when the page filled (nil when done). Each
// span is read partition by partition, re-resolving the partitions after
// every one so a split in between is followed.
func (r *queryRun) stream(spans []querySpan) ([]querySpan, *apiError) {
	for si, sp := range spans {
		from := sp.Min
		for epk.Compare(from, sp.Max) < 0 {
			qs := r.sc.overlapping(from, sp.Max)
			if len(qs) == 0 {
				break
			}
			q := qs[0]
			es := epk.Range{Min: from, Max: sp.Max}
			if epk.Compare(q.rng.Min, es.Min) > 0 {
				es.Min = q.rng.Min
			}
			if epk.Compare(q.rng.Max, es.Max) < 0 {
				es.Max = q.rng.Max
			}
			whole := epk.Compare(es.Min, q.rng.Min) <= 0 && epk.Compare(q.rng.Max, es.Max) <= 0
			docs, ok := q.docsIn(r.sc, es, whole, sp.Seq)
			if !ok {
				if err := r.sc.gone(q); err != nil {
					return nil, err
				}
				continue // split meanwhile: resolve [from, sp.Max) again
			}
			r.touch(q)
			for _, d := range docs {
				if err := r.ctx.Err(); err != nil {
					return nil, newErr(http.StatusRequestTimeout, "The request was canceled.")
				}
				if d.seq == sp.Seq && sp.Skip == 0 {
					continue // returned whole on an earlier page
				}
				r.retrieved++
				rows, qerr := r.qr.q.Execute([]map[string]any{d.data}, r.qr.params)
				if qerr != nil {
					return nil, queryError(qerr)
				}
				skip := 0
				if d.seq == sp.Seq {
					skip = sp.Skip
				}
				for j := skip; j < len(rows); j++ {
					raw := encodeResult(rows[j], d)
					r.results = append(r.results, raw)
					r.bytesOut += len(raw)
					if !r.full() {
						continue
					}
					at := querySpan{Min: es.Min, Max: es.Max, Seq: d.seq}
					if j+1 < len(rows) {
						at.Skip = j + 1
					}
					rest := []querySpan{at}
					if epk.Compare(es.Max, sp.Max) < 0 {
						rest = append(rest, querySpan{Min: es.Max, Max: sp.Max, Seq: sp.Seq, Skip: sp.Skip})
					}
					rest = append(rest, spans[si+1:]...)
					return mergeSpans(rest), nil
				}
			}
			from = es.Max
		}
	}
	return nil, nil
}

// evaluate serves a query evaluated whole (ORDER BY, aggregates, ...) over
// the scope's single partition, from result offset off, and returns the
// offset to continue from (0 when done).
func (r *queryRun) evaluate(off int) (int, *apiError) {
	var docs []*document
	for {
		parts := r.sc.overlapping(r.sc.rng.Min, r.sc.rng.Max)
		if len(parts) > 1 {
			// Split while paging: the gateway cannot serve it any more.
			return 0, newErrSub(http.StatusBadRequest, subStatusCrossPartitionNotServable, msgCrossPartitionQuery)
		}
		var gone *partition
		docs, gone = snapshot(parts, r.sc)
		if gone == nil {
			for _, p := range parts {
				r.touch(p)
			}
			break
		}
		if err := r.sc.gone(gone); err != nil {
			return 0, err
		}
	}
	all := make([]map[string]any, len(docs))
	for i, d := range docs {
		all[i] = d.data
	}
	r.retrieved = len(all)
	rows, qerr := r.qr.q.Execute(all, r.qr.params)
	if qerr != nil {
		return 0, queryError(qerr)
	}
	for j := off; j < len(rows); j++ {
		raw := encodeResult(rows[j], nil)
		r.results = append(r.results, raw)
		r.bytesOut += len(raw)
		if r.full() && j+1 < len(rows) {
			return j + 1, nil
		}
	}
	return 0, nil
}

// encodeResult marshals one result row, reusing the stored body when the
// row is the document itself.
func encodeResult(v any, d *document) json.RawMessage {
	if d != nil {
		if m, ok := v.(map[string]any); ok && reflect.ValueOf(m).UnsafePointer() == reflect.ValueOf(d.data).UnsafePointer() {
			return d.body
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return json.RawMessage("null")
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}
