package account

import (
	"maps"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// Usage is what a set of requests cost, as the service reported it.
type Usage struct {
	// Requests counts HTTP attempts (a retried request counts each time).
	Requests int64 `json:"requests"`
	// RequestCharge sums the x-ms-request-charge headers, in RU.
	RequestCharge float64 `json:"request_charge"`
	// Throttled counts 429 answers; RetryAfter sums their
	// x-ms-retry-after-ms.
	Throttled  int64         `json:"throttled,omitempty"`
	RetryAfter time.Duration `json:"retry_after,omitempty"`
}

func (u Usage) add(v Usage) Usage {
	return Usage{Requests: u.Requests + v.Requests, RequestCharge: round3(u.RequestCharge + v.RequestCharge),
		Throttled: u.Throttled + v.Throttled, RetryAfter: u.RetryAfter + v.RetryAfter}
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// Meter counts every attempt of the clients it is installed in (Policy), by
// database, container and operation label, from the answers' own headers:
// the figures are what the account bills, not a model of it. A cap, when
// set, is checked after each answer. A Meter is safe for concurrent use.
type Meter struct {
	mu    sync.Mutex
	cells map[cellKey]*cell

	total     cell
	capMilli  atomic.Int64 // 0: no cap
	exceeded  atomic.Bool
	onExceed  func()
	exceedOne sync.Once
}

type cellKey struct{ database, container, label string }

type cell struct {
	requests, milliRU, throttled, retryAfterMs atomic.Int64
}

func (c *cell) usage() Usage {
	return Usage{Requests: c.requests.Load(), RequestCharge: float64(c.milliRU.Load()) / 1000,
		Throttled: c.throttled.Load(), RetryAfter: time.Duration(c.retryAfterMs.Load()) * time.Millisecond}
}

// NewMeter returns an empty meter without a cap.
func NewMeter() *Meter { return &Meter{cells: map[cellKey]*cell{}} }

// SetCap makes the meter call onExceed once, from the request that takes
// the total charge past ru (a positive number of RU), and report Exceeded
// from then on. Callers cancel their run in onExceed.
func (m *Meter) SetCap(ru float64, onExceed func()) {
	m.mu.Lock()
	m.onExceed = onExceed
	m.mu.Unlock()
	m.capMilli.Store(int64(math.Round(ru * 1000)))
}

// Exceeded reports whether the total charge went past the cap.
func (m *Meter) Exceeded() bool { return m.exceeded.Load() }

// Total is the usage of every request the meter saw.
func (m *Meter) Total() Usage { return m.total.usage() }

// Container returns the usage of the requests addressing one container
// (its documents, its feed, its own resource), by operation label (see
// Label).
func (m *Meter) Container(database, container string) map[string]Usage {
	m.mu.Lock()
	keys := make([]cellKey, 0)
	cells := maps.Clone(m.cells)
	m.mu.Unlock()
	for k := range cells {
		if k.database == database && k.container == container {
			keys = append(keys, k)
		}
	}
	out := make(map[string]Usage, len(keys))
	for _, k := range keys {
		out[k.label] = cells[k].usage()
	}
	return out
}

// Database sums the usage of every request addressing one database or
// anything in it.
func (m *Meter) Database(database string) Usage {
	m.mu.Lock()
	cells := maps.Clone(m.cells)
	m.mu.Unlock()
	var u Usage
	for k, c := range cells {
		if k.database == database {
			u = u.add(c.usage())
		}
	}
	return u
}

func (m *Meter) cell(k cellKey) *cell {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.cells[k]
	if c == nil {
		c = &cell{}
		m.cells[k] = c
	}
	return c
}

// Policy returns the azcore pipeline policy that feeds the meter; install
// it among a client's per-retry policies so that every attempt is seen.
func (m *Meter) Policy() policy.Policy { return meterPolicy{m} }

type meterPolicy struct{ m *Meter }

func (p meterPolicy) Do(req *policy.Request) (*http.Response, error) {
	resp, err := req.Next()
	if resp != nil {
		p.m.record(req.Raw(), resp)
	}
	return resp, err
}

func (m *Meter) record(req *http.Request, resp *http.Response) {
	db, coll := Target(req.URL)
	c := m.cell(cellKey{db, coll, Label(req)})
	charge, _ := strconv.ParseFloat(resp.Header.Get("x-ms-request-charge"), 64)
	milli := int64(math.Round(charge * 1000))
	var throttled, after int64
	if resp.StatusCode == http.StatusTooManyRequests {
		throttled = 1
		if ms, err := strconv.ParseFloat(resp.Header.Get("x-ms-retry-after-ms"), 64); err == nil {
			after = int64(ms)
		}
	}
	for _, x := range []*cell{c, &m.total} {
		x.requests.Add(1)
		x.milliRU.Add(milli)
		x.throttled.Add(throttled)
		x.retryAfterMs.Add(after)
	}
	if limit := m.capMilli.Load(); limit > 0 && m.total.milliRU.Load() > limit {
		m.exceeded.Store(true)
		m.exceedOne.Do(func() {
			m.mu.Lock()
			f := m.onExceed
			m.mu.Unlock()
			if f != nil {
				f()
			}
		})
	}
}

// Target returns the database and container a Cosmos DB request URL
// addresses ("" for either above it).
func Target(u *url.URL) (database, container string) {
	segs := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(segs) >= 2 && segs[0] == "dbs" {
		database, _ = url.PathUnescape(segs[1])
	}
	if len(segs) >= 4 && segs[2] == "colls" {
		container, _ = url.PathUnescape(segs[3])
	}
	return database, container
}

// LeasePartitionMarker identifies requests on the engine's lease partition
// by their partition-key header.
const LeasePartitionMarker = "$leases"

// CrossPartition marks the label of a query without a partition key.
const CrossPartition = " (cross-partition)"

// Label names a Cosmos DB request's operation as the service's gateway
// classifies it (Read, ReadFeed, Create, Upsert, Replace, Delete, Patch,
// Query, QueryPlan, Batch, Bulk, ChangeFeed), followed by the resource type
// when it is not a document ("Read colls"), " [$leases]" for the engine's
// lease partition and CrossPartition for a query without a partition key.
func Label(r *http.Request) string {
	h := r.Header
	segs := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(segs) == 1 && segs[0] == "" {
		segs = nil
	}
	n := len(segs)
	rtype := ""
	switch {
	case n == 0:
		rtype = "account"
	case n%2 == 1:
		rtype = segs[n-1]
	default:
		rtype = segs[n-2]
	}
	feed := n%2 == 1
	var op string
	switch m := r.Method; {
	case m == http.MethodPost && isTrue(h.Get("x-ms-cosmos-is-query-plan-request")):
		op = "QueryPlan"
	case m == http.MethodPost && (strings.HasPrefix(strings.ToLower(h.Get("Content-Type")), "application/query+json") ||
		isTrue(h.Get("x-ms-documentdb-isquery")) || isTrue(h.Get("x-ms-documentdb-query"))):
		op = "Query"
	case m == http.MethodPost && isTrue(h.Get("x-ms-cosmos-is-batch-request")):
		op = "Batch"
		if strings.EqualFold(strings.TrimSpace(h.Get("x-ms-cosmos-batch-atomic")), "false") {
			op = "Bulk"
		}
	case m == http.MethodPost && isTrue(h.Get("x-ms-documentdb-is-upsert")):
		op = "Upsert"
	case m == http.MethodPost:
		op = "Create"
	case m == http.MethodGet && feed && strings.EqualFold(h.Get("A-IM"), "Incremental feed"):
		op = "ChangeFeed"
	case m == http.MethodGet && feed:
		op = "ReadFeed"
	case m == http.MethodGet || m == http.MethodHead:
		op = "Read"
	case m == http.MethodPut:
		op = "Replace"
	case m == http.MethodPatch:
		op = "Patch"
	case m == http.MethodDelete:
		op = "Delete"
	default:
		op = m
	}
	label := op
	if rtype != "docs" {
		label += " " + rtype
	}
	pk := h.Get("x-ms-documentdb-partitionkey")
	if strings.Contains(pk, LeasePartitionMarker) {
		label += " [" + LeasePartitionMarker + "]"
	}
	if op == "Query" && rtype == "docs" && pk == "" {
		label += CrossPartition
	}
	return label
}

func isTrue(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "true") }
