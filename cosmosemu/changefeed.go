package cosmosemu

import (
	"bytes"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/durafeed/durafeed/internal/epk"
)

// Change feed (latest-version mode)
//
// A request reads one physical partition (x-ms-documentdb-partitionkeyrangeid,
// or the partition owning x-ms-documentdb-partitionkey), optionally narrowed
// to a logical partition key or to an EPK sub-range (x-ms-start-epk /
// x-ms-end-epk). The continuation is the partition's LSN, served as the ETag
// ("\"<lsn>\"") and sent back as If-None-Match: the next page holds the
// current versions of documents whose latest write has a higher LSN, in LSN
// order. Intermediate versions collapse into the latest; deletes are absent,
// and so are expired items (time to live, ttl.go).
// A page never splits the documents of one LSN (one transactional batch), so
// a continuation can never skip part of a transaction. When nothing is new
// the answer is 304 with the ETag to continue from. After a split the
// children keep their documents' LSNs and continue from the parent's, so
// the parent's ETag is a valid continuation on each child (split.go); a
// request naming the parent answers 410/1002.

func parseLSNETag(v string) (int64, bool) {
	v = strings.TrimSpace(v)
	v = strings.TrimPrefix(v, "W/")
	v = strings.Trim(v, "\"")
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil && n >= 0
}

func lsnETag(n int64) string { return "\"" + strconv.FormatInt(n, 10) + "\"" }

