package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	azruntime "github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/stretchr/testify/require"
)

// fakeService is a transport that answers every request 200 with a
// charge of 5.5 RU and counts what reached it.
type fakeService struct{ got atomic.Int64 }

func (f *fakeService) Do(req *http.Request) (*http.Response, error) {
	f.got.Add(1)
	h := http.Header{}
	h.Set("x-ms-request-charge", "5.5")
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: h, Request: req,
		Body: io.NopCloser(strings.NewReader(`{"id":"x"}`))}, nil
}

// pipeline sends through cf to svc, without the SDK's retries.
func pipeline(cf *clientFaults, svc *fakeService) azruntime.Pipeline {
	return azruntime.NewPipeline("chaos-test", "v0", azruntime.PipelineOptions{}, &policy.ClientOptions{
		Transport: svc, PerRetryPolicies: []policy.Policy{cf}, Retry: policy.RetryOptions{MaxRetries: -1},
		Telemetry: policy.TelemetryOptions{Disabled: true},
	})
}

func send(t *testing.T, ctx context.Context, pl azruntime.Pipeline, method, path string) (*http.Response, error) {
	t.Helper()
	req, err := azruntime.NewRequest(ctx, method, "https://acct.documents.azure.com:443"+path)
	require.NoError(t, err)
	return pl.Do(req)
}

const docPath = "/dbs/run-db/colls/chaos/docs/x"

// onlyRule starts cf with its rates and keeps rule id alone, firing every
// time.
func onlyRule(t *testing.T, cf *clientFaults, id string) {
	t.Helper()
	require.NoError(t, cf.start("run-db"))
	set := cf.active.Load()
	var keep []*clientRule
	for _, r := range set.rules {
		if r.ID == id {
			r.Probability = 1
			keep = append(keep, r)
		}
	}
	require.Len(t, keep, 1, id)
	set.rules = keep
}

func TestClientFaultKinds(t *testing.T) {
	t.Parallel()
	all := FaultRates{Throttle: 0.1, ThrottleRetryAfter: 25 * time.Millisecond, Unavailable: 0.1, Drop: 0.1, TimeoutAfter: 0.1, Gone: 0.1}
	tests := []struct {
		rule   string
		status int    // 0: a transport error
		sub    string // x-ms-substatus
		code   string
		sent   bool // the request reached the service
		charge string
	}{
		{rule: "throttle-429", status: http.StatusTooManyRequests, sub: "3200", code: "TooManyRequests", charge: "0"},
		{rule: "unavailable-503", status: http.StatusServiceUnavailable, code: "ServiceUnavailable", charge: "0"},
		{rule: "gone-410", status: http.StatusGone, sub: "1002", code: "Gone", charge: "0"},
		{rule: "timeout-408-after", status: http.StatusRequestTimeout, code: "RequestTimeout", sent: true, charge: "5.5"},
		{rule: "drop-before"},
		{rule: "drop-after", sent: true},
	}
	for _, tc := range tests {
		t.Run(tc.rule, func(t *testing.T) {
			t.Parallel()
			svc := &fakeService{}
			cf := newClientFaults(all, 1, 0)
			onlyRule(t, cf, tc.rule)
			pl := pipeline(cf, svc)
			resp, err := send(t, t.Context(), pl, http.MethodPost, docPath)
			if tc.sent {
				require.Equal(t, int64(1), svc.got.Load(), "the request was sent before the fault")
			} else {
				require.Zero(t, svc.got.Load(), "the request never reached the service")
			}
			require.Equal(t, map[string]int64{tc.rule: 1}, cf.firedByRule())
			require.Equal(t, int64(1), cf.fired())
			if tc.status == 0 {
				require.Nil(t, resp)
				var ue *url.Error
				require.ErrorAs(t, err, &ue)
				require.Equal(t, "Post", ue.Op)
				var de droppedError
				require.ErrorAs(t, err, &de)
				require.Equal(t, tc.rule, de.rule)
				if tc.rule == "drop-after" {
					require.InDelta(t, 5.5, cf.unseenRU(), 1e-9, "the discarded answer's charge")
				} else {
					require.Zero(t, cf.unseenRU())
				}
				return
			}
			require.NoError(t, err)
			defer func() { _ = resp.Body.Close() }()
			require.Equal(t, tc.status, resp.StatusCode)
			require.Equal(t, tc.sub, resp.Header.Get("x-ms-substatus"))
			require.Equal(t, tc.charge, resp.Header.Get("x-ms-request-charge"))
			require.NotEmpty(t, resp.Header.Get("x-ms-activity-id"))
			if tc.status == http.StatusTooManyRequests {
				require.Equal(t, "25", resp.Header.Get("x-ms-retry-after-ms"))
			} else {
				require.Empty(t, resp.Header.Get("x-ms-retry-after-ms"))
			}
			var body struct{ Code, Message string }
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
			require.Equal(t, tc.code, body.Code)
			require.Contains(t, body.Message, "chaos rule "+tc.rule)
			require.Contains(t, body.Message, "ActivityId: ")
		})
	}
}

