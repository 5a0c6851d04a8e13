package chaos

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/durafeed/durafeed/internal/account"
)

// faultInjector is where a campaign's faults are injected: the embedded
// emulator's knobs (server side) or every SDK client's pipeline (client
// side, on an account). Both inject the same rules (FaultRates.rules) and
// count them the same way.
type faultInjector interface {
	// start turns the faults on for requests addressing database, with
	// every counter from zero.
	start(database string) error
	// stop turns the faults off (the latency stays); the counters keep
	// their values.
	stop()
	// fired counts injected faults; firedByRule by rule id (every rule of
	// the campaign, zero included).
	fired() int64
	firedByRule() map[string]int64
	// requests counts the requests (attempts) seen since start.
	requests() int64
}

// serverFaults injects the faults in the embedded emulator (its knobs'
// fault rules) and counts the emulator's requests.
type serverFaults struct {
	k     *knobs.Knobs
	rates FaultRates
}

func (s serverFaults) start(database string) error {
	s.k.Counters().Reset()
	for _, fr := range s.rates.rules(database) {
		if _, err := s.k.Faults().Add(fr); err != nil {
			return err
		}
	}
	return nil
}

func (s serverFaults) stop() { s.k.Faults().Clear() }

func (s serverFaults) fired() int64 { return s.k.Faults().TotalFired() }

// firedByRule must be read before stop (Clear forgets the rules).
func (s serverFaults) firedByRule() map[string]int64 {
	out := map[string]int64{}
	for _, st := range s.k.Faults().Rules() {
		out[st.Rule.ID] = st.Fired
	}
	return out
}

func (s serverFaults) requests() int64 { return s.k.Counters().Snapshot().Total.Requests }

// clientFaults injects the campaign's faults and latency on the client
// side, for an account whose service cannot be told to fail: it is an
// azcore per-retry policy (policy.Policy) installed in every SDK client of
// the campaign (account.Options.PerRetryPolicies), so it runs on every
// attempt, below the SDK's and the store's retries, and one instance
// serves every client (it is safe for concurrent use).
//
// Every attempt first waits the campaign's latency (all requests, as the
// emulator's latency knob delays all). While the faults are on (start to
// stop), an attempt addressing the campaign's database (account.Target:
// the same scope as the server-side rules, which match on the database
// only; lease documents, queries and change feed pages included) tries
// the rules of FaultRates.rules in order, each firing with its
// probability from a draw stream seeded like the knobs' (the campaign's
// seed xor the FNV-64a hash of the rule id), and the first that fires
// answers:
//
//   - throttle-429, unavailable-503, gone-410: an answer made up without
//     sending the request (the service never sees it), with the service's
//     status, x-ms-substatus (3200 for 429, 1002 for 410),
//     x-ms-retry-after-ms (429), x-ms-request-charge 0, x-ms-activity-id
//     and its JSON error body ({"code", "message"});
//   - drop-before: a transport error without sending the request;
//   - drop-after: the request is sent and its answer discarded (body
//     read and closed), then a transport error: the write committed
//     unseen;
//   - timeout-408-after: the request is sent, then a 408 replaces its
//     answer, carrying the answer's x-ms-request-charge (as the knobs'
//     after-handler faults carry the handler's charge).
//
// The transport errors are *url.Error, as net/http's, wrapping an error
// that reads like the HTTP/2 stream reset the embedded emulator's drops
// produce: the SDK's Cosmos retry policy classifies neither as a
// connection error of its own, so the same retries (the store's, the
// SDK's generic one for reads) take over on both sides.
type clientFaults struct {
	latency time.Duration
	rates   FaultRates
	seed    uint64

	active atomic.Pointer[faultSet] // nil: faults off

	mu   sync.Mutex
	last *faultSet // the latest start's, for the counters
}

// faultSet is the rules and counters of one start.
type faultSet struct {
	database string
	rules    []*clientRule
	// requests counts attempts; fired injected faults; unseenMilli the
	// charge, in milli-RU, of the answers drop-after discarded.
	requests, fired, unseenMilli atomic.Int64
}

// clientRule is one rule with its draw stream and counters.
type clientRule struct {
	knobs.FaultRule
	seed           uint64
	draws          atomic.Uint64
	matched, fired atomic.Int64
}

// newClientFaults returns the injector of rates with seed, every attempt
// delayed by latency (zero: none); the faults are off until start.
func newClientFaults(rates FaultRates, seed uint64, latency time.Duration) *clientFaults {
	return &clientFaults{rates: rates, seed: seed, latency: max(latency, 0)}
}

func (f *clientFaults) start(database string) error {
	set := &faultSet{database: database}
	for _, fr := range f.rates.rules(database) {
		h := fnv.New64a()
		_, _ = h.Write([]byte(fr.ID))
		set.rules = append(set.rules, &clientRule{FaultRule: fr, seed: f.seed ^ h.Sum64()})
	}
	f.mu.Lock()
	f.last = set
	f.mu.Unlock()
	f.active.Store(set)
	return nil
}

func (f *clientFaults) stop() { f.active.Store(nil) }

func (f *clientFaults) lastSet() *faultSet {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last == nil {
		return &faultSet{}
	}
	return f.last
}

func (f *clientFaults) fired() int64 { return f.lastSet().fired.Load() }

func (f *clientFaults) firedByRule() map[string]int64 {
	out := map[string]int64{}
	for _, r := range f.lastSet().rules {
		out[r.ID] = r.fired.Load()
	}
	return out
}

