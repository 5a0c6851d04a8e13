package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/engine"
	"github.com/durafeed/durafeed/leasestore"
)

// silentCheckEvery is the tests' PeerWakeOptions.ViewRefresh: how often
// a replica compares its peers' reports with what arrived.
const silentCheckEvery = 200 * time.Millisecond

// blackHole is a TCP listener the test owns that accepts every
// connection and discards what it reads: a peer wake endpoint where a
// sender's writes succeed and nothing reaches a receiver (a wrong
// advertised address that still accepts connections).
type blackHole struct {
	ln   net.Listener
	read atomic.Int64 // bytes read and discarded
	wg   sync.WaitGroup
	mu   sync.Mutex
	cs   []net.Conn
}

func newBlackHole(t *testing.T) *blackHole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h := &blackHole{ln: ln}
	h.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.cs = append(h.cs, c)
			h.mu.Unlock()
			h.wg.Go(func() {
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					h.read.Add(int64(n))
					if err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		h.mu.Lock()
		for _, c := range h.cs {
			_ = c.Close()
		}
		h.mu.Unlock()
		h.wg.Wait()
	})
	return h
}

// silentPair opens two replicas, a and b, on a fresh container, both
// with the peer wake channel on and joined, and waits until they share
// the slots. a advertises advertiseA (its own listener when empty); a
// logs to logs and reports metrics to reader.
func silentPair(t *testing.T, name, advertiseA string, logs *zap.Logger, reader *sdkmetric.ManualReader) (a, b *Provider) {
	t.Helper()
	cfg := replicaConfig(freshContainer(name))
	cfg.joinEagerly = true
	acfg, bcfg := cfg, cfg
	acfg.ReplicaID, acfg.Logger = "a", logs
	acfg.meterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	acfg.peerWake = &engine.PeerWakeOptions{Advertise: advertiseA, ViewRefresh: silentCheckEvery}
	bcfg.ReplicaID = "b"
	bcfg.peerWake = &engine.PeerWakeOptions{ViewRefresh: silentCheckEvery}
	a = openProvider(t, acfg)
	b = openProvider(t, bcfg)
	until(t, "a and b share the slots", func() bool { return ownedCount(a) > 0 && ownedCount(b) > 0 && ownedOnce(a, b) })
	return a, b
}

// startIn enqueues, through p, the start of a fresh instance in a slot
// owner holds: a write whose wake p sends to owner.
func startIn(t *testing.T, p, owner *Provider, prefix string, k int) {
	t.Helper()
	id := instancesIn(t, owner.ev().Owned(), fmt.Sprint(prefix, "-", k), 1)[0]
	require.NoError(t, p.EnqueueForOrchestrator(context.Background(),
		durable.StartOrchestration{Instance: id, Orchestration: "O", Input: "{}", ExecutionID: 1}, 0))
}

// wakesSentBy reads replica's heartbeat document: the wake frames it
// reports written to each other replica.
func wakesSentBy(t *testing.T, p *Provider, replica string) map[string]uint64 {
	t.Helper()
	resp, err := p.s.Container().ReadItem(context.Background(), azcosmos.NewPartitionKeyString(leasestore.DefaultPartitionKeyValue), "owner:"+replica, nil)
	require.NoError(t, err)
	var doc struct {
		WakesSent map[string]uint64 `json:"wakesSent"`
	}
	require.NoError(t, json.Unmarshal(resp.Value, &doc))
	return doc.WakesSent
}

// gaugeValue is the value of an int64 gauge (0 without a point).
func gaugeValue(m metricdata.Metrics) int64 {
	g, _ := m.Data.(metricdata.Gauge[int64])
	var n int64
	for _, dp := range g.DataPoints {
		n += dp.Value
	}
	return n
}