// TestClientFaultScope: the faults fire only while on and only on
// requests addressing the campaign's database, as the server-side rules.
func TestClientFaultScope(t *testing.T) {
	t.Parallel()
	svc := &fakeService{}
	cf := newClientFaults(FaultRates{Unavailable: 0.5}, 1, 0)
	pl := pipeline(cf, svc)
	do := func(path string) int {
		resp, err := send(t, t.Context(), pl, http.MethodGet, path)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, do(docPath), "off before start")
	onlyRule(t, cf, "unavailable-503")
	require.Equal(t, http.StatusServiceUnavailable, do(docPath))
	require.Equal(t, http.StatusServiceUnavailable, do("/dbs/run-db/colls/chaos/pkranges"))
	require.Equal(t, http.StatusOK, do("/"), "the account itself is out of scope")
	require.Equal(t, http.StatusOK, do("/dbs"), "no database addressed")
	require.Equal(t, http.StatusOK, do("/dbs/other/colls/chaos/docs/x"), "another database")
	cf.stop()
	require.Equal(t, http.StatusOK, do(docPath), "off after stop")
	require.Equal(t, int64(2), cf.fired(), "the counters outlive stop")
	require.Equal(t, int64(5), cf.requests(), "attempts seen while on")
}

// TestClientFaultRates: zero rates fire nothing; otherwise each rule fires
// about its share of the requests, counted by the server-side rule ids,
// and equal seeds give equal counts.
func TestClientFaultRates(t *testing.T) {
	t.Parallel()
	const n = 4000
	run := func(rates FaultRates, seed uint64) (*clientFaults, *fakeService) {
		svc := &fakeService{}
		cf := newClientFaults(rates, seed, 0)
		require.NoError(t, cf.start("run-db"))
		pl := pipeline(cf, svc)
		for range n {
			resp, err := send(t, t.Context(), pl, http.MethodPost, docPath)
			if err == nil {
				_ = resp.Body.Close()
			}
		}
		return cf, svc
	}

	cf, svc := run(FaultRates{}, 1)
	require.Zero(t, cf.fired())
	require.Empty(t, cf.firedByRule())
	require.Equal(t, int64(n), svc.got.Load())

	rates := FaultRates{Throttle: 0.2, ThrottleRetryAfter: 10 * time.Millisecond, Unavailable: 0.1, Drop: 0.1, TimeoutAfter: 0.05, Gone: 0.05}
	cf, svc = run(rates, 7)
	by := cf.firedByRule()
	var ids []string
	for _, r := range rates.rules("run-db") {
		ids = append(ids, r.ID)
	}
	require.ElementsMatch(t, ids, keys(by), "the server-side rule ids")
	sum := int64(0)
	for _, v := range by {
		sum += v
	}
	require.Equal(t, cf.fired(), sum)
	require.Equal(t, int64(n), cf.requests())
	share := map[string]float64{"throttle-429": 0.2, "unavailable-503": 0.1, "drop-before": 0.05, "drop-after": 0.05,
		"timeout-408-after": 0.05, "gone-410": 0.05}
	for id, want := range share {
		require.InDelta(t, want, float64(by[id])/n, 0.02, id)
	}
	notSent := by["throttle-429"] + by["unavailable-503"] + by["gone-410"] + by["drop-before"]
	require.Equal(t, int64(n)-notSent, svc.got.Load(), "only the faults after sending reached the service")

	again, _ := run(rates, 7)
	require.Equal(t, by, again.firedByRule(), "equal seeds, equal draws")
}

// TestClientFaultLatency: the latency comes before the request is sent
// and gives way to the request's context.
func TestClientFaultLatency(t *testing.T) {
	t.Parallel()
	svc := &fakeService{}
	cf := newClientFaults(FaultRates{}, 1, time.Hour)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := send(t, ctx, pipeline(cf, svc), http.MethodGet, docPath)
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
	require.Zero(t, svc.got.Load(), "a request whose context ended during the latency is not sent")

	resp, err := send(t, t.Context(), pipeline(newClientFaults(FaultRates{}, 1, time.Millisecond), svc), http.MethodGet, docPath)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, int64(1), svc.got.Load(), "after the latency the request is sent")
}

func keys(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
