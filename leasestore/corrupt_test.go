package leasestore

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/changefeed"
)

// corruptHang bounds a wait on an event of the corruption tests: long
// enough that only a hang reaches it on a loaded machine.
const corruptHang = 2 * time.Minute

// heldLease returns a lease n holds now (one delivered on Acquired whose
// Done is still open).
func heldLease(t *testing.T, n *node) changefeed.Lease {
	t.Helper()
	for {
		select {
		case l := <-n.leases:
			select {
			case <-l.Done():
				continue
			default:
				return l
			}
		case <-time.After(corruptHang):
			require.FailNow(t, "no held lease", "%s holds no lease", n.name)
		}
	}
}

// replaceRaw replaces the document id of the lease partition with body
// (the partition key property added), as an operator's hand would.
func replaceRaw(t *testing.T, c *azcosmos.ContainerClient, id string, body map[string]any) {
	t.Helper()
	body["id"], body["instanceId"] = id, DefaultPartitionKeyValue
	b, err := json.Marshal(body)
	require.NoError(t, err)
	_, err = c.ReplaceItem(context.Background(), azcosmos.NewPartitionKeyString(DefaultPartitionKeyValue), id, b, nil)
	require.NoError(t, err)
}

func deleteRaw(t *testing.T, c *azcosmos.ContainerClient, id string) {
	t.Helper()
	_, err := c.DeleteItem(context.Background(), azcosmos.NewPartitionKeyString(DefaultPartitionKeyValue), id, nil)
	require.NoError(t, err)
}

// requireRunning checks that no Run of ns has returned.
func requireRunning(t *testing.T, ns ...*node) {
	t.Helper()
	for _, n := range ns {
		require.Empty(t, n.done, "%s: Run returned", n.name)
	}
}

// TestCorruptLeaseDocument: a lease document edited by hand into
// something that is not a lease (an owner that is a number and no range;
// no index and no range; fields of the wrong types) or deleted, while two
// replicas hold the leases. The holder's next checkpoint (the lease's
// next write) finds the lease lost instead of failing forever; the
// document is repaired (rewritten as a free lease over its configured
// range with the last known continuation, or re-created as a lease never
// read, with a higher epoch either way) and acquired again; both replicas
// keep running, every lease ends held exactly once, and no lease ever had
// two holders.
func TestCorruptLeaseDocument(t *testing.T) {
	cases := []struct {
		name    string
		corrupt func(t *testing.T, c *azcosmos.ContainerClient, d leaseDoc)
	}{
		{"owner-number-no-range", func(t *testing.T, c *azcosmos.ContainerClient, d leaseDoc) {
			replaceRaw(t, c, d.ID, map[string]any{"type": "lease", "index": d.Index, "owner": 42, "epoch": d.Epoch, "rev": d.Rev + 1})
		}},
		{"no-index-no-range", func(t *testing.T, c *azcosmos.ContainerClient, d leaseDoc) {
			replaceRaw(t, c, d.ID, map[string]any{"type": "lease", "owner": d.Owner, "epoch": d.Epoch, "rev": d.Rev + 1})
		}},
		{"wrong-types", func(t *testing.T, c *azcosmos.ContainerClient, d leaseDoc) {
			replaceRaw(t, c, d.ID, map[string]any{"type": "lease", "index": "three", "range": "all", "epoch": "x", "continuation": 7})
		}},
		{"deleted", func(t *testing.T, c *azcosmos.ContainerClient, d leaseDoc) { deleteRaw(t, c, d.ID) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := context.Background()
			a := e.start("a", relaxed)
			b := e.start("b", relaxed)
			e.log.waitFor(t, corruptHang, "two-way balance", balanced(16, names(a, b)...))
			l := heldLease(t, a)
			i := idxOf(l)
			require.NoError(t, l.Checkpoint(ctx, "c1"))
			cl := e.container(nil)
			before, _ := readLease(t, cl, i)

			tc.corrupt(t, cl, before)
			err := l.Checkpoint(ctx, "c2")
			require.ErrorIs(t, err, changefeed.ErrLeaseLost, "the holder learns it lost the lease: %v", err)
			requireClosed(t, l.Done())

			e.log.waitFor(t, corruptHang, "every lease held again", balanced(16, names(a, b)...))
			var after leaseDoc
			require.Eventually(t, func() bool {
				resp, err := cl.ReadItem(ctx, azcosmos.NewPartitionKeyString(DefaultPartitionKeyValue), leaseID(i), nil)
				require.NoError(t, err)
				d, err := decodeDoc(resp.Value)
				if err != nil || d.lease == nil || d.lease.Owner == "" {
					return false
				}
				after = *d.lease
				return true
			}, corruptHang, 5*time.Millisecond, "lease %d repaired and owned", i)
			require.Equal(t, before.Range, after.Range, "the configured range is restored")
			if tc.name == "deleted" {
				require.Empty(t, after.Continuation, "a re-created lease starts afresh")
			} else {
				require.Equal(t, "c1", after.Continuation, "the last checkpoint is kept")
			}
			require.Greater(t, after.Epoch, before.Epoch)
			require.Contains(t, []string{"a", "b"}, after.Owner)
			requireRunning(t, a, b)
			checkNoOverlap(t, e.log.snapshot())
		})
	}
}

