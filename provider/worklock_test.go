package provider

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/durable"
)

// workLockFixture is a provider of the given configuration on a fresh
// container with one worker item of instance "wl" enqueued (tag as
// given), and a recorder of the requests addressed to that instance's
// partition.
type workLockFixture struct {
	container string
	p         *Provider
	item      durable.ActivityExecute
	took      func() []keyedOp
}

func newWorkLockFixture(t *testing.T, name string, eventDriven bool, tag string) *workLockFixture {
	t.Helper()
	f := &workLockFixture{container: freshContainer(name),
		item: durable.ActivityExecute{Instance: "wl", ExecutionID: 1, ID: 3, Name: "A", Input: "{}", Tag: tag}}
	cfg := testConfig(f.container)
	if eventDriven {
		cfg = replicaConfig(f.container)
		cfg.joinEagerly = true
	}
	f.p = openProvider(t, cfg)
	require.NoError(t, f.p.EnqueueForWorker(context.Background(), f.item))
	if eventDriven {
		// The owner's feed has shown the item: its fetch starts from the
		// wakeup, not from a query.
		require.Eventually(t, func() bool {
			_, work := f.p.ev().Pending()
			return len(work.Pending) == 1
		}, hang, time.Millisecond)
	}
	f.took = middleware.record(f.container, f.item.Instance)
	return f
}

// ops returns the operations and statuses recorded since the last call.
func (f *workLockFixture) ops() []keyedOp {
	out := f.took()
	for i := range out {
		out[i].charge = 0
	}
	return out
}

// doc reads the item's document with the SDK alone.
func (f *workLockFixture) doc(t *testing.T) (map[string]any, bool) {
	t.Helper()
	pager := rawContainer(t, f.container).NewQueryItemsPager("SELECT * FROM c WHERE c.type = 'worker_queue'",
		azcosmos.NewPartitionKeyString(f.item.Instance), nil)
	var out []map[string]any
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		require.NoError(t, err)
		for _, it := range page.Items {
			var d map[string]any
			require.NoError(t, json.Unmarshal(it, &d))
			out = append(out, d)
		}
	}
	require.LessOrEqual(t, len(out), 1)
	if len(out) == 0 {
		return nil, false
	}
	return out[0], true
}

// completions counts the orchestrator messages of the instance.
func (f *workLockFixture) completions(t *testing.T) int {
	t.Helper()
	pager := rawContainer(t, f.container).NewQueryItemsPager("SELECT VALUE COUNT(1) FROM c WHERE c.type = 'orch_queue'",
		azcosmos.NewPartitionKeyString(f.item.Instance), nil)
	n := 0
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		require.NoError(t, err)
		for _, it := range page.Items {
			var c int
			require.NoError(t, json.Unmarshal(it, &c))
			n += c
		}
	}
	return n
}

// rawPatch patches the item's document with the SDK alone, as another
// writer would.
func (f *workLockFixture) rawPatch(t *testing.T, path string, value any) {
	t.Helper()
	d, ok := f.doc(t)
	require.True(t, ok)
	var pt azcosmos.PatchOperations
	pt.AppendSet(path, value)
	_, err := rawContainer(t, f.container).PatchItem(context.Background(), azcosmos.NewPartitionKeyString(f.item.Instance), d["id"].(string), pt, nil)
	require.NoError(t, err)
}

func (f *workLockFixture) completion() durable.WorkItem {
	return durable.ActivityCompleted{Instance: f.item.Instance, ExecutionID: f.item.ExecutionID, ID: f.item.ID, Result: "1"}
}

// TestWorkItemLockAndAckAreOneWriteEach: an event-driven fetch locks the
// item its wakeup names with one conditional patch, without reading it
// first, and the ack of a lock the store made itself is one batch, in
// either mode (polling finds the item with its query, then patches it).
func TestWorkItemLockAndAckAreOneWriteEach(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		eventDriven bool
		fetch       []keyedOp
	}{
		{"event-driven", true, []keyedOp{{op: cosmosemu.OpPatch, status: 200}}},
		{"polling", false, []keyedOp{{op: cosmosemu.OpPatch, status: 200}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newWorkLockFixture(t, "wl-one-"+tc.name, tc.eventDriven, "")
			ctx := context.Background()
			got, err := f.p.FetchWorkItem(ctx, time.Minute, time.Second, nil, durable.DefaultOnlyTags())
			require.NoError(t, err)
			require.NotNil(t, got)
			require.Equal(t, durable.WorkItem(f.item), got.Item)
			require.EqualValues(t, 1, got.AttemptCount)
			// The polling fetch's candidate query spans every partition
			// and is not recorded against the instance's.
			require.Equal(t, tc.fetch, f.ops(), "the fetch's requests to the item's partition")
			require.NoError(t, f.p.AckWorkItem(ctx, got.LockToken, f.completion()))
			require.Equal(t, []keyedOp{{op: cosmosemu.OpBatch, status: 200}}, f.ops(), "the ack's requests")
			_, ok := f.doc(t)
			require.False(t, ok, "the item is gone")
			require.Equal(t, 1, f.completions(t))
		})
	}
}

