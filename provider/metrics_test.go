package provider

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/engine"
	"github.com/durafeed/durafeed/store"
)

// collected reads every metric of reader by name.
func collected(t *testing.T, reader *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// sumWhere adds the int64 sum's points whose attributes hold every kv.
func sumWhere(m metricdata.Metrics, kv ...attribute.KeyValue) int64 {
	var n int64
	sum, _ := m.Data.(metricdata.Sum[int64])
	for _, dp := range sum.DataPoints {
		ok := true
		for _, want := range kv {
			if v, found := dp.Attributes.Value(want.Key); !found || v != want.Value {
				ok = false
			}
		}
		if ok {
			n += dp.Value
		}
	}
	return n
}

// TestProviderMetrics: with a MeterProvider, the provider reports every
// request to Cosmos DB by operation and status with its request units,
// the 429s and the SDK's retries, and the engine its wake latency, the
// slots it owns and its feeds' pending changes.
func TestProviderMetrics(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	container := freshContainer("metrics")
	cfg := replicaConfig(container)
	cfg.joinEagerly = true
	cfg.meterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	p := openProvider(t, cfg)
	ctx := context.Background()
	item := durable.ActivityExecute{Instance: "m", ExecutionID: 1, ID: 2, Name: "A", Input: "{}"}
	require.NoError(t, p.EnqueueForWorker(ctx, item))
	got, err := p.FetchWorkItem(ctx, time.Minute, hang, nil, durable.DefaultOnlyTags())
	require.NoError(t, err)
	require.NotNil(t, got)
	// One throttled read: the SDK retries it.
	middleware.failNth(container, cosmosemu.OpRead, 1, 429)
	_, err = p.ReadWithExecution(ctx, "m", 1)
	require.NoError(t, err)
	require.NoError(t, p.AckWorkItem(ctx, got.LockToken, durable.ActivityCompleted{Instance: "m", ExecutionID: 1, ID: 2, Result: "1"}))

	m := collected(t, reader)
	req := m[store.MetricRequests]
	require.Equal(t, "{request}", req.Unit)
	require.Positive(t, sumWhere(req, store.AttrOperation.String("patch"), store.AttrStatus.String("200")), "the lock")
	require.Positive(t, sumWhere(req, store.AttrOperation.String("batch"), store.AttrStatus.String("200")), "the ack")
	require.Positive(t, sumWhere(req, store.AttrOperation.String("create"), store.AttrStatus.String("201")), "the enqueue")
	require.Positive(t, sumWhere(req, store.AttrOperation.String("read_change_feed")), "the feed")
	require.Positive(t, sumWhere(m[store.MetricThrottles], store.AttrOperation.String("read")))
	require.Positive(t, sumWhere(m[store.MetricRetries]))
	units, _ := m[store.MetricRequestUnits].Data.(metricdata.Sum[float64])
	var ru float64
	for _, dp := range units.DataPoints {
		ru += dp.Value
	}
	require.Positive(t, ru, "request units from x-ms-request-charge")

	wake, _ := m[engine.MetricWakeLatency].Data.(metricdata.Histogram[float64])
	var wakes uint64
	for _, dp := range wake.DataPoints {
		if v, _ := dp.Attributes.Value(engine.AttrQueue); v.AsString() == "worker" {
			wakes += dp.Count
		}
	}
	require.EqualValues(t, 1, wakes, "the item's wake latency")
	owned, _ := m[engine.MetricSlotsOwned].Data.(metricdata.Gauge[int64])
	require.Len(t, owned.DataPoints, 1)
	require.EqualValues(t, 256, owned.DataPoints[0].Value)
	pending, _ := m[engine.MetricFeedPending].Data.(metricdata.Gauge[int64])
	require.Len(t, pending.DataPoints, 1)
	require.GreaterOrEqual(t, pending.DataPoints[0].Value, int64(0))
}
