package bench

import (
	"context"
	"math"
	"strconv"
	"sync"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/internal/account"
)

// The embedded emulator's own charge of a document query page (before the
// knobs' charge model replaces it): emuQueryBase plus emuQueryPerDoc per
// document the page examined (cosmosemu.Options.DisableQueryIndex, and
// docs/emulator-index). queryScans reads the count of documents examined
// back from it.
const (
	emuQueryBase   = 2.79
	emuQueryPerDoc = 0.05
)

// maxOpenQueries bounds the queries queryScans follows across pages at
// once: a query abandoned before its last page leaves its continuation
// behind, and the table is cleared when it grows past this.
const maxOpenQueries = 4096

// QueryScan is what one kind of document query (an account.Label: "Query"
// for a query within a partition key, "Query CrossPartition" for one across
// the container) examined on the embedded emulator: the documents its
// secondary indexes selected and it then evaluated, and the documents it
// returned. A query is its first page and the pages that continue it.
type QueryScan struct {
	// Queries and Pages count queries (first pages) and pages.
	Queries int64 `json:"queries"`
	Pages   int64 `json:"pages"`
	// Examined and Returned are the documents examined and returned, over
	// every page.
	Examined int64 `json:"examined"`
	Returned int64 `json:"returned"`
	// MaxExamined and MaxReturned are the most one query examined and
	// returned over its pages (a query whose continuation is not followed
	// counts the pages read).
	MaxExamined int64 `json:"max_examined"`
	MaxReturned int64 `json:"max_returned"`
}

// openQuery is a query whose next page has not been asked for yet.
type openQuery struct {
	label              string
	examined, returned int64
}

// queryScans counts, per container, what the embedded emulator's document
// queries examined and returned (QueryScan, by account.Label). It is the
// innermost middleware, so it sees the emulator's own charge, from which
// it reads the documents examined. A nil *queryScans (on an account)
// counts nothing.
type queryScans struct {
	mu   sync.Mutex
	by   map[string]map[string]*QueryScan // container → label → scan
	open map[string]openQuery             // container + continuation → the query it continues
}

func newQueryScans() *queryScans {
	return &queryScans{by: map[string]map[string]*QueryScan{}, open: map[string]openQuery{}}
}

// middleware counts every successful document query page.
func (q *queryScans) middleware() cosmosemu.Middleware {
	return func(next cosmosemu.Handler) cosmosemu.Handler {
		return func(ctx context.Context, req *cosmosemu.Request) *cosmosemu.Response {
			resp := next(ctx, req)
			if resp != nil && resp.Status == 200 && req.Operation == cosmosemu.OpQuery && req.ResourceType == cosmosemu.ResourceDocument {
				q.page(req, resp)
			}
			return resp
		}
	}
}

// page records one query page.
func (q *queryScans) page(req *cosmosemu.Request, resp *cosmosemu.Response) {
	examined := max(int64(math.Round((resp.RequestCharge-emuQueryBase)/emuQueryPerDoc)), 0)
	returned, _ := strconv.ParseInt(resp.Header.Get("x-ms-item-count"), 10, 64)
	label := account.Label(req.HTTP)
	q.mu.Lock()
	defer q.mu.Unlock()
	o, continued := openQuery{label: label}, false
	if cont := req.HTTP.Header.Get("x-ms-continuation"); cont != "" {
		key := req.Container + "\x00" + cont
		if prev, ok := q.open[key]; ok {
			delete(q.open, key)
			o, continued, label = prev, true, prev.label
		}
	}
	byLabel := q.by[req.Container]
	if byLabel == nil {
		byLabel = map[string]*QueryScan{}
		q.by[req.Container] = byLabel
	}
	s := byLabel[label]
	if s == nil {
		s = &QueryScan{}
		byLabel[label] = s
	}
	if !continued {
		s.Queries++
	}
	s.Pages++
	s.Examined += examined
	s.Returned += returned
	o.examined += examined
	o.returned += returned
	s.MaxExamined = max(s.MaxExamined, o.examined)
	s.MaxReturned = max(s.MaxReturned, o.returned)
	if next := resp.Header.Get("x-ms-continuation"); next != "" {
		if len(q.open) >= maxOpenQueries {
			clear(q.open)
		}
		q.open[req.Container+"\x00"+next] = o
	}
}

// reset forgets what container's queries examined so far.
func (q *queryScans) reset(container string) {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.by, container)
}

// snapshot returns what container's queries examined since it was
// created or reset (nil on an account).
func (q *queryScans) snapshot(container string) map[string]QueryScan {
	if q == nil {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make(map[string]QueryScan, len(q.by[container]))
	for label, s := range q.by[container] {
		out[label] = *s
	}
	return out
}

// sumScans adds up the scans of every label: the totals, and the largest
// query of any label.
func sumScans(m map[string]QueryScan) QueryScan {
	var t QueryScan
	for _, s := range m {
		t.Queries += s.Queries
		t.Pages += s.Pages
		t.Examined += s.Examined
		t.Returned += s.Returned
		t.MaxExamined = max(t.MaxExamined, s.MaxExamined)
		t.MaxReturned = max(t.MaxReturned, s.MaxReturned)
	}
	return t
}
