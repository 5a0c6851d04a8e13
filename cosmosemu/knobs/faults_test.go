package knobs_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var docOps = []cosmosemu.ResourceType{cosmosemu.ResourceDocument}

// Each status fault reaches the SDK as that status, with the service's
// sub-status and headers, and fires exactly once per attempt.
func TestFaultStatusesReachSDK(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		rule      knobs.FaultRule
		op        string // "create" or "read"
		status    int
		subStatus string
	}{
		{"throttle", knobs.FaultRule{Kind: knobs.FaultThrottle, RetryAfter: 20 * time.Millisecond}, "create", http.StatusTooManyRequests, "3200"},
		{"unavailable", knobs.FaultRule{Kind: knobs.FaultUnavailable}, "create", http.StatusServiceUnavailable, ""},
		// The SDK retries a 408 of a read once (cross-region, after 1s);
		// a write is never retried, so the rule fires once.
		{"timeout", knobs.FaultRule{Kind: knobs.FaultTimeout}, "create", http.StatusRequestTimeout, ""},
		{"gone-split", knobs.FaultRule{Kind: knobs.FaultGone}, "read", http.StatusGone, "1002"},
		{"gone-name-cache", knobs.FaultRule{Kind: knobs.FaultGone, SubStatus: knobs.SubStatusNameCacheStale}, "read", http.StatusGone, "1000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{})
			_, err := e.create(t, "seed")
			require.NoError(t, err)

			rule := tc.rule
			rule.ResourceTypes = docOps
			if tc.op == "create" {
				rule.Operations = []cosmosemu.OperationType{cosmosemu.OpCreate}
			} else {
				rule.Operations = []cosmosemu.OperationType{cosmosemu.OpRead}
			}
			id, err := e.k.Faults().Add(rule)
			require.NoError(t, err)

			if tc.op == "create" {
				_, err = e.create(t, "x")
			} else {
				_, err = e.read("seed")
			}
			re := responseError(t, err)
			assert.Equal(t, tc.status, re.StatusCode)
			assert.Equal(t, tc.subStatus, re.RawResponse.Header.Get("x-ms-substatus"))
			assert.Equal(t, int64(1), e.k.Faults().Fired(id))
			if tc.status == http.StatusTooManyRequests {
				assert.Equal(t, "20", re.RawResponse.Header.Get("x-ms-retry-after-ms"))
			}

			// The injected answer has the service's error shape.
			assert.Contains(t, re.Error(), "injected by cosmosemu/knobs rule "+id)
			snap := e.k.Counters().Snapshot()
			var op cosmosemu.OperationType = cosmosemu.OpRead
			if tc.op == "create" {
				op = cosmosemu.OpCreate
			}
			assert.Equal(t, int64(1), snap.ByOperation[op].Faulted)

			// A write that was failed before the handler did not happen.
			if tc.op == "create" {
				_, err = e.read("x")
				assert.Equal(t, http.StatusNotFound, statusOf(err))
			}
		})
	}
}

// With azcore's default retry policy, the SDK retries 429s itself (honouring
// x-ms-retry-after-ms): a "next 2" throttle rule is absorbed and fires twice.
func TestFaultThrottleRetriedBySDK(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{sdkRetries: true})
	id, err := e.k.Faults().Add(knobs.FaultRule{
		Kind: knobs.FaultThrottle, Operations: []cosmosemu.OperationType{cosmosemu.OpCreate},
		ResourceTypes: docOps, Count: 2, RetryAfter: time.Millisecond,
	})
	require.NoError(t, err)
	before := e.k.Counters().Snapshot().ByOperation[cosmosemu.OpCreate].Requests
	_, err = e.create(t, "a")
	require.NoError(t, err)
	st, ok := e.k.Faults().Rule(id)
	require.True(t, ok)
	assert.Equal(t, int64(2), st.Fired)
	assert.Equal(t, int64(0), st.Remaining)
	after := e.k.Counters().Snapshot().ByOperation[cosmosemu.OpCreate]
	assert.Equal(t, int64(3), after.Requests-before, "two throttled attempts and the successful one")
	assert.Equal(t, int64(2), after.Faulted)
}

