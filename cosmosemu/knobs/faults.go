package knobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durafeed/durafeed/cosmosemu"
)

// FaultKind is what a fault rule answers.
type FaultKind string

// Fault kinds.
const (
	// FaultThrottle answers 429 Too Many Requests with x-ms-retry-after-ms
	// and sub-status 3200 (RU budget exceeded) unless another is given.
	FaultThrottle FaultKind = "throttle"
	// FaultUnavailable answers 503 Service Unavailable.
	FaultUnavailable FaultKind = "unavailable"
	// FaultTimeout answers 408 Request Timeout.
	FaultTimeout FaultKind = "timeout"
	// FaultGone answers 410 Gone with sub-status 1002 (partition key range
	// gone) unless another is given, e.g. 1000 (name cache stale) or 1007
	// (completing split).
	FaultGone FaultKind = "gone"
	// FaultDrop closes the connection (HTTP/1.1) or resets the stream
	// (HTTP/2) without an answer; the client sees a transport error.
	FaultDrop FaultKind = "drop"
)

// Sub-status codes the service sends with the fault kinds above.
const (
	// SubStatusRUBudgetExceeded comes with 429: the provisioned RU/s are
	// exhausted.
	SubStatusRUBudgetExceeded = 3200
	// SubStatusNameCacheStale comes with 410: the client's name cache
	// (container identity) is stale.
	SubStatusNameCacheStale = 1000
	// SubStatusPartitionKeyRangeGone comes with 410: the partition key range
	// split or merged; refresh the routing map.
	SubStatusPartitionKeyRangeGone = 1002
	// SubStatusCompletingSplit comes with 410: a split is completing.
	SubStatusCompletingSplit = 1007
)

// DefaultRetryAfter is the x-ms-retry-after-ms of a FaultThrottle rule that
// gives none.
const DefaultRetryAfter = 10 * time.Millisecond

// FaultRule injects one kind of fault into matching requests. A request
// matches when every non-empty matcher matches. A matching request fires the
// rule with probability Probability; when Count is positive the rule fires
// at most Count times in total ("the next N matching requests"). In JSON,
// RetryAfter is a Go duration string ("50ms").
type FaultRule struct {
	// ID names the rule; Faults.Add assigns "f1", "f2", ... when empty.
	ID string `json:"id,omitempty"`
	// Kind is what the rule answers.
	Kind FaultKind `json:"kind"`
	// SubStatus is sent as x-ms-substatus; zero means the kind's default
	// (3200 for FaultThrottle, 1002 for FaultGone, none otherwise).
	SubStatus int `json:"sub_status,omitempty"`
	// RetryAfter is sent as x-ms-retry-after-ms with FaultThrottle
	// (default DefaultRetryAfter).
	RetryAfter time.Duration `json:"-"`
	// Message replaces the default error message.
	Message string `json:"message,omitempty"`

	// Operations restricts the rule to these operation types (any when
	// empty).
	Operations []cosmosemu.OperationType `json:"operations,omitempty"`
	// ResourceTypes restricts the rule to these resource types (any when
	// empty; cosmosemu.ResourceAccount, "", is the database account).
	ResourceTypes []cosmosemu.ResourceType `json:"resource_types,omitempty"`
	// Database restricts the rule to one database id.
	Database string `json:"database,omitempty"`
	// Container restricts the rule to one container id.
	Container string `json:"container,omitempty"`
	// PartitionKeyRangeID restricts the rule to requests touching this
	// physical partition key range.
	PartitionKeyRangeID string `json:"partition_key_range_id,omitempty"`

	// Probability is the chance that a matching request fires the rule, in
	// (0, 1]; zero means 1 (every matching request).
	Probability float64 `json:"probability,omitempty"`
	// Count, when positive, limits the rule to its next Count firings.
	Count int64 `json:"count,omitempty"`
	// AfterHandler runs the request first and then replaces its answer by
	// the fault: the operation took effect but the client does not learn it
	// (an ambiguous outcome, e.g. a write whose answer was lost).
	AfterHandler bool `json:"after_handler,omitempty"`
	// Seed seeds the rule's probability draws; zero derives a seed from the
	// Faults seed and the rule id. Equal seeds give equal firing sequences.
	Seed uint64 `json:"seed,omitempty"`
}

type faultRuleJSON struct {
	faultRuleAlias
	RetryAfter string `json:"retry_after,omitempty"`
}

type faultRuleAlias FaultRule

// MarshalJSON encodes RetryAfter as a Go duration string.
func (r FaultRule) MarshalJSON() ([]byte, error) {
	return json.Marshal(faultRuleJSON{faultRuleAlias: faultRuleAlias(r), RetryAfter: durString(r.RetryAfter)})
}

