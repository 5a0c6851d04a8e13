package knobs_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Injected latency is applied to requests through the SDK (lower bound
// only).
func TestLatencyApplied(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	_, err := e.create(t, "a")
	require.NoError(t, err)

	require.NoError(t, e.k.Latency().Set(knobs.LatencyConfig{Default: knobs.LatencySpec{Base: 50 * time.Millisecond}}))
	start := time.Now()
	_, err = e.read("a")
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)

	// Per operation type: reads only.
	require.NoError(t, e.k.Latency().Set(knobs.LatencyConfig{
		PerOperation: map[cosmosemu.OperationType]knobs.LatencySpec{cosmosemu.OpRead: {Base: 80 * time.Millisecond}},
	}))
	start = time.Now()
	_, err = e.read("a")
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 80*time.Millisecond)
	n, total := e.k.Latency().Delayed()
	assert.Equal(t, int64(2), n)
	assert.Equal(t, 130*time.Millisecond, total)

	// Other operations are not delayed.
	_, err = e.create(t, "b")
	require.NoError(t, err)
	n, _ = e.k.Latency().Delayed()
	assert.Equal(t, int64(2), n)
}

// Jitter stays within its bounds, follows its distribution and is
// reproducible from the seed.
func TestLatencyJitterSeeded(t *testing.T) {
	t.Parallel()
	const n = 20000
	draw := func(cfg knobs.LatencyConfig) []time.Duration {
		l, err := knobs.NewLatency(cfg)
		require.NoError(t, err)
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = l.Sample(cosmosemu.OpRead)
		}
		return out
	}
	uni := knobs.LatencyConfig{Default: knobs.LatencySpec{Base: 2 * time.Millisecond, Jitter: time.Millisecond}, Seed: 5}
	a, b := draw(uni), draw(uni)
	assert.Equal(t, a, b, "same seed, same delays")
	var sum time.Duration
	for _, d := range a {
		assert.GreaterOrEqual(t, d, time.Millisecond)
		assert.LessOrEqual(t, d, 3*time.Millisecond)
		sum += d
	}
	assert.InDelta(t, float64(2*time.Millisecond), float64(sum/n), float64(50*time.Microsecond))

	norm := knobs.LatencyConfig{Default: knobs.LatencySpec{Base: 10 * time.Millisecond, Jitter: time.Millisecond, Distribution: knobs.Normal}, Seed: 5}
	var s, s2 float64
	for _, d := range draw(norm) {
		ms := float64(d) / float64(time.Millisecond)
		s += ms
		s2 += ms * ms
	}
	mean := s / n
	variance := s2/n - mean*mean
	assert.InDelta(t, 10, mean, 0.05)
	assert.InDelta(t, 1, variance, 0.1, "variance (ms²)")

	other := uni
	other.Seed = 6
	assert.NotEqual(t, a, draw(other))

	_, err := knobs.NewLatency(knobs.LatencyConfig{Default: knobs.LatencySpec{Base: -1}})
	assert.Error(t, err)
	_, err = knobs.NewLatency(knobs.LatencyConfig{Default: knobs.LatencySpec{Distribution: "pareto"}})
	assert.Error(t, err)
}

// A request whose context ends while waiting stops waiting and is not
// executed.
func TestLatencyHonoursCancellation(t *testing.T) {
	t.Parallel()
	l, err := knobs.NewLatency(knobs.LatencyConfig{Default: knobs.LatencySpec{Base: time.Hour}})
	require.NoError(t, err)
	ran := false
	h := l.Middleware()(func(ctx context.Context, req *cosmosemu.Request) *cosmosemu.Response {
		ran = true
		return &cosmosemu.Response{Status: http.StatusOK}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *cosmosemu.Response)
	go func() { done <- h(ctx, &cosmosemu.Request{Operation: cosmosemu.OpRead}) }()
	cancel()
	resp := <-done
	assert.Equal(t, http.StatusRequestTimeout, resp.Status)
	assert.False(t, ran)
}
