package knobs

import (
	"context"
	"math"
	"sync"
	"sync/atomic"

	"github.com/durafeed/durafeed/cosmosemu"
)

// Stat is what Counters accumulated for one key.
type Stat struct {
	// Requests counts answered requests, including throttled, faulted and
	// dropped ones.
	Requests int64 `json:"requests"`
	// RequestCharge is the sum of the charges reported to clients, in RU.
	RequestCharge float64 `json:"request_charge"`
	// Throttled counts 429 answers of the Budget knob.
	Throttled int64 `json:"throttled"`
	// Faulted counts answers injected by fault rules (drops included).
	Faulted int64 `json:"faulted"`
	// Dropped counts requests whose connection a fault rule dropped.
	Dropped int64 `json:"dropped"`
	// Errors counts answers with a status of 400 or more (throttles and
	// injected errors included, drops excluded).
	Errors int64 `json:"errors"`
}

// Snapshot is a point-in-time copy of the counters. Each value is read
// atomically; the snapshot as a whole is not (requests finishing while it is
// taken may be partly included).
type Snapshot struct {
	// Total sums every request.
	Total Stat `json:"total"`
	// ByOperation is keyed by operation type.
	ByOperation map[cosmosemu.OperationType]Stat `json:"by_operation"`
	// ByResource is keyed by resource type ("" is the database account).
	ByResource map[cosmosemu.ResourceType]Stat `json:"by_resource"`
	// ByContainer is keyed "database/container" (requests addressing a
	// container or its documents).
	ByContainer map[string]Stat `json:"by_container"`
}

// cell holds one key's counters, padded to its own cache lines so hot keys
// do not share lines.
type cell struct {
	requests  atomic.Int64
	charge    atomic.Int64 // milli-RU
	throttled atomic.Int64
	faulted   atomic.Int64
	dropped   atomic.Int64
	errors    atomic.Int64
	_         [80]byte
}

func (c *cell) add(charge int64, o outcome, isErr bool) {
	c.requests.Add(1)
	if charge != 0 {
		c.charge.Add(charge)
	}
	switch o {
	case outcomeThrottled:
		c.throttled.Add(1)
	case outcomeFaulted:
		c.faulted.Add(1)
	case outcomeDropped:
		c.faulted.Add(1)
		c.dropped.Add(1)
	}
	if isErr {
		c.errors.Add(1)
	}
}

func (c *cell) stat() Stat {
	return Stat{
		Requests:      c.requests.Load(),
		RequestCharge: float64(c.charge.Load()) / 1000,
		Throttled:     c.throttled.Load(),
		Faulted:       c.faulted.Load(),
		Dropped:       c.dropped.Load(),
		Errors:        c.errors.Load(),
	}
}

// table maps keys to cells. Lookups read an immutable map without locking;
// a new key copies the map under a mutex (rare: keys are operation types,
// resource types and containers).
type table[K comparable] struct {
	mu sync.Mutex
	m  atomic.Pointer[map[K]*cell]
}

func (t *table[K]) get(k K) *cell {
	if p := t.m.Load(); p != nil {
		if c, ok := (*p)[k]; ok {
			return c
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var old map[K]*cell
	if p := t.m.Load(); p != nil {
		old = *p
		if c, ok := old[k]; ok {
			return c
		}
	}
	next := make(map[K]*cell, len(old)+1)
	for kk, v := range old {
		next[kk] = v
	}
	c := &cell{}
	next[k] = c
	t.m.Store(&next)
	return c
}

func (t *table[K]) reset() {
	t.mu.Lock()
	t.m.Store(nil)
	t.mu.Unlock()
}

func snapshotTable[K comparable, O comparable](t *table[K], key func(K) O) map[O]Stat {
	out := map[O]Stat{}
	if p := t.m.Load(); p != nil {
		for k, c := range *p {
			out[key(k)] = c.stat()
		}
	}
	return out
}

// Counters counts requests, charges, throttles and faults per operation
// type, resource type and container. Recording costs a few atomic adds and
// lock-free map reads per request. It is safe for concurrent use.
type Counters struct {
	total       cell
	byOperation table[cosmosemu.OperationType]
	byResource  table[cosmosemu.ResourceType]
	byContainer table[containerKey]
}

// NewCounters returns zeroed counters.
func NewCounters() *Counters { return &Counters{} }

// Snapshot returns the current values.
func (c *Counters) Snapshot() Snapshot {
	return Snapshot{
		Total:       c.total.stat(),
		ByOperation: snapshotTable(&c.byOperation, func(k cosmosemu.OperationType) cosmosemu.OperationType { return k }),
		ByResource:  snapshotTable(&c.byResource, func(k cosmosemu.ResourceType) cosmosemu.ResourceType { return k }),
		ByContainer: snapshotTable(&c.byContainer, containerKey.String),
	}
}

// Reset zeroes every counter. Requests in flight while resetting may be
// counted partly before and partly after.
func (c *Counters) Reset() {
	c.byOperation.reset()
	c.byResource.reset()
	c.byContainer.reset()
	c.total.requests.Store(0)
	c.total.charge.Store(0)
	c.total.throttled.Store(0)
	c.total.faulted.Store(0)
	c.total.dropped.Store(0)
	c.total.errors.Store(0)
}

func (c *Counters) record(req *cosmosemu.Request, o outcome, resp *cosmosemu.Response) {
	var charge int64
	isErr := false
	if resp != nil {
		charge = int64(math.Round(reportedCharge(resp) * 1000))
		isErr = resp.Status >= 400
	}
	c.total.add(charge, o, isErr)
	c.byOperation.get(req.Operation).add(charge, o, isErr)
	c.byResource.get(req.ResourceType).add(charge, o, isErr)
	if req.Container != "" {
		c.byContainer.get(containerKey{req.Database, req.Container}).add(charge, o, isErr)
	}
}

// Middleware returns the middleware that counts requests. Place it
// outermost so it sees what inner knobs did.
func (c *Counters) Middleware() cosmosemu.Middleware {
	return func(next cosmosemu.Handler) cosmosemu.Handler {
		return func(ctx context.Context, req *cosmosemu.Request) (resp *cosmosemu.Response) {
			nc := &noteCtx{Context: ctx}
			// Deferred so a dropped connection (which ends the goroutine)
			// is still counted.
			defer func() { c.record(req, nc.outcome, resp) }()
			return next(nc, req)
		}
	}
}