// TestCorruptHeartbeatDeleted: the heartbeat document of a running
// replica is deleted by hand. The replica notices at its next heartbeat
// (a death declaration by deletion): it gives up its leases at once,
// registers anew and gets its share back; the other replica may take
// some of them meanwhile. Both keep running, every lease ends held
// exactly once, and no lease ever had two holders.
func TestCorruptHeartbeatDeleted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.start("a", relaxed)
	b := e.start("b", relaxed)
	e.log.waitFor(t, corruptHang, "two-way balance", balanced(16, names(a, b)...))
	cl := e.container(nil)
	deleteRaw(t, cl, ownerID("b"))

	require.Eventually(t, func() bool {
		for _, en := range e.log.snapshot() {
			if en.instance == b.name && en.ev.Kind == EventLost && en.ev.Reason == ReasonExpired {
				return true
			}
		}
		return false
	}, corruptHang, 5*time.Millisecond, "b gives up its leases")
	e.log.waitFor(t, corruptHang, "every lease held again by both", balanced(16, names(a, b)...))
	resp, err := cl.ReadItem(context.Background(), azcosmos.NewPartitionKeyString(DefaultPartitionKeyValue), ownerID("b"), nil)
	require.NoError(t, err, "b registered anew")
	d, err := decodeDoc(resp.Value)
	require.NoError(t, err)
	require.Equal(t, stateLive, d.owner.State)
	requireRunning(t, a, b)
	checkNoOverlap(t, e.log.snapshot())
}

// TestCorruptLeaseOfDeadReplica: a replica crashes, and a lease document
// naming it is then corrupted by hand (or deleted). The survivor's
// take-over of that lease fails its compare-and-swap, which repairs the
// document; the survivor ends up holding every lease.
func TestCorruptLeaseOfDeadReplica(t *testing.T) {
	for _, deleted := range []bool{false, true} {
		t.Run("deleted="+strconv.FormatBool(deleted), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			a := e.start("a", relaxed)
			b := e.start("b", relaxed)
			e.log.waitFor(t, corruptHang, "two-way balance", balanced(16, names(a, b)...))
			i := idxOf(heldLease(t, b))
			b.stop()
			cl := e.container(nil)
			if deleted {
				deleteRaw(t, cl, leaseID(i))
			} else {
				d, _ := readLease(t, cl, i)
				replaceRaw(t, cl, d.ID, map[string]any{"type": "lease", "index": i, "owner": []string{"b"}, "epoch": d.Epoch, "rev": d.Rev + 1})
			}
			e.log.waitFor(t, corruptHang, "a holds every lease", balanced(16, a.name))
			d, _ := readLease(t, cl, i)
			require.Equal(t, "a", d.Owner)
			requireRunning(t, a)
			checkNoOverlap(t, e.log.snapshot())
		})
	}
}