func parseHTTPTime(v string) (time.Time, bool) {
	for _, layout := range []string{http.TimeFormat, time.RFC1123, time.RFC1123Z, time.RFC3339} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

func (s *Server) handleChangeFeed(req *Request) (*Response, *apiError) {
	t := req.tgt
	h := req.HTTP.Header
	size, err := pageSize(h, defaultChangeFeedPageSize)
	if err != nil {
		return nil, err
	}
	startEPK, endEPK := h.Get("x-ms-start-epk"), h.Get("x-ms-end-epk")
	keepKey := ""
	if t.hasPK && !t.prefix {
		keepKey = pkKey(t.pk)
	}
	keep := func(d *document) bool {
		if len(t.parts) == 0 {
			return false
		}
		if keepKey != "" && d.lp.key != keepKey {
			return false
		}
		if t.prefix && !hasPKPrefix(d.lp.pk, t.pk) {
			return false
		}
		if startEPK != "" && epk.Compare(d.lp.epk, startEPK) < 0 {
			return false
		}
		if endEPK != "" && epk.Compare(d.lp.epk, endEPK) >= 0 {
			return false
		}
		return true
	}

	inm := strings.TrimSpace(h.Get("If-None-Match"))
	var after int64
	var since int64 = -1
	fromNow := false
	switch {
	case inm == "*":
		fromNow = true
	case inm != "":
		n, ok := parseLSNETag(inm)
		if !ok {
			return nil, errBadRequest("The continuation (If-None-Match) '%s' is not a valid change feed continuation.", inm)
		}
		after = n
	default:
		if ims := h.Get("If-Modified-Since"); ims != "" {
			tm, ok := parseHTTPTime(ims)
			if !ok {
				return nil, errBadRequest("The If-Modified-Since header '%s' is not a valid HTTP date.", ims)
			}
			since = tm.Unix()
		}
	}

	var out bytes.Buffer
	count := 0
	var etag int64
	view := t.coll.ttlView()
	p, err := lockFeedPartition(t, h)
	if err != nil {
		return nil, err
	}
	if fromNow {
		after = p.lsn
	}
	var i int
	if since >= 0 {
		i = sort.Search(len(p.log), func(k int) bool { return p.log[k].ts >= since })
	} else {
		i = sort.Search(len(p.log), func(k int) bool { return p.log[k].lsn > after })
	}
	etag = p.lsn
	var lastLSN int64 = -1
	for ; i < len(p.log); i++ {
		e := p.log[i]
		if lastLSN >= 0 && e.lsn != lastLSN {
			etag = lastLSN
			break
		}
		if !p.live(e) || !keep(e.doc) || view.hidden(e.doc) {
			continue
		}
		if count > 0 {
			out.WriteByte(',')
		}
		out.Write(e.doc.withLSN())
		count++
		if size > 0 && count >= size && lastLSN < 0 {
			lastLSN = e.lsn
		}
		if out.Len() >= defaultMaxResponseBytes && lastLSN < 0 {
			lastLSN = e.lsn
		}
	}
	session := p.sessionToken(p.lsn)
	p.mu.RUnlock()
	if etag < after && !fromNow && since < 0 {
		etag = after
	}

	hdr := http.Header{}
	hdr.Set("etag", lsnETag(etag))
	hdr.Set("x-ms-session-token", session)
	hdr.Set("lsn", strconv.FormatInt(etag, 10))
	hdr.Set("x-ms-item-count", strconv.Itoa(count))
	if count == 0 {
		return &Response{Status: http.StatusNotModified, Header: hdr, RequestCharge: 1}, nil
	}
	var body bytes.Buffer
	body.WriteString(`{"_rid":"`)
	body.WriteString(t.coll.rid)
	body.WriteString(`","Documents":[`)
	body.Write(out.Bytes())
	body.WriteString(`],"_count":`)
	body.WriteString(strconv.Itoa(count))
	body.WriteByte('}')
	hdr.Set("Content-Type", "application/json")
	return &Response{Status: http.StatusOK, Header: hdr, Body: body.Bytes(), RequestCharge: 1 + float64(count)*0.5}, nil
}

// lockFeedPartition read-locks the one physical partition a change feed
// request reads and returns it. A partition split since routing answers
// 410/1002 when the request named the range (the SDK then refreshes its
// routing map and resumes on the children with the same continuation) and
// is followed to the child owning the key otherwise.
func lockFeedPartition(t *target, h http.Header) (*partition, *apiError) {
	for {
		var p *partition
		switch {
		case len(t.parts) == 1:
			p = t.parts[0]
		case len(t.parts) == 0 && t.byID:
			// The requested key lives in another range: nothing is ever here.
			id := h.Get("x-ms-documentdb-partitionkeyrangeid")
			if p = t.coll.partitionByID(id); p == nil {
				return nil, errRangeGone(id, t.coll)
			}
		default:
			return nil, errBadRequest("A change feed request on a partitioned container must target a single partition key range (x-ms-documentdb-partitionkeyrangeid) or a partition key.")
		}
		p.mu.RLock()
		if !p.gone {
			return p, nil
		}
		p.mu.RUnlock()
		switch {
		case t.byID:
			return nil, errRangeGone(p.id, t.coll)
		case t.hasPK:
			t.rerouteByKey()
		default:
			t.parts = t.coll.partitions()
		}
	}
}

func (s *Server) handlePKRanges(req *Request) (*Response, *apiError) {
	c, err := s.store.container(req.Database, req.Container)
	if err != nil {
		return nil, errOwnerNotFound()
	}
	h := req.HTTP.Header
	incremental := strings.EqualFold(h.Get("A-IM"), "Incremental feed")
	var after int64 = -1
	if inm := h.Get("If-None-Match"); incremental && inm != "" {
		if n, ok := parseLSNETag(inm); ok {
			after = n
		}
	}
	c.mu.RLock()
	version := c.rangesLSN
	parts := c.parts
	dbRID := c.db.rid
	ts := c.ts
	c.mu.RUnlock()
	var items []any
	for _, p := range parts {
		if p.lsn0 <= after {
			continue
		}
		parents := make([]any, len(p.parents))
		for i, id := range p.parents {
			parents[i] = id
		}
		items = append(items, map[string]any{
			"_rid": p.rid, "id": p.id, "_etag": "\"" + p.rid + "\"", "minInclusive": p.rng.Min, "maxExclusive": p.rng.Max,
			"ridPrefix": float64(p.num), "_self": "dbs/" + dbRID + "/colls/" + c.rid + "/pkranges/" + p.rid + "/",
			"throughputFraction": 1 / float64(len(parts)), "status": "online", "parents": parents,
			"ownedArchivalPKRangeIds": []any{}, "_ts": float64(ts), "lsn": float64(p.lsn0),
		})
	}
	if incremental && len(items) == 0 {
		hdr := http.Header{}
		hdr.Set("etag", lsnETag(version))
		return &Response{Status: http.StatusNotModified, Header: hdr, RequestCharge: 1}, nil
	}
	resp := feedResponse(c.rid, "PartitionKeyRanges", items)
	resp.Header.Set("etag", lsnETag(version))
	return resp, nil
}
