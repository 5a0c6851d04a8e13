package knobs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durafeed/durafeed/cosmosemu"
)

// BudgetConfig configures the provisioned-throughput budget. The zero value
// is unlimited.
type BudgetConfig struct {
	// DefaultRUPerSecond is the throughput of every container without an
	// entry in Containers; zero or less means unlimited.
	DefaultRUPerSecond float64 `json:"default_ru_per_second"`
	// Containers overrides the default per container, keyed
	// "database/container"; zero or less means unlimited for that
	// container.
	Containers map[string]float64 `json:"containers,omitempty"`
}

func (c BudgetConfig) validate() error {
	for k, v := range c.Containers {
		if _, _, ok := splitContainer(k); !ok {
			return fmt.Errorf("knobs: budget container key %q is not \"database/container\"", k)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("knobs: budget for %q is not finite", k)
		}
	}
	if math.IsNaN(c.DefaultRUPerSecond) || math.IsInf(c.DefaultRUPerSecond, 0) {
		return errors.New("knobs: default budget is not finite")
	}
	return nil
}

func splitContainer(k string) (string, string, bool) {
	db, coll, ok := strings.Cut(k, "/")
	return db, coll, ok && db != "" && coll != "" && !strings.Contains(coll, "/")
}

type containerKey struct{ db, coll string }

// String renders the key as "database/container".
func (k containerKey) String() string { return k.db + "/" + k.coll }

type budgetRates struct {
	def  float64
	over map[containerKey]float64
	raw  BudgetConfig
}

func (r *budgetRates) rate(k containerKey) float64 {
	if v, ok := r.over[k]; ok {
		return v
	}
	return r.def
}

// bucket is one container's token bucket: it holds at most one second of
// throughput and refills continuously.
type bucket struct {
	mu     sync.Mutex
	tokens float64
	rate   float64
	last   time.Duration // since Budget.epoch
}

func (b *bucket) refill(now time.Duration, rate float64) {
	if rate != b.rate {
		b.rate = rate
		b.tokens = min(b.tokens, rate)
	}
	if now > b.last {
		b.tokens = min(rate, b.tokens+rate*(now-b.last).Seconds())
		b.last = now
	}
}

// Budget imitates provisioned throughput: each container has a token bucket
// of N RU/s (capacity one second of throughput, refilled continuously).
// Document requests are admitted while the container's balance is positive
// and debited with their charge afterwards (the charge is only known once
// the request ran, as on the service), so a balance can go negative; while
// it is not positive requests answer 429 with sub-status 3200 and
// x-ms-retry-after-ms set to the time the deficit takes to refill, without
// running the handler and with a charge of zero. Metadata requests are not
// budgeted. It is safe for concurrent use.
type Budget struct {
	epoch     time.Time
	mu        sync.Mutex // serializes writers of rates and buckets
	rates     atomic.Pointer[budgetRates]
	buckets   atomic.Pointer[map[containerKey]*bucket]
	throttled atomic.Int64
}

// NewBudget returns a Budget configured with cfg.
func NewBudget(cfg BudgetConfig) (*Budget, error) {
	b := &Budget{epoch: time.Now()}
	if err := b.Set(cfg); err != nil {
		return nil, err
	}
	return b, nil
}

// Set replaces the configuration. Existing balances are kept (capped at the
// new capacity).
func (b *Budget) Set(cfg BudgetConfig) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	r := &budgetRates{def: cfg.DefaultRUPerSecond, over: map[containerKey]float64{}, raw: BudgetConfig{DefaultRUPerSecond: cfg.DefaultRUPerSecond}}
	if len(cfg.Containers) > 0 {
		r.raw.Containers = make(map[string]float64, len(cfg.Containers))
	}
	for k, v := range cfg.Containers {
		db, coll, _ := splitContainer(k)
		r.over[containerKey{db, coll}] = v
		r.raw.Containers[k] = v
	}
	b.mu.Lock()
	b.rates.Store(r)
	b.mu.Unlock()
	return nil
}

// SetDefault sets the throughput of containers without their own setting
// (zero or less: unlimited).
func (b *Budget) SetDefault(ruPerSecond float64) error {
	cfg := b.Config()
	cfg.DefaultRUPerSecond = ruPerSecond
	return b.Set(cfg)
}

