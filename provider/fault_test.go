package provider

import (
	"context"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/durafeed/durafeed/cosmosemu"
)

// faultInjector is emulator middleware that fails chosen requests of one
// container and counts requests and charges per container.
type faultInjector struct {
	mu     sync.Mutex
	rules  map[string]*faultRule
	counts map[string]*opCounter
	// keyed records the operations and statuses of the document requests
	// addressed to one partition key of one container (container + "/" +
	// the partition key header), for the requests-per-operation tests.
	keyed map[string]*[]keyedOp
	// slowFeed delays the next n document-range change-feed reads of a
	// container (not the lease partition's) by d each.
	slowFeed map[string]*slowRule
	// slowQueries delays every query addressed to one partition key of
	// one container (the same key as keyed) and tracks how many run at
	// once.
	slowQueries map[string]*queryWatch
}

// queryWatch is a slowQueries rule: the delay, the queries in flight and
// the most seen at once.
type queryWatch struct {
	d             time.Duration
	inFlight, max int
}

type slowRule struct {
	n int
	d time.Duration
}

// keyedOp is one request keyed records.
type keyedOp struct {
	op     cosmosemu.OperationType
	status int
	charge float64
}

// faultRule fails the nth (1-based) matching request of a container;
// with afterCommit the request is served first and its answer replaced by
// the failure (a lost answer: the write committed, the caller cannot
// know).
type faultRule struct {
	op          cosmosemu.OperationType
	nth         int
	seen        int
	status      int
	fired       bool
	afterCommit bool
	// count, when above 1, fails that many requests from the nth on.
	count int
	// then, when set, is armed once this rule has fired (a second fault
	// of the same story: a lost answer, then a failed read-back).
	then *faultRule
	// between, when set, runs after an afterCommit request was served and
	// before its answer (another process acting in that window).
	between func()
	// before, when set, runs before the request is served, which does
	// not fail (holdNth).
	before func()
}

type opCounter struct {
	requests int
	charge   float64
}

func (f *faultInjector) middleware(next cosmosemu.Handler) cosmosemu.Handler {
	return func(ctx context.Context, req *cosmosemu.Request) *cosmosemu.Response {
		f.mu.Lock()
		var delay time.Duration
		if sr := f.slowFeed[req.Container]; sr != nil && sr.n > 0 && req.Operation == cosmosemu.OpChangeFeed &&
			req.HTTP.Header.Get("x-ms-documentdb-partitionkey") == "" {
			sr.n--
			delay = sr.d
		}
		qw := f.slowQueries[req.Container+"/"+req.HTTP.Header.Get("x-ms-documentdb-partitionkey")]
		if qw != nil && req.Operation == cosmosemu.OpQuery {
			qw.inFlight++
			qw.max = max(qw.max, qw.inFlight)
			delay = max(delay, qw.d)
			defer func() {
				f.mu.Lock()
				qw.inFlight--
				f.mu.Unlock()
			}()
		} else {
			qw = nil
		}
		r := f.rules[req.Container]
		fail := false
		if r != nil && req.Operation == r.op && req.ResourceType == cosmosemu.ResourceDocument {
			r.seen++
			if r.seen >= r.nth && r.seen < r.nth+max(r.count, 1) {
				fail, r.fired = true, true
				if r.seen == r.nth+max(r.count, 1)-1 && r.then != nil {
					f.rules[req.Container] = r.then // r stays the rule this request meets
				}
			}
		}
		f.mu.Unlock()
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
		var resp *cosmosemu.Response
		switch {
		case fail && r.before != nil:
			r.before()
			resp = next(ctx, req)
		case fail && r.afterCommit && r.status == dropAnswer:
			next(ctx, req)
			if r.between != nil {
				r.between()
			}
			runtime.Goexit() // no answer: net/http resets the stream (the emulator writes nothing)
		case fail && r.afterCommit:
			next(ctx, req)
			if r.between != nil {
				r.between()
			}
			resp = cosmosemu.ErrorResponse(req, r.status, 0, "injected fault after commit")
		case fail:
			resp = cosmosemu.ErrorResponse(req, r.status, 0, "injected fault")
		default:
			resp = next(ctx, req)
		}
		if req.ResourceType == cosmosemu.ResourceDocument {
			f.mu.Lock()
			if f.counts != nil {
				c := f.counts[req.Container]
				if c == nil {
					c = &opCounter{}
					f.counts[req.Container] = c
				}
				c.requests++
				c.charge += resp.RequestCharge
			}
			if log := f.keyed[req.Container+"/"+req.HTTP.Header.Get("x-ms-documentdb-partitionkey")]; log != nil {
				*log = append(*log, keyedOp{op: req.Operation, status: resp.Status, charge: resp.RequestCharge})
			}
			f.mu.Unlock()
		}
		return resp
	}
}