// UnmarshalJSON decodes RetryAfter written as a Go duration string.
func (r *FaultRule) UnmarshalJSON(b []byte) error {
	var j faultRuleJSON
	if err := strictUnmarshal(b, &j); err != nil {
		return err
	}
	d, err := parseDur("retry_after", j.RetryAfter)
	if err != nil {
		return err
	}
	*r = FaultRule(j.faultRuleAlias)
	r.RetryAfter = d
	return nil
}

func (r FaultRule) validate() error {
	switch r.Kind {
	case FaultThrottle, FaultUnavailable, FaultTimeout, FaultGone, FaultDrop:
	case "":
		return errors.New("knobs: fault rule needs a kind")
	default:
		return fmt.Errorf("knobs: unknown fault kind %q", r.Kind)
	}
	if r.Probability < 0 || r.Probability > 1 {
		return fmt.Errorf("knobs: fault probability %v outside [0, 1]", r.Probability)
	}
	if r.Count < 0 {
		return fmt.Errorf("knobs: fault count %d is negative", r.Count)
	}
	if r.RetryAfter < 0 || r.SubStatus < 0 {
		return errors.New("knobs: fault retry-after and sub-status must not be negative")
	}
	return nil
}

func (r FaultRule) httpStatus() int {
	switch r.Kind {
	case FaultThrottle:
		return http.StatusTooManyRequests
	case FaultUnavailable:
		return http.StatusServiceUnavailable
	case FaultTimeout:
		return http.StatusRequestTimeout
	case FaultGone:
		return http.StatusGone
	}
	return 0
}

func (r FaultRule) subStatus() int {
	if r.SubStatus != 0 {
		return r.SubStatus
	}
	switch r.Kind {
	case FaultThrottle:
		return SubStatusRUBudgetExceeded
	case FaultGone:
		return SubStatusPartitionKeyRangeGone
	}
	return 0
}

func (r FaultRule) message() string {
	if r.Message != "" {
		return r.Message
	}
	var m string
	switch r.Kind {
	case FaultThrottle:
		m = "Request rate is large. More Request Units may be needed, so no changes were made. Please retry this request later. Learn more: http://aka.ms/cosmosdb-error-429"
	case FaultUnavailable:
		m = "Service is currently unavailable. Learn more: https://aka.ms/cosmosdb-tsg-service-unavailable"
	case FaultTimeout:
		m = "Request timed out. Learn more: https://aka.ms/cosmosdb-tsg-request-timeout"
	case FaultGone:
		m = "The requested partition key range is gone. Refresh the routing map and retry."
	}
	return m + " (injected by cosmosemu/knobs rule " + r.ID + ")"
}

// RuleStatus is a fault rule with its counters.
type RuleStatus struct {
	// Rule is the rule as added (with its assigned ID).
	Rule FaultRule `json:"rule"`
	// Matched counts requests that matched the rule's matchers.
	Matched int64 `json:"matched"`
	// Fired counts requests the rule answered.
	Fired int64 `json:"fired"`
	// Remaining is how many more times a Count rule may fire (-1 when the
	// rule has no Count).
	Remaining int64 `json:"remaining"`
}

type rule struct {
	FaultRule
	rng       *stream
	matched   atomic.Int64
	fired     atomic.Int64
	remaining atomic.Int64
}

func (r *rule) matches(req *cosmosemu.Request) bool {
	if len(r.Operations) > 0 && !slices.Contains(r.Operations, req.Operation) {
		return false
	}
	if len(r.ResourceTypes) > 0 && !slices.Contains(r.ResourceTypes, req.ResourceType) {
		return false
	}
	if r.Database != "" && r.Database != req.Database {
		return false
	}
	if r.Container != "" && r.Container != req.Container {
		return false
	}
	if r.PartitionKeyRangeID != "" && !slices.Contains(req.PartitionKeyRangeIDs, r.PartitionKeyRangeID) {
		return false
	}
	return true
}

// tryFire decides whether a matching request fires the rule.
func (r *rule) tryFire() bool {
	r.matched.Add(1)
	if r.Probability > 0 && r.Probability < 1 && r.rng.uniform() >= r.Probability {
		return false
	}
	if r.Count > 0 {
		for {
			left := r.remaining.Load()
			if left <= 0 {
				return false
			}
			if r.remaining.CompareAndSwap(left, left-1) {
				break
			}
		}
	}
	r.fired.Add(1)
	return true
}

func (r *rule) respond(req *cosmosemu.Request) *cosmosemu.Response {
	resp := cosmosemu.ErrorResponse(req, r.httpStatus(), r.subStatus(), r.message())
	if r.Kind == FaultThrottle {
		ra := r.RetryAfter
		if ra == 0 {
			ra = DefaultRetryAfter
		}
		resp.Header.Set("x-ms-retry-after-ms", strconv.FormatInt(ceilMillis(ra), 10))
	}
	return resp
}

