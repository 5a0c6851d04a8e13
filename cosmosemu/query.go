package cosmosemu

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"hash/fnv"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/durafeed/durafeed/cosmosemu/internal/query"
)

// Queries
//
// Documents are served in storage order: by creation sequence (_rid order),
// the order a single physical partition of the service returns them in. A
// query without ORDER BY/TOP/DISTINCT/aggregates/OFFSET/GROUP BY streams:
// its continuation records the creation sequence of the last document
// returned (and how many of that document's JOIN rows were), so a document
// that exists for the whole paging is returned exactly once even under
// concurrent writes (replaces keep the sequence; new documents come later).
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

type queryCont struct {
	V    int    `json:"v"`
	Hash uint64 `json:"h"`
	Seq  uint64 `json:"s,omitempty"`
	Skip int    `json:"k,omitempty"`
	Off  int    `json:"o,omitempty"`
}

func (c queryCont) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCont(s string, hash uint64) (queryCont, *apiError) {
	var c queryCont
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(b, &c) != nil || c.V != 1 || c.Hash != hash {
		return c, errBadRequest("Invalid Continuation Token")
	}
	return c, nil
}

func queryHash(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// snapshot collects the current versions of the documents in scope, in
// creation order. keep filters logical partitions (nil keeps all).
func snapshot(parts []*partition, keep func(lp *logicalPart) bool) []*document {
	var out []*document
	for _, p := range parts {
		p.mu.RLock()
		for _, lp := range p.logical {
			if keep != nil && !keep(lp) {
				continue
			}
			for _, d := range lp.docs {
				out = append(out, d)
			}
		}
		p.mu.RUnlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
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

func (s *Server) runDocQuery(ctx context.Context, req *Request, qr *queryRequest) (*Response, *apiError) {
	t := req.tgt
	h := req.HTTP.Header
	size, err := pageSize(h, defaultQueryPageSize)
	if err != nil {
		return nil, err
	}
	safe := qr.q.Features().CrossPartitionSafe()
	pk, prefix, scoped := t.pk, t.prefix, t.hasPK
	parts := t.parts
	if !scoped && !t.byID && req.Operation == OpQuery {
		if pinned, ok := pinnedPartitionKey(qr.text, qr.params, t.def); ok {
			pk, prefix, scoped = pinned, len(pinned) < len(t.def.Paths), true
			e, eerr := t.def.epkOf(pk)
			if eerr != nil {
				return nil, eerr
			}
			if prefix {
				parts = t.coll.partitionsOverlapping(e, e+"FF")
			} else {
				parts = []*partition{t.coll.partitionFor(e)}
			}
		}
	}
	singlePhysical := len(parts) <= 1
	if !scoped && !t.byID && req.Operation == OpQuery {
		if !isTrue(h.Get("x-ms-documentdb-query-enablecrosspartition")) {
			return nil, errBadRequest(msgCrossPartitionOff)
		}
	}
	if !safe && !singlePhysical {
		return nil, newErrSub(http.StatusBadRequest, subStatusCrossPartitionNotServable, msgCrossPartitionQuery)
	}

	var keep func(lp *logicalPart) bool
	if scoped {
		want := pkKey(pk)
		keep = func(lp *logicalPart) bool {
			if prefix {
				return hasPKPrefix(lp.pk, pk)
			}
			return lp.key == want
		}
	}
	scopeKey := pkKey(pk)
	if !scoped {
		scopeKey = ""
	}
	rangeIDs := make([]string, len(parts))
	for i, p := range parts {
		rangeIDs[i] = p.id
	}
	hash := queryHash(qr.text, scopeKey, strings.Join(rangeIDs, ","))
	var cont queryCont
	if ct := h.Get("x-ms-continuation"); ct != "" {
		if cont, err = decodeCont(ct, hash); err != nil {
			return nil, err
		}
	}
	docs := snapshot(parts, keep)

	var results []json.RawMessage
	var next *queryCont
	bytesOut := 0
	retrieved := 0
	full := func() bool {
		return (size > 0 && len(results) >= size) || bytesOut >= defaultMaxResponseBytes
	}
	if safe {
		start := sort.Search(len(docs), func(i int) bool { return docs[i].seq >= cont.Seq })
		for i := start; i < len(docs); i++ {
			if err := ctx.Err(); err != nil {
				return nil, newErr(http.StatusRequestTimeout, "The request was canceled.")
			}
			d := docs[i]
			if d.seq == cont.Seq && cont.Seq != 0 && cont.Skip == 0 {
				continue
			}
			retrieved++
			rows, qerr := qr.q.Execute([]map[string]any{d.data}, qr.params)
			if qerr != nil {
				return nil, queryError(qerr)
			}
			skip := 0
			if d.seq == cont.Seq {
				skip = cont.Skip
			}
			for j := skip; j < len(rows); j++ {
				raw := encodeResult(rows[j], d)
				results = append(results, raw)
				bytesOut += len(raw)
				if full() {
					if j+1 < len(rows) {
						next = &queryCont{V: 1, Hash: hash, Seq: d.seq, Skip: j + 1}
					} else {
						next = &queryCont{V: 1, Hash: hash, Seq: d.seq}
					}
					break
				}
			}
			if next != nil {
				break
			}
		}
	} else {
		all := make([]map[string]any, len(docs))
		for i, d := range docs {
			all[i] = d.data
		}
		retrieved = len(all)
		rows, qerr := qr.q.Execute(all, qr.params)
		if qerr != nil {
			return nil, queryError(qerr)
		}
		for j := cont.Off; j < len(rows); j++ {
			raw := encodeResult(rows[j], nil)
			results = append(results, raw)
			bytesOut += len(raw)
			if full() && j+1 < len(rows) {
				next = &queryCont{V: 1, Hash: hash, Off: j + 1}
				break
			}
		}
	}

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

	resp := jsonResponse(http.StatusOK, body.Bytes(), 2.79+0.05*float64(retrieved))
	resp.Header.Set("x-ms-item-count", strconv.Itoa(len(results)))
	if next != nil {
		resp.Header.Set("x-ms-continuation", next.encode())
	}
	var tokens []string
	for _, p := range parts {
		p.mu.RLock()
		tokens = append(tokens, p.sessionToken(p.lsn))
		p.mu.RUnlock()
	}
	if len(tokens) > 0 {
		resp.Header.Set("x-ms-session-token", strings.Join(tokens, ","))
	}
	if isTrue(h.Get("x-ms-documentdb-populatequerymetrics")) {
		resp.Header.Set("x-ms-documentdb-query-metrics", "totalExecutionTimeInMs=0.10;queryCompileTimeInMs=0.01;queryLogicalPlanBuildTimeInMs=0.01;queryPhysicalPlanBuildTimeInMs=0.01;queryOptimizationTimeInMs=0.00;VMExecutionTimeInMs=0.05;indexLookupTimeInMs=0.00;documentLoadTimeInMs=0.01;systemFunctionExecuteTimeInMs=0.00;userFunctionExecuteTimeInMs=0.00;retrievedDocumentCount="+strconv.Itoa(retrieved)+";retrievedDocumentSize=0;outputDocumentCount="+strconv.Itoa(len(results))+";outputDocumentSize="+strconv.Itoa(bytesOut)+";writeOutputTimeInMs=0.00;indexUtilizationRatio=1.00")
	}
	if isTrue(h.Get("x-ms-cosmos-populateindexmetrics")) {
		im, _ := json.Marshal(map[string]any{"UtilizedSingleIndexes": []any{}, "PotentialSingleIndexes": []any{}, "UtilizedCompositeIndexes": []any{}, "PotentialCompositeIndexes": []any{}})
		resp.Header.Set("x-ms-cosmos-index-utilization", base64.StdEncoding.EncodeToString(im))
	}
	return resp, nil
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