// failNth arms a rule on container: its nth request of op fails with status.
func (f *faultInjector) failNth(container string, op cosmosemu.OperationType, nth, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rules == nil {
		f.rules = map[string]*faultRule{}
	}
	f.rules[container] = &faultRule{op: op, nth: nth, status: status}
}

// dropAnswer, as loseNthAnswer's status, drops the connection instead of
// answering (the client sees a transport error).
const dropAnswer = -1

// loseNthAnswer arms a rule on container: its nth request of op is served,
// then answered with status instead of its result (dropAnswer: not
// answered at all).
func (f *faultInjector) loseNthAnswer(container string, op cosmosemu.OperationType, nth, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rules == nil {
		f.rules = map[string]*faultRule{}
	}
	f.rules[container] = &faultRule{op: op, nth: nth, status: status, afterCommit: true}
}

// loseNthAnswerAfter is loseNthAnswer that runs between after the
// request was served and before the lost answer.
func (f *faultInjector) loseNthAnswerAfter(container string, op cosmosemu.OperationType, nth, status int, between func()) {
	f.loseNthAnswer(container, op, nth, status)
	f.mu.Lock()
	f.rules[container].between = between
	f.mu.Unlock()
}

// holdNth arms a rule on container: its nth request of op waits, before
// it is served, until release is called; held is closed once it waits.
func (f *faultInjector) holdNth(container string, op cosmosemu.OperationType, nth int) (held <-chan struct{}, release func()) {
	h, r := make(chan struct{}), make(chan struct{})
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rules == nil {
		f.rules = map[string]*faultRule{}
	}
	f.rules[container] = &faultRule{op: op, nth: nth, before: func() {
		close(h)
		<-r
	}}
	var once sync.Once
	return h, func() { once.Do(func() { close(r) }) }
}

// thenFailNext chains a rule to the one armed on container: once that
// one has fired, the next count requests of op fail with status (every
// retry of the store's included).
func (f *faultInjector) thenFailNext(container string, op cosmosemu.OperationType, count, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.rules[container]
	for r.then != nil {
		r = r.then
	}
	r.then = &faultRule{op: op, nth: 1, count: count, status: status}
}

// disarm removes the container's rule and reports whether it fired.
func (f *faultInjector) disarm(container string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.rules[container]
	delete(f.rules, container)
	return r != nil && r.fired
}

// counter returns (and starts) the request counter of a container.
func (f *faultInjector) counter(container string) func() (int, float64) {
	f.mu.Lock()
	if f.counts == nil {
		f.counts = map[string]*opCounter{}
	}
	f.counts[container] = &opCounter{}
	f.mu.Unlock()
	return func() (int, float64) {
		f.mu.Lock()
		defer f.mu.Unlock()
		c := f.counts[container]
		return c.requests, c.charge
	}
}

// slowFeedReads delays the next n document-range change-feed reads of
// container by d each.
func (f *faultInjector) slowFeedReads(container string, n int, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.slowFeed == nil {
		f.slowFeed = map[string]*slowRule{}
	}
	f.slowFeed[container] = &slowRule{n: n, d: d}
}

// record starts recording the document requests addressed to instance's
// partition in container; the returned function takes what was recorded
// since the previous call.
func (f *faultInjector) record(container, instance string) func() []keyedOp {
	key := container + "/" + `["` + instance + `"]`
	f.mu.Lock()
	if f.keyed == nil {
		f.keyed = map[string]*[]keyedOp{}
	}
	log := &[]keyedOp{}
	f.keyed[key] = log
	f.mu.Unlock()
	return func() []keyedOp {
		f.mu.Lock()
		defer f.mu.Unlock()
		out := *log
		*log = nil
		return out
	}
}

// slowQueriesOf delays by d every query addressed to instance's partition
// in container; the returned function reports the most that ran at once.
func (f *faultInjector) slowQueriesOf(container, instance string, d time.Duration) func() int {
	key := container + "/" + `["` + instance + `"]`
	w := &queryWatch{d: d}
	f.mu.Lock()
	if f.slowQueries == nil {
		f.slowQueries = map[string]*queryWatch{}
	}
	f.slowQueries[key] = w
	f.mu.Unlock()
	return func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return w.max
	}
}

var _ = http.StatusServiceUnavailable
