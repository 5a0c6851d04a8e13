package provider

import (
	"context"
	"net/http"
	"sync"

	"github.com/durafeed/durafeed/cosmosemu"
)

// faultInjector is emulator middleware that fails chosen requests of one
// container and counts requests and charges per container.
type faultInjector struct {
	mu     sync.Mutex
	rules  map[string]*faultRule
	counts map[string]*opCounter
}

// faultRule fails the nth (1-based) matching request of a container.
type faultRule struct {
	op     cosmosemu.OperationType
	nth    int
	seen   int
	status int
	fired  bool
}

type opCounter struct {
	requests int
	charge   float64
}

func (f *faultInjector) middleware(next cosmosemu.Handler) cosmosemu.Handler {
	return func(ctx context.Context, req *cosmosemu.Request) *cosmosemu.Response {
		f.mu.Lock()
		r := f.rules[req.Container]
		fail := false
		if r != nil && req.Operation == r.op && req.ResourceType == cosmosemu.ResourceDocument {
			r.seen++
			if r.seen == r.nth {
				fail, r.fired = true, true
			}
		}
		f.mu.Unlock()
		var resp *cosmosemu.Response
		if fail {
			resp = cosmosemu.ErrorResponse(req, r.status, 0, "injected fault")
		} else {
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

var _ = http.StatusServiceUnavailable
