package leasestore

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/durafeed/durafeed/internal/epk"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/slots"
)

func TestOptionsDefaults(t *testing.T) {
	t.Parallel()
	o, err := Options{}.withDefaults()
	require.NoError(t, err)
	require.NotEmpty(t, o.ReplicaID)
	require.NoError(t, checkReplicaID(o.ReplicaID))
	require.Equal(t, "$leases", o.PartitionKeyValue)
	require.Equal(t, slots.Ranges(slots.DefaultBlocks), o.Ranges)
	require.Equal(t, 10*time.Second, o.LeaseExpiry)
	require.Equal(t, 2*time.Second, o.HeartbeatInterval)
	require.Equal(t, 50*time.Millisecond, o.WatchActiveDelay)
	require.Equal(t, 500*time.Millisecond, o.WatchIdleCeiling)
	require.NotNil(t, o.Logger)
	require.NotNil(t, o.WallClock)

	o, err = Options{LeaseExpiry: time.Second}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, 200*time.Millisecond, o.HeartbeatInterval, "a fifth of the expiry")
}

func TestOptionsValidation(t *testing.T) {
	t.Parallel()
	bad := map[string]Options{
		"replica with slash":     {ReplicaID: "a/b"},
		"replica with hash":      {ReplicaID: "a#b"},
		"replica with spaces":    {ReplicaID: " a"},
		"nested key path":        {PartitionKey: "/a/b"},
		"key path without slash": {PartitionKey: "instanceId"},
		"key path collides":      {PartitionKey: "/owner"},
		"empty ranges":           {Ranges: []epk.Range{}},
		"empty range":            {Ranges: []epk.Range{{Min: "10", Max: "10"}}},
		"overlapping ranges":     {Ranges: []epk.Range{{Min: "", Max: "20"}, {Min: "10", Max: "FF"}}},
		"heartbeat too slow":     {LeaseExpiry: time.Second, HeartbeatInterval: 600 * time.Millisecond},
		"negative expiry":        {LeaseExpiry: -time.Second},
		"active above ceiling":   {WatchActiveDelay: time.Second, WatchIdleCeiling: time.Millisecond},
	}
	for name, o := range bad {
		_, err := o.withDefaults()
		require.Error(t, err, name)
	}
	_, err := New(nil, Options{})
	require.Error(t, err, "nil container")
}

func TestDocumentEncoding(t *testing.T) {
	t.Parallel()
	d := leaseDoc{ID: leaseID(3), Type: typeLease, Index: 3, Range: rangeDoc{Min: "10", Max: "20"}, Owner: "a", Epoch: 2, Rev: 5, Continuation: "tok"}
	raw, err := encodeDoc(d, "instanceId", "$leases")
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	require.Equal(t, "$leases", m["instanceId"])
	require.Equal(t, "lease:3", m["id"])
	got, err := decodeDoc(raw)
	require.NoError(t, err)
	require.NotNil(t, got.lease)
	require.Equal(t, d, *got.lease)

	o := ownerDoc{ID: ownerID("r1"), Type: typeOwner, Replica: "r1", Incarnation: "x", Seq: 7, State: stateLive}
	raw, err = encodeDoc(o, "pk", "$leases")
	require.NoError(t, err)
	got, err = decodeDoc(raw)
	require.NoError(t, err)
	require.NotNil(t, got.owner)
	require.Equal(t, o, *got.owner)

	got, err = decodeDoc([]byte(`{"id":"something","type":"other"}`))
	require.NoError(t, err)
	require.Nil(t, got.lease)
	require.Nil(t, got.owner)
}