// TestWorkItemOfAnotherTagIsNotLocked: a wakeup whose item the fetch may
// not take (another tag) costs a refused conditional patch and a read,
// and changes nothing; a fetch that accepts the tag then locks it.
func TestWorkItemOfAnotherTagIsNotLocked(t *testing.T) {
	t.Parallel()
	f := newWorkLockFixture(t, "wl-tag", true, "gpu")
	ctx := context.Background()
	got, err := f.p.FetchWorkItem(ctx, time.Minute, 200*time.Millisecond, nil, durable.DefaultOnlyTags())
	require.NoError(t, err)
	require.Nil(t, got)
	// The join's scans may signal the item again: each wakeup costs a
	// refused patch and a read.
	ops := f.ops()
	require.NotEmpty(t, ops)
	require.Zero(t, len(ops)%2, "%v", ops)
	for i := 0; i < len(ops); i += 2 {
		require.Equal(t, []keyedOp{{op: cosmosemu.OpPatch, status: 412}, {op: cosmosemu.OpRead, status: 200}}, ops[i:i+2])
	}
	d, ok := f.doc(t)
	require.True(t, ok)
	require.EqualValues(t, 0, d["attemptCount"], "the refused patch changed nothing")
	require.Empty(t, d["lockToken"])
	f.ops()

	gpu, err := durable.OnlyTags("gpu")
	require.NoError(t, err)
	got, err = f.p.FetchWorkItem(ctx, time.Minute, time.Second, nil, gpu)
	require.NoError(t, err)
	require.NotNil(t, got)
	require.EqualValues(t, 1, got.AttemptCount)
	require.Equal(t, []keyedOp{{op: cosmosemu.OpPatch, status: 200}}, f.ops(), "locked in one request")
}

// TestAckAfterAnotherWriteDecidesOnTheItem: when the item changed since
// the store locked it, the ack's batch is refused on the version, and
// the ack reads the item: still locked by this token, it commits; taken
// over, it fails permanently and writes nothing.
func TestAckAfterAnotherWriteDecidesOnTheItem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		path  string
		value any
		ok    bool
	}{
		{"lock kept", "/note", "touched", true},
		{"lock taken", "/lockToken", "someone-else", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newWorkLockFixture(t, "wl-ack-"+tc.name[5:], true, "")
			ctx := context.Background()
			got, err := f.p.FetchWorkItem(ctx, time.Minute, time.Second, nil, durable.DefaultOnlyTags())
			require.NoError(t, err)
			require.NotNil(t, got)
			f.rawPatch(t, tc.path, tc.value)
			f.ops()
			err = f.p.AckWorkItem(ctx, got.LockToken, f.completion())
			// A refused transactional batch answers 207, its failing
			// operation 412.
			ops := f.ops()
			_, present := f.doc(t)
			if tc.ok {
				require.NoError(t, err)
				require.Equal(t, []keyedOp{{op: cosmosemu.OpBatch, status: 207}, {op: cosmosemu.OpRead, status: 200}, {op: cosmosemu.OpBatch, status: 200}}, ops)
				require.False(t, present)
				require.Equal(t, 1, f.completions(t))
				return
			}
			require.ErrorIs(t, err, durable.ErrPermanent)
			require.ErrorContains(t, err, "taken over")
			require.Equal(t, []keyedOp{{op: cosmosemu.OpBatch, status: 207}, {op: cosmosemu.OpRead, status: 200}}, ops)
			require.True(t, present, "nothing was written")
			require.Zero(t, f.completions(t))
		})
	}
}

// TestRenewedLockIsAckedInOneWrite: a renewal is one patch on the
// remembered version, and the ack that follows one batch on the renewed
// version.
func TestRenewedLockIsAckedInOneWrite(t *testing.T) {
	t.Parallel()
	f := newWorkLockFixture(t, "wl-renew", true, "")
	ctx := context.Background()
	got, err := f.p.FetchWorkItem(ctx, time.Minute, time.Second, nil, durable.DefaultOnlyTags())
	require.NoError(t, err)
	require.NotNil(t, got)
	f.ops()
	require.NoError(t, f.p.RenewWorkItemLock(ctx, got.LockToken, 2*time.Minute))
	require.Equal(t, []keyedOp{{op: cosmosemu.OpPatch, status: 200}}, f.ops())
	d, ok := f.doc(t)
	require.True(t, ok)
	require.Greater(t, d["lockedUntil"].(float64), float64(time.Now().Add(time.Minute+30*time.Second).UnixMilli()), "renewed")
	f.ops()
	require.NoError(t, f.p.AckWorkItem(ctx, got.LockToken, f.completion()))
	require.Equal(t, []keyedOp{{op: cosmosemu.OpBatch, status: 200}}, f.ops())
}