func (f *clientFaults) requests() int64 { return f.lastSet().requests.Load() }

// unseenRU is the charge of the answers drop-after discarded: spent on
// the account, never seen by a client nor its meter.
func (f *clientFaults) unseenRU() float64 { return float64(f.lastSet().unseenMilli.Load()) / 1000 }

// Do implements policy.Policy.
func (f *clientFaults) Do(req *policy.Request) (*http.Response, error) {
	raw := req.Raw()
	if f.latency > 0 {
		t := time.NewTimer(f.latency)
		select {
		case <-raw.Context().Done():
			t.Stop()
			return nil, &url.Error{Op: urlOp(raw.Method), URL: raw.URL.String(), Err: raw.Context().Err()}
		case <-t.C:
		}
	}
	set := f.active.Load()
	if set == nil {
		return req.Next()
	}
	set.requests.Add(1)
	if db, _ := account.Target(raw.URL); db != set.database {
		return req.Next()
	}
	hit := set.draw()
	if hit == nil {
		return req.Next()
	}
	set.fired.Add(1)
	hit.fired.Add(1)
	charge := "0"
	if hit.AfterHandler {
		resp, err := req.Next()
		if err != nil {
			return resp, err // no answer to replace
		}
		charge = resp.Header.Get("x-ms-request-charge")
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if hit.Kind == knobs.FaultDrop {
			if ru, err := strconv.ParseFloat(charge, 64); err == nil {
				set.unseenMilli.Add(int64(math.Round(ru * 1000)))
			}
		}
	}
	if hit.Kind == knobs.FaultDrop {
		return nil, &url.Error{Op: urlOp(raw.Method), URL: raw.URL.String(), Err: droppedError{rule: hit.ID}}
	}
	return hit.answer(raw, charge), nil
}

// draw tries the rules in order and returns the first that fires (nil:
// none), as knobs.Faults does.
func (s *faultSet) draw() *clientRule {
	for _, r := range s.rules {
		r.matched.Add(1)
		if p := r.Probability; p > 0 && p < 1 && r.uniform() >= p {
			continue
		}
		return r
	}
	return nil
}

// uniform returns the rule's next draw in [0, 1): the i-th is a SplitMix64
// hash of (seed, i), the knobs' stream.
func (r *clientRule) uniform() float64 {
	i := r.draws.Add(1) - 1
	z := r.seed + (i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

// Sub-status codes of the injected answers, as the service sends them.
const (
	subStatusRUBudgetExceeded      = 3200
	subStatusPartitionKeyRangeGone = 1002
)

// answer makes up the service's answer to req for the rule (not a drop),
// with x-ms-request-charge charge.
func (r *clientRule) answer(req *http.Request, charge string) *http.Response {
	var status, sub int
	var code, msg string
	switch r.Kind {
	case knobs.FaultThrottle:
		status, sub, code = http.StatusTooManyRequests, subStatusRUBudgetExceeded, "TooManyRequests"
		msg = "Request rate is large. More Request Units may be needed, so no changes were made. Please retry this request later. Learn more: http://aka.ms/cosmosdb-error-429"
	case knobs.FaultUnavailable:
		status, code = http.StatusServiceUnavailable, "ServiceUnavailable"
		msg = "Service is currently unavailable. Learn more: https://aka.ms/cosmosdb-tsg-service-unavailable"
	case knobs.FaultTimeout:
		status, code = http.StatusRequestTimeout, "RequestTimeout"
		msg = "Request timed out. Learn more: https://aka.ms/cosmosdb-tsg-request-timeout"
	default: // knobs.FaultGone
		status, sub, code = http.StatusGone, subStatusPartitionKeyRangeGone, "Gone"
		msg = "The requested partition key range is gone. Refresh the routing map and retry."
	}
	msg += " (injected client side by chaos rule " + r.ID + ")"
	activity := req.Header.Get("x-ms-activity-id")
	if activity == "" {
		activity = newActivityID()
	}
	inner, _ := json.Marshal(struct {
		Errors []string `json:"Errors"`
	}{Errors: []string{msg}})
	body, _ := json.Marshal(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{Code: code, Message: "Message: " + string(inner) + "\r\nActivityId: " + activity + ", Microsoft.Azure.Documents.Common/2.14.0"})
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("x-ms-activity-id", activity)
	h.Set("x-ms-request-charge", charge)
	if sub != 0 {
		h.Set("x-ms-substatus", strconv.Itoa(sub))
	}
	if r.Kind == knobs.FaultThrottle {
		ra := r.RetryAfter
		if ra <= 0 {
			ra = knobs.DefaultRetryAfter
		}
		h.Set("x-ms-retry-after-ms", strconv.FormatInt(max(int64((ra+time.Millisecond-1)/time.Millisecond), 1), 10))
	}
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", status, http.StatusText(status)),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// droppedError is the cause of an injected dropped connection.
type droppedError struct{ rule string }

func (e droppedError) Error() string {
	return "stream error: INTERNAL_ERROR; received from peer (connection dropped client side by chaos rule " + e.rule + ")"
}

// urlOp is the Op net/http gives a *url.Error of method ("Get", "Post").
func urlOp(method string) string {
	if method == "" {
		return "Get"
	}
	return method[:1] + strings.ToLower(method[1:])
}

// newActivityID returns a random activity id (a UUID's shape).
func newActivityID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
