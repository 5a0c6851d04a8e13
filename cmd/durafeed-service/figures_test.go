package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/engine"
	"github.com/durafeed/durafeed/httpapi"
	"github.com/durafeed/durafeed/store"
)

// TestSamplerFigures: rates per minute between the ring's oldest and
// newest samples, summed over attributes; wake latency quantiles from the
// histogram's buckets gained meanwhile; the feed gauges as last read; a
// ring of at most a minute.
func TestSamplerFigures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(ctx) })
	m := mp.Meter("test")
	req, _ := m.Int64Counter(store.MetricRequests)
	ru, _ := m.Float64Counter(store.MetricRequestUnits)
	thr, _ := m.Int64Counter(store.MetricThrottles)
	wake, _ := m.Float64Histogram(engine.MetricWakeLatency, metric.WithExplicitBucketBoundaries(0.001, 0.01, 0.1, 1))
	pending, _ := m.Int64ObservableGauge(engine.MetricFeedPending)
	_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(pending, 7)
		return nil
	}, pending)
	require.NoError(t, err)

	s := newSampler(r, 5*time.Second, "svc")
	f := s.figures()
	require.Equal(t, httpapi.EngineFigures{Replica: "svc"}, f, "nothing sampled yet")

	req.Add(ctx, 100)
	ru.Add(ctx, 500)
	wake.Record(ctx, 0.5) // before the first sample: not in the window
	start := time.Now()
	s.collect(ctx, start)
	f = s.figures()
	require.Nil(t, f.Requests, "one sample makes no rate")
	require.NotNil(t, f.FeedPendingChanges)
	require.EqualValues(t, 7, *f.FeedPendingChanges)

	read, write := attribute.String(string(store.AttrOperation), "read"), attribute.String(string(store.AttrOperation), "batch")
	req.Add(ctx, 10, metric.WithAttributes(read))
	req.Add(ctx, 20, metric.WithAttributes(write))
	ru.Add(ctx, 60)
	thr.Add(ctx, 3)
	for range 98 {
		wake.Record(ctx, 0.005, metric.WithAttributes(engine.AttrQueue.String("orchestrator")))
	}
	wake.Record(ctx, 0.05, metric.WithAttributes(engine.AttrQueue.String("worker")))
	wake.Record(ctx, 0.05, metric.WithAttributes(engine.AttrQueue.String("worker")))
	s.collect(ctx, start.Add(30*time.Second))
	f = s.figures()
	require.Equal(t, &httpapi.RequestRates{RUPerMin: 120, ThrottledPerMin: 6, RequestsPerMin: 60, WindowSeconds: 30}, f.Requests)
	require.NotNil(t, f.WakeLatencyMs)
	require.InDelta(t, 1+9*50.0/98, f.WakeLatencyMs.P50, 0.005, "in the 1-10 ms bucket")
	require.InDelta(t, 55, f.WakeLatencyMs.P99, 1e-9, "in the 10-100 ms bucket")

	// The ring keeps a minute: rates over the last 60 s once it is full.
	for i := 1; i <= 20; i++ {
		req.Add(ctx, 5)
		s.collect(ctx, start.Add(30*time.Second+time.Duration(i)*5*time.Second))
	}
	f = s.figures()
	require.Len(t, s.ring, 13)
	require.Equal(t, 60.0, f.Requests.WindowSeconds)
	require.InDelta(t, 60, f.Requests.RequestsPerMin, 1e-9, "12 increments of 5 in the minute")
	require.Nil(t, f.WakeLatencyMs, "no wake in the last minute")

	// run samples until its context ends.
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	runner := newSampler(r, time.Millisecond, "")
	go func() { defer close(done); runner.run(rctx) }()
	require.Eventually(t, func() bool { return runner.figures().Requests != nil }, hang, time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(hang):
		t.Fatal("the sampler did not stop")
	}
}

// engineAnswer reads GET /v1/engine.
func engineAnswer(t *testing.T, base string) httpapi.EngineView {
	t.Helper()
	resp, err := http.Get(base + "/v1/engine")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var v httpapi.EngineView
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	return v
}