// A "next N" rule fires for exactly N matching requests, then stops.
func TestFaultNextNStops(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	_, err := e.create(t, "a")
	require.NoError(t, err)
	id, err := e.k.Faults().Add(knobs.FaultRule{
		Kind: knobs.FaultUnavailable, Operations: []cosmosemu.OperationType{cosmosemu.OpRead},
		ResourceTypes: docOps, Count: 3,
	})
	require.NoError(t, err)
	var statuses []int
	for range 6 {
		_, err := e.read("a")
		statuses = append(statuses, statusOf(err))
	}
	assert.Equal(t, []int{503, 503, 503, 0, 0, 0}, statuses)
	st, _ := e.k.Faults().Rule(id)
	assert.Equal(t, int64(3), st.Fired)
	assert.Equal(t, int64(6), st.Matched)
	assert.Equal(t, int64(0), st.Remaining)

	// Rules are matched by operation: creates are untouched.
	_, err = e.create(t, "b")
	require.NoError(t, err)
	assert.Equal(t, int64(6), e.k.Faults().Rules()[0].Matched)

	// Removing the rule.
	assert.True(t, e.k.Faults().Remove(id))
	assert.False(t, e.k.Faults().Remove(id))
	assert.Empty(t, e.k.Faults().Rules())
}

// Matchers: container and partition key range id.
func TestFaultMatchers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	_, err := e.create(t, "a")
	require.NoError(t, err)

	other, err := e.k.Faults().Add(knobs.FaultRule{Kind: knobs.FaultUnavailable, Container: "other"})
	require.NoError(t, err)
	_, err = e.read("a")
	require.NoError(t, err)
	assert.Equal(t, int64(0), e.k.Faults().Fired(other))

	// Find the range that holds partition key "p" from the counters of a
	// rule per range: exactly one of them fires.
	ids := map[string]string{}
	for _, r := range []string{"0", "1", "2", "3"} {
		id, err := e.k.Faults().Add(knobs.FaultRule{Kind: knobs.FaultUnavailable, PartitionKeyRangeID: r, Operations: []cosmosemu.OperationType{cosmosemu.OpRead}, Count: 1})
		require.NoError(t, err)
		ids[r] = id
	}
	_, err = e.read("a")
	assert.Equal(t, http.StatusServiceUnavailable, statusOf(err))
	var fired int64
	for _, id := range ids {
		fired += e.k.Faults().Fired(id)
	}
	assert.Equal(t, int64(1), fired)
}

// Dropping the connection reaches the SDK as a transport error (not an HTTP
// status), over HTTP/1.1 (connection closed) and HTTP/2 (stream reset).
func TestFaultDropIsTransportError(t *testing.T) {
	t.Parallel()
	for _, useTLS := range []bool{false, true} {
		t.Run("tls="+strconv.FormatBool(useTLS), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{tls: useTLS})
			id, err := e.k.Faults().Add(knobs.FaultRule{
				Kind: knobs.FaultDrop, Operations: []cosmosemu.OperationType{cosmosemu.OpCreate}, ResourceTypes: docOps, Count: 1,
			})
			require.NoError(t, err)
			_, err = e.create(t, "lost")
			require.Error(t, err)
			var re *azcore.ResponseError
			assert.False(t, errors.As(err, &re), "want a transport error, got %v", err)
			t.Logf("SDK error: %v", err)
			assert.Equal(t, int64(1), e.k.Faults().Fired(id))
			// Dropped before the handler: nothing was written.
			_, err = e.read("lost")
			assert.Equal(t, http.StatusNotFound, statusOf(err))

			snap := e.k.Counters().Snapshot().ByOperation[cosmosemu.OpCreate]
			assert.Equal(t, int64(1), snap.Dropped)
			assert.Equal(t, int64(1), snap.Faulted)

			// The server keeps serving.
			_, err = e.create(t, "next")
			require.NoError(t, err)
		})
	}
}