// SetContainer sets one container's throughput (zero or less: unlimited).
func (b *Budget) SetContainer(database, container string, ruPerSecond float64) error {
	cfg := b.Config()
	if cfg.Containers == nil {
		cfg.Containers = map[string]float64{}
	}
	cfg.Containers[database+"/"+container] = ruPerSecond
	return b.Set(cfg)
}

// Config returns a copy of the current configuration.
func (b *Budget) Config() BudgetConfig {
	raw := b.rates.Load().raw
	out := BudgetConfig{DefaultRUPerSecond: raw.DefaultRUPerSecond}
	if raw.Containers != nil {
		out.Containers = make(map[string]float64, len(raw.Containers))
		for k, v := range raw.Containers {
			out.Containers[k] = v
		}
	}
	return out
}

// Throttled returns how many requests the budget answered 429.
func (b *Budget) Throttled() int64 { return b.throttled.Load() }

// Balance returns a container's current balance in RU (negative while in
// debt) and whether the container is budgeted.
func (b *Budget) Balance(database, container string) (float64, bool) {
	k := containerKey{database, container}
	rate := b.rates.Load().rate(k)
	if rate <= 0 {
		return 0, false
	}
	bk := b.bucket(k, rate)
	bk.mu.Lock()
	defer bk.mu.Unlock()
	bk.refill(time.Since(b.epoch), rate)
	return bk.tokens, true
}

// Balances returns the balance of every budgeted container that has seen a
// request, keyed "database/container".
func (b *Budget) Balances() map[string]float64 {
	out := map[string]float64{}
	rates := b.rates.Load()
	if p := b.buckets.Load(); p != nil {
		for k := range *p {
			if rates.rate(k) > 0 {
				v, _ := b.Balance(k.db, k.coll)
				out[k.String()] = v
			}
		}
	}
	return out
}

func (b *Budget) bucket(k containerKey, rate float64) *bucket {
	if p := b.buckets.Load(); p != nil {
		if bk, ok := (*p)[k]; ok {
			return bk
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var old map[containerKey]*bucket
	if p := b.buckets.Load(); p != nil {
		old = *p
		if bk, ok := old[k]; ok {
			return bk
		}
	}
	next := make(map[containerKey]*bucket, len(old)+1)
	for kk, v := range old {
		next[kk] = v
	}
	bk := &bucket{tokens: rate, rate: rate, last: time.Since(b.epoch)}
	next[k] = bk
	b.buckets.Store(&next)
	return bk
}

// Middleware returns the middleware that enforces the budget.
func (b *Budget) Middleware() cosmosemu.Middleware {
	return func(next cosmosemu.Handler) cosmosemu.Handler {
		return func(ctx context.Context, req *cosmosemu.Request) *cosmosemu.Response {
			if req.ResourceType != cosmosemu.ResourceDocument || req.Container == "" {
				return next(ctx, req)
			}
			k := containerKey{req.Database, req.Container}
			rate := b.rates.Load().rate(k)
			if rate <= 0 {
				return next(ctx, req)
			}
			bk := b.bucket(k, rate)
			bk.mu.Lock()
			bk.refill(time.Since(b.epoch), rate)
			tokens := bk.tokens
			bk.mu.Unlock()
			if tokens <= 0 {
				b.throttled.Add(1)
				noteOutcome(ctx, outcomeThrottled)
				// The first whole millisecond after which the balance is
				// positive again.
				waitMS := int64(math.Floor(-tokens/rate*1000)) + 1
				resp := cosmosemu.ErrorResponse(req, http.StatusTooManyRequests, SubStatusRUBudgetExceeded,
					"Request rate is large. More Request Units may be needed, so no changes were made. Please retry this request later. Learn more: http://aka.ms/cosmosdb-error-429")
				resp.Header.Set("x-ms-retry-after-ms", strconv.FormatInt(waitMS, 10))
				return resp
			}
			resp := next(ctx, req)
			if resp != nil {
				charge := reportedCharge(resp)
				// Refill is lazy (from bk.last), so debiting needs no clock.
				bk.mu.Lock()
				bk.tokens -= charge
				bk.mu.Unlock()
			}
			return resp
		}
	}
}

// reportedCharge is the charge the server reports for resp: it answers 1 RU
// for a successful response that carries none.
func reportedCharge(resp *cosmosemu.Response) float64 {
	if resp.RequestCharge == 0 && resp.Status < 300 {
		return 1
	}
	return resp.RequestCharge
}