// TestDashboardEndpoints runs the service on the embedded emulator in
// both modes: GET /v1/engine describes the replica, its leases and its
// request rates; GET /v1/instances/{id}/history the spans of a fan-out
// on the Cosmos DB store; GET /v1/me an open API; the list filters by
// creation time and name on the store's query.
func TestDashboardEndpoints(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"event-driven", "polling"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			id := "svc-" + strings.ReplaceAll(mode, "-", "")
			base, stop := startServiceWith(t, map[string]string{"DURAFEED_MODE": mode, "DURAFEED_REPLICA_ID": id}, zap.NewNop(),
				&hooks{sampleEvery: 50 * time.Millisecond})
			defer func() { require.NoError(t, stop()) }()

			resp, err := http.Post(base+"/v1/instances", "application/json",
				strings.NewReader(`{"name":"FanOut","input":{"count":4},"instanceId":"fan-1"}`))
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusCreated, resp.StatusCode)
			status, body := getJSON(t, base+"/v1/instances/fan-1?wait=50s")
			require.Equal(t, http.StatusOK, status)
			require.Equal(t, "Completed", body["state"])

			// The history: four squares, each a completed span.
			resp, err = http.Get(base + "/v1/instances/fan-1/history")
			require.NoError(t, err)
			var h httpapi.HistoryResponse
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&h))
			resp.Body.Close()
			require.Len(t, h.Executions, 1)
			squares := 0
			for _, s := range h.Executions[0].Spans {
				if s.Kind == httpapi.SpanActivity {
					require.Equal(t, "Square", s.Name)
					require.Equal(t, httpapi.SpanCompleted, s.Status)
					squares++
				}
			}
			require.Equal(t, 4, squares)

			// The list, by creation time and by name: the store's query
			// (the emulator refuses a filter on a path the policy does
			// not index).
			status, body = getJSON(t, base+"/v1/instances")
			require.Equal(t, http.StatusOK, status)
			created := body["instances"].([]any)[0].(map[string]any)["createdAt"].(string)
			for q, n := range map[string]int{"createdFrom=" + url.QueryEscape(created): 1, "createdTo=" + url.QueryEscape(created): 0,
				"name=FanOut": 1, "name=Greet": 0, "name=FanOut&status=Completed&createdFrom=" + url.QueryEscape(created): 1} {
				status, body = getJSON(t, base+"/v1/instances?"+q)
				require.Equal(t, http.StatusOK, status, q)
				require.Len(t, body["instances"], n, q)
			}

			status, body = getJSON(t, base+"/v1/me")
			require.Equal(t, http.StatusOK, status)
			require.Equal(t, false, body["authenticated"])

			var v httpapi.EngineView
			require.Eventually(t, func() bool {
				v = engineAnswer(t, base)
				return v.Requests != nil && v.Requests.RequestsPerMin > 0 && v.Requests.RUPerMin > 0
			}, hang, 50*time.Millisecond, "request rates from the store's counters")
			require.Equal(t, mode, v.Mode)
			require.Equal(t, id, v.Replica)
			require.False(t, v.ObservedAt.Time().IsZero())
			if mode == "polling" {
				require.Empty(t, v.Leases)
				require.Empty(t, v.Replicas)
				require.Contains(t, v.Note, "polling")
				require.Nil(t, v.Feed)
				require.Nil(t, v.WakeLatencyMs, "no wake latency in polling mode")
				return
			}
			require.Len(t, v.Leases, 8, "the default 8 blocks")
			for i, l := range v.Leases {
				require.Equal(t, fmt.Sprintf("%d-%d", i*32, i*32+31), l.Range)
				require.Equal(t, id, l.Owner, "the only replica holds every block")
				require.NotNil(t, l.Since)
			}
			require.Len(t, v.Replicas, 1)
			self := v.Replicas[0]
			require.Equal(t, id, self.ID)
			require.True(t, self.Self)
			require.True(t, self.Live)
			require.Equal(t, 8, self.Leases)
			require.Equal(t, "live", self.State)
			require.NotEmpty(t, self.Host)
			require.NotNil(t, self.LastHeartbeat)
			require.NotNil(t, v.Feed)
			require.Eventually(t, func() bool {
				v = engineAnswer(t, base)
				return v.WakeLatencyMs != nil && v.WakeLatencyMs.P99 >= v.WakeLatencyMs.P50 && v.Feed.PendingChanges != nil
			}, hang, 50*time.Millisecond, "wake latency from the engine's histogram, the feed gauges")
		})
	}
}