// TestPeerWakeSilentChannelIsFound: a's heartbeat advertises an address
// where a listener the test owns accepts connections and discards what
// they carry, so b's wakes for a's slots are written (b's heartbeat
// reports them) and none reaches a's receiver. a finds the channel from
// b silent: its stats, its metrics and one warning naming b and the
// address a advertises, without a's key.
func TestPeerWakeSilentChannelIsFound(t *testing.T) {
	t.Parallel()
	hole := newBlackHole(t)
	core, logs := observer.New(zapcore.InfoLevel)
	reader := sdkmetric.NewManualReader()
	a, b := silentPair(t, "peerwake-silent", hole.ln.Addr().String(), zap.New(core), reader)

	k := 0
	until(t, "a finds the channel from b silent", func() bool {
		if a.ev().PeerWakeStats().PeersSilent > 0 {
			return true
		}
		if k%5 == 0 { // a write every 50 ms or so
			startIn(t, b, a, "silent", k)
		}
		k++
		return false
	})
	ast, bst := a.ev().PeerWakeStats(), b.ev().PeerWakeStats()
	require.Equal(t, int64(1), ast.PeersSilent)
	require.Equal(t, int64(1), ast.SilentFound, "found once: nothing arrives to end it")
	require.Positive(t, ast.SilenceChecks)
	require.Zero(t, ast.Receiver.Accepted, "nothing reached a's receiver")
	require.Zero(t, ast.Receiver.Hellos)
	require.Positive(t, bst.Sender.Sent, "b's writes to the advertised address succeed")
	require.Positive(t, hole.read.Load(), "and the black hole read them")
	require.GreaterOrEqual(t, wakesSentBy(t, b, "b")["a"], uint64(3), "b's heartbeat reports them")
	require.Zero(t, bst.PeersSilent, "nothing was sent to b")

	found := logs.FilterMessageSnippet("peer wake channel silent").AllUntimed()
	require.Len(t, found, 1, "one line per state change")
	require.Equal(t, zapcore.WarnLevel, found[0].Level)
	fields := found[0].ContextMap()
	require.Equal(t, "b", fields["peer"])
	require.Equal(t, hole.ln.Addr().String(), fields["advertised"])
	require.Equal(t, "a", fields["replica"])
	view, err := leasestore.ReadView(context.Background(), a.s.Container(), leasestore.DefaultPartitionKeyValue, len(a.ev().Ownership()))
	require.NoError(t, err)
	key := view.Wake["a"].Key
	require.NotEmpty(t, key)
	for _, e := range logs.AllUntimed() {
		require.NotContains(t, e.Message, key)
		for _, v := range e.ContextMap() {
			require.NotContains(t, fmt.Sprint(v), key, "a log line carries a's key: %q", e.Message)
		}
	}

	m := collected(t, reader)
	require.Equal(t, int64(1), sumWhere(m[engine.MetricPeerWakeSilent]))
	require.Equal(t, int64(1), gaugeValue(m[engine.MetricPeerWakePeersSilent]))
}

// TestPeerWakeWorkingChannelIsNotSilent: with a working channel, wakes
// b sends for a's slots arrive; once b's heartbeat reports them and a
// has compared the reports with what arrived several times, nothing is
// found silent. The wakes are sent after a's first comparison, so a
// check that ignored what arrived would find them.
func TestPeerWakeWorkingChannelIsNotSilent(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	reader := sdkmetric.NewManualReader()
	a, b := silentPair(t, "peerwake-working", "", zap.New(core), reader)
	until(t, "a compares b's reports", func() bool { return a.ev().PeerWakeStats().SilenceChecks > 0 })

	// Wakes from b, until 10 reached a (a write while b's view of the
	// owners lags sends none).
	k := 0
	until(t, "b's wakes reach a", func() bool {
		if a.ev().PeerWakeStats().Receiver.Accepted >= 10 {
			return true
		}
		if k%5 == 0 {
			startIn(t, b, a, "working", k)
		}
		k++
		return false
	})
	// b writes to a only: all its sender wrote is to a.
	written := b.ev().PeerWakeStats().Sender.Sent
	until(t, "b's heartbeat reports them", func() bool { return wakesSentBy(t, b, "b")["a"] >= written })
	checks := a.ev().PeerWakeStats().SilenceChecks
	until(t, "a compares them with what arrived", func() bool { return a.ev().PeerWakeStats().SilenceChecks >= checks+4 })

	st := a.ev().PeerWakeStats()
	require.Zero(t, st.PeersSilent)
	require.Zero(t, st.SilentFound)
	require.Positive(t, st.Receiver.Hellos, "b named its connection")
	require.Zero(t, logs.FilterMessageSnippet("peer wake channel silent").Len())
	m := collected(t, reader)
	require.Zero(t, sumWhere(m[engine.MetricPeerWakeSilent]))
	require.Zero(t, gaugeValue(m[engine.MetricPeerWakePeersSilent]))
}