// AfterHandler faults make ambiguous outcomes: the write happened but the
// client saw a failure.
func TestFaultAfterHandler(t *testing.T) {
	t.Parallel()
	for _, kind := range []knobs.FaultKind{knobs.FaultDrop, knobs.FaultTimeout} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{cfg: knobs.Config{Charges: knobs.DefaultChargeModel()}})
			_, err := e.k.Faults().Add(knobs.FaultRule{
				Kind: kind, Operations: []cosmosemu.OperationType{cosmosemu.OpCreate}, ResourceTypes: docOps, Count: 1, AfterHandler: true,
			})
			require.NoError(t, err)
			_, err = e.create(t, "ambiguous")
			require.Error(t, err)
			if kind == knobs.FaultTimeout {
				re := responseError(t, err)
				assert.Equal(t, http.StatusRequestTimeout, re.StatusCode)
				// The executed request's charge is reported.
				assert.Equal(t, "5.00", re.RawResponse.Header.Get("x-ms-request-charge"))
			}
			_, err = e.read("ambiguous")
			require.NoError(t, err, "the write took effect")
		})
	}
}

// Probability rules fire for roughly their share of matching requests, and
// equal seeds give equal firing sequences.
func TestFaultProbabilitySeeded(t *testing.T) {
	t.Parallel()
	const n = 400
	run := func(seed uint64) []bool {
		e := newEnv(t, envOptions{cfg: knobs.Config{FaultSeed: seed}})
		_, err := e.create(t, "a")
		require.NoError(t, err)
		id, err := e.k.Faults().Add(knobs.FaultRule{
			Kind: knobs.FaultUnavailable, Operations: []cosmosemu.OperationType{cosmosemu.OpRead}, ResourceTypes: docOps, Probability: 0.25,
		})
		require.NoError(t, err)
		out := make([]bool, n)
		for i := range out {
			_, err := e.read("a")
			out[i] = err != nil
			if err != nil {
				require.Equal(t, http.StatusServiceUnavailable, statusOf(err))
			}
		}
		var fired int64
		for _, f := range out {
			if f {
				fired++
			}
		}
		require.Equal(t, fired, e.k.Faults().Fired(id))
		return out
	}
	a := run(42)
	b := run(42)
	c := run(7)
	assert.Equal(t, a, b, "same seed, same sequence")
	assert.NotEqual(t, a, c, "different seed, different sequence")
	var fired int
	for _, f := range a {
		if f {
			fired++
		}
	}
	assert.InDelta(t, n/4, fired, 40, "fired %d of %d at p=0.25", fired, n)
}

func TestFaultRuleValidation(t *testing.T) {
	t.Parallel()
	f := knobs.NewFaults(1)
	for _, r := range []knobs.FaultRule{
		{},
		{Kind: "explode"},
		{Kind: knobs.FaultGone, Probability: 1.5},
		{Kind: knobs.FaultGone, Count: -1},
	} {
		_, err := f.Add(r)
		assert.Error(t, err, "%+v", r)
	}
	id, err := f.Add(knobs.FaultRule{ID: "mine", Kind: knobs.FaultGone})
	require.NoError(t, err)
	assert.Equal(t, "mine", id)
	_, err = f.Add(knobs.FaultRule{ID: "mine", Kind: knobs.FaultGone})
	assert.Error(t, err, "duplicate id")
	f.Clear()
	assert.Empty(t, f.Rules())
}

// Exact proportion over many draws, straight through the middleware.
func TestFaultProbabilityProportion(t *testing.T) {
	t.Parallel()
	f := knobs.NewFaults(99)
	_, err := f.Add(knobs.FaultRule{Kind: knobs.FaultUnavailable, Probability: 0.3})
	require.NoError(t, err)
	h := f.Middleware()(func(ctx context.Context, req *cosmosemu.Request) *cosmosemu.Response {
		return &cosmosemu.Response{Status: http.StatusOK}
	})
	const n = 100000
	fired := 0
	for range n {
		if h(context.Background(), &cosmosemu.Request{Operation: cosmosemu.OpRead}).Status == http.StatusServiceUnavailable {
			fired++
		}
	}
	assert.InDelta(t, 0.3, float64(fired)/n, 0.01)
}
