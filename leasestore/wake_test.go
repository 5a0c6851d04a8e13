package leasestore

import (
	"context"
	"encoding/json"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"
)

// The heartbeat document's peer wake fields survive encoding and
// decoding, and are left out when unset.
func TestHeartbeatWakeFieldsEncoding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		doc    ownerDoc
		absent []string // properties the encoding must not carry
	}{
		{"none", ownerDoc{}, []string{"wakeAddr", "wakeKey", "wakeHello", "wakesSent"}},
		{"endpoint without hellos", ownerDoc{WakeAddr: "10.0.0.1:7070", WakeKey: "k"}, []string{"wakeHello", "wakesSent"}},
		{"endpoint, hellos, counts", ownerDoc{WakeAddr: "10.0.0.1:7070", WakeKey: "k", WakeHello: true,
			WakesSent: map[string]uint64{"b": 3, "c": 1 << 40}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.doc
			o.ID, o.Type, o.Replica, o.Incarnation, o.Seq, o.State = ownerID("r1"), typeOwner, "r1", "x", 7, stateLive
			raw, err := encodeDoc(o, "pk", "$leases")
			require.NoError(t, err)
			var props map[string]any
			require.NoError(t, json.Unmarshal(raw, &props))
			for _, p := range tt.absent {
				require.NotContains(t, props, p)
			}
			got, err := decodeDoc(raw)
			require.NoError(t, err)
			require.NotNil(t, got.owner)
			require.Equal(t, o, *got.owner)
		})
	}
}

// What a heartbeat publishes of Options.WakesSent, and what another
// replica reads of it (WakesReported), with the endpoint's fields
// (WakeEndpoint, PeerEndpoints, ReadView): only the non-zero counts of
// replicas with a heartbeat document, this replica's own left out.
func TestHeartbeatPublishesWakesSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var sent atomic.Pointer[map[string]uint64]
	sent.Store(&map[string]uint64{})
	a := e.start("a", func(o *Options) {
		relaxed(o)
		o.WakeAddr, o.WakeKey, o.WakeHello = "10.0.0.1:7070", "key-a", true
		o.WakesSent = func() map[string]uint64 { return *sent.Load() }
	})
	b := e.start("b", func(o *Options) {
		relaxed(o)
		o.WakeAddr, o.WakeKey = "10.0.0.2:7070", "key-b"
	})
	require.Eventually(t, func() bool { return len(a.s.PeerEndpoints()) == 1 && len(b.s.PeerEndpoints()) == 1 },
		generous, 5*time.Millisecond, "each sees the other")

	c := e.container(nil)
	// readA reads a's heartbeat document (the zero document on an
	// error: it is called in Eventually's goroutine too).
	readA := func() ownerDoc {
		resp, err := c.ReadItem(context.Background(), azcosmos.NewPartitionKeyString(DefaultPartitionKeyValue), ownerID("a"), nil)
		if err != nil {
			return ownerDoc{}
		}
		d, err := decodeDoc(resp.Value)
		if err != nil || d.owner == nil {
			return ownerDoc{}
		}
		return *d.owner
	}
	tests := []struct {
		name      string
		sent      map[string]uint64
		published map[string]uint64 // nil: the property is absent
		toB       uint64
	}{
		{"nothing sent", map[string]uint64{}, nil, 0},
		{"to b", map[string]uint64{"b": 5}, map[string]uint64{"b": 5}, 5},
		{"to b, more", map[string]uint64{"b": 9}, map[string]uint64{"b": 9}, 9},
		{"zero counts and unknown replicas left out", map[string]uint64{"b": 12, "gone": 4, "never": 0}, map[string]uint64{"b": 12}, 12},
		{"own count left out", map[string]uint64{"a": 3, "b": 13}, map[string]uint64{"b": 13}, 13},
		{"a count that falls is published as is", map[string]uint64{"b": 2}, map[string]uint64{"b": 2}, 2},
		{"only zero", map[string]uint64{"b": 0}, nil, 0},
	}
	// The cases run in order, on the same two stores.
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sent.Store(&tt.sent)
			// A heartbeat or two later the document carries the new counts.
			require.Eventually(t, func() bool { return maps.Equal(readA().WakesSent, tt.published) },
				generous, 5*time.Millisecond, "a's heartbeat document")
			require.Eventually(t, func() bool {
				r := b.s.WakesReported()
				return len(r) == 1 && r[0].Sent == tt.toB
			}, generous, 5*time.Millisecond, "b reads it")
			r := b.s.WakesReported()[0]
			require.Equal(t, "a", r.Replica)
			require.Equal(t, readA().Incarnation, r.Incarnation)
			require.NotEmpty(t, r.Incarnation)
			require.Equal(t, []WakesReport{{Replica: "b", Incarnation: a.s.WakesReported()[0].Incarnation}}, a.s.WakesReported(),
				"b publishes no counts")
		})
	}

	// The endpoints name their replica and whether it takes hellos.
	epA, ok := b.s.WakeEndpoint("a")
	require.True(t, ok)
	require.Equal(t, WakeEndpoint{Replica: "a", Addr: "10.0.0.1:7070", Key: "key-a", Hello: true}, epA)
	require.Equal(t, []WakeEndpoint{epA}, b.s.PeerEndpoints())
	self, ok := a.s.WakeEndpoint("a")
	require.True(t, ok)
	require.Equal(t, epA, self)
	require.Equal(t, []WakeEndpoint{{Replica: "b", Addr: "10.0.0.2:7070", Key: "key-b"}}, a.s.PeerEndpoints())
	v, err := ReadView(context.Background(), c, DefaultPartitionKeyValue, 16)
	require.NoError(t, err)
	require.Equal(t, map[string]WakeEndpoint{"a": epA, "b": {Replica: "b", Addr: "10.0.0.2:7070", Key: "key-b"}}, v.Wake)
}