// Faults holds fault rules and injects them. Rules are tried in the order
// they were added; the first that fires answers the request. Rules can be
// added and removed from any goroutine while requests are served.
type Faults struct {
	seed   uint64
	mu     sync.Mutex // serializes writers of rules
	rules  atomic.Pointer[[]*rule]
	nextID atomic.Uint64
	fired  atomic.Int64
}

// NewFaults returns an empty rule set whose probability draws derive from
// seed.
func NewFaults(seed uint64) *Faults { return &Faults{seed: seed} }

// Add validates and installs a rule, returning its ID.
func (f *Faults) Add(fr FaultRule) (string, error) {
	if err := fr.validate(); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.load()
	if fr.ID == "" {
		for {
			fr.ID = "f" + strconv.FormatUint(f.nextID.Add(1), 10)
			if !hasRule(old, fr.ID) {
				break
			}
		}
	} else if hasRule(old, fr.ID) {
		return "", fmt.Errorf("knobs: fault rule %q already exists", fr.ID)
	}
	fr.Operations = slices.Clone(fr.Operations)
	fr.ResourceTypes = slices.Clone(fr.ResourceTypes)
	seed := fr.Seed
	if seed == 0 {
		h := fnv.New64a()
		_, _ = h.Write([]byte(fr.ID))
		seed = f.seed ^ h.Sum64()
	}
	r := &rule{FaultRule: fr, rng: newStream(seed)}
	r.remaining.Store(fr.Count)
	next := make([]*rule, 0, len(old)+1)
	next = append(next, old...)
	next = append(next, r)
	f.rules.Store(&next)
	return fr.ID, nil
}

// Remove uninstalls the rule with the given ID and reports whether it
// existed.
func (f *Faults) Remove(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.load()
	i := slices.IndexFunc(old, func(r *rule) bool { return r.ID == id })
	if i < 0 {
		return false
	}
	next := slices.Delete(slices.Clone(old), i, i+1)
	f.rules.Store(&next)
	return true
}

// Clear removes every rule.
func (f *Faults) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules.Store(nil)
}

// Rules returns the installed rules with their counters, in order.
func (f *Faults) Rules() []RuleStatus {
	rs := f.load()
	out := make([]RuleStatus, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.status())
	}
	return out
}

// Rule returns one rule with its counters.
func (f *Faults) Rule(id string) (RuleStatus, bool) {
	for _, r := range f.load() {
		if r.ID == id {
			return r.status(), true
		}
	}
	return RuleStatus{}, false
}

// Fired returns how many requests the rule with the given ID answered (0 for
// an unknown rule).
func (f *Faults) Fired(id string) int64 {
	s, _ := f.Rule(id)
	return s.Fired
}

// TotalFired returns how many requests any rule answered since creation,
// including rules since removed.
func (f *Faults) TotalFired() int64 { return f.fired.Load() }

func (r *rule) status() RuleStatus {
	s := RuleStatus{Rule: r.FaultRule, Matched: r.matched.Load(), Fired: r.fired.Load(), Remaining: -1}
	s.Rule.Operations = slices.Clone(r.Operations)
	s.Rule.ResourceTypes = slices.Clone(r.ResourceTypes)
	if r.Count > 0 {
		s.Remaining = r.remaining.Load()
	}
	return s
}

func (f *Faults) load() []*rule {
	if p := f.rules.Load(); p != nil {
		return *p
	}
	return nil
}

func hasRule(rs []*rule, id string) bool {
	return slices.ContainsFunc(rs, func(r *rule) bool { return r.ID == id })
}

// Middleware returns the middleware that injects the rules.
func (f *Faults) Middleware() cosmosemu.Middleware {
	return func(next cosmosemu.Handler) cosmosemu.Handler {
		return func(ctx context.Context, req *cosmosemu.Request) *cosmosemu.Response {
			p := f.rules.Load()
			if p == nil {
				return next(ctx, req)
			}
			var hit *rule
			for _, r := range *p {
				if r.matches(req) && r.tryFire() {
					hit = r
					break
				}
			}
			if hit == nil {
				return next(ctx, req)
			}
			f.fired.Add(1)
			var inner *cosmosemu.Response
			if hit.AfterHandler {
				inner = next(ctx, req)
			}
			if hit.Kind == FaultDrop {
				noteOutcome(ctx, outcomeDropped)
				dropConnection()
			}
			noteOutcome(ctx, outcomeFaulted)
			resp := hit.respond(req)
			if inner != nil {
				resp.RequestCharge = inner.RequestCharge
			}
			return resp
		}
	}
}

// dropConnection ends the serving goroutine without an answer. Deferred
// calls run (the emulator's recover sees no panic and writes nothing);
// net/http then closes the HTTP/1.1 connection or resets the HTTP/2 stream.
func dropConnection() { runtime.Goexit() }

func ceilMillis(d time.Duration) int64 {
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	if ms < 1 {
		ms = 1
	}
	return ms
}
