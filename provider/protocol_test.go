package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/outbox"
	"github.com/durafeed/durafeed/slots"
)

const lockLong = 30 * time.Second

func ev(inst string, exec, id uint64, k history.EventKind) history.Event {
	return history.Event{EventID: id, InstanceID: inst, ExecutionID: exec, TimestampMS: 1, RuntimeVersion: "0.1.0", Kind: k}
}

// quietConfig is a test config whose reconciler stays out of the way.
func quietConfig(container string) testCfg {
	c := testConfig(container)
	c.ReconcileInterval, c.ReconcileAge = time.Hour, time.Hour
	return c
}

func mustFetchOrch(t *testing.T, p *Provider, lock time.Duration) *durable.OrchestrationItem {
	t.Helper()
	item, err := p.FetchOrchestrationItem(context.Background(), lock, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	return item
}

func createInstance(t *testing.T, p *Provider, inst, parent string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: inst, Orchestration: "O", Input: "{}", ExecutionID: 1, ParentInstance: parent}, 0))
	item := mustFetchOrch(t, p, lockLong)
	require.Equal(t, inst, item.Instance)
	require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{ev(inst, 1, 1, history.OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "{}"})},
		Metadata:     durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0", ParentInstanceID: parent}}))
}

// drainWork fetches and acks every visible work item, returning their ids.
func drainWork(t *testing.T, p *Provider) []uint64 {
	t.Helper()
	var ids []uint64
	for {
		w, err := p.FetchWorkItem(context.Background(), lockLong, 0, nil, durable.AnyTag())
		require.NoError(t, err)
		if w == nil {
			return ids
		}
		ids = append(ids, w.Item.(durable.ActivityExecute).ID)
		require.NoError(t, p.AckWorkItem(context.Background(), w.LockToken, nil))
	}
}

// bigTurn is a 250-event turn with 30 activities, a timer and a child start.
func bigTurn(inst string) durable.OrchestrationTurn {
	turn := durable.OrchestrationTurn{ExecutionID: 1, Metadata: durable.ExecutionMetadata{Status: durable.StatusRunning}}
	for id := uint64(2); id <= 251; id++ {
		turn.HistoryDelta = append(turn.HistoryDelta, ev(inst, 1, id, history.ActivityScheduled{Name: "A", Input: fmt.Sprint(id)}))
		if id <= 31 {
			turn.WorkerItems = append(turn.WorkerItems, durable.ActivityExecute{Instance: inst, ExecutionID: 1, ID: id, Name: "A", Input: "{}"})
		}
	}
	turn.OrchestratorItems = []durable.WorkItem{
		durable.TimerFired{Instance: inst, ExecutionID: 1, ID: 250, FireAtMS: uint64(time.Now().Add(time.Hour).UnixMilli())},
		durable.StartOrchestration{Instance: inst + "-child", Orchestration: "C", Input: "{}", ExecutionID: 1, ParentInstance: inst, ParentID: 251},
	}
	return turn
}

func countDocs(t *testing.T, container, instance, where string) int {
	t.Helper()
	cc := rawContainer(t, container)
	pager := cc.NewQueryItemsPager("SELECT c.id FROM c WHERE "+where, azcosmos.NewPartitionKeyString(instance), nil)
	n := 0
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		require.NoError(t, err)
		n += len(page.Items)
	}
	return n
}

// TestLargeTurnCutAtEveryBatch cuts a 250-event turn at every batch of its
// ack (staging, commit, publication) and checks that, after the retry,
// nothing is lost, duplicated or half visible.
func TestLargeTurnCutAtEveryBatch(t *testing.T) {
	const batches = 5 // 3 staging batches, the commit, 1 publication batch
	for k := 1; k <= batches+1; k++ {
		t.Run(fmt.Sprintf("cut_batch_%d", k), func(t *testing.T) {
			t.Parallel()
			container := fmt.Sprintf("large-turn-%d", k)
			p := openProvider(t, quietConfig(container))
			ctx := context.Background()
			inst := "big"
			createInstance(t, p, inst, "")
			require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: inst, Name: "go"}, 0))
			item := mustFetchOrch(t, p, lockLong)

			middleware.failNth(container, cosmosemu.OpBatch, k, 403)
			err := p.AckOrchestrationItem(ctx, item.LockToken, bigTurn(inst))
			fired := middleware.disarm(container)
			if k > batches {
				require.False(t, fired, "a clean ack runs %d batches", batches)
			}
			evs, rerr := p.Read(ctx, inst)
			require.NoError(t, rerr)
			committed := len(evs) == 251
			require.True(t, committed || len(evs) == 1, "history is all or nothing, got %d events", len(evs))
			if err != nil {
				require.False(t, committed, "a failed ack committed nothing")
				require.Empty(t, drainWork(t, p), "no activity of an uncommitted turn is visible")
				require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, bigTurn(inst)), "the retry commits")
			} else {
				require.True(t, committed)
			}
			// A later fetch of the instance finishes any publication first.
			require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: inst, Name: "next"}, 0))
			var next, child *durable.OrchestrationItem
			for next == nil {
				it := mustFetchOrch(t, p, lockLong)
				if it.Instance == inst {
					next = it
				} else {
					require.Nil(t, child, "one other instance only")
					child = it
				}
			}
			require.Empty(t, next.HistoryError)
			require.Len(t, next.History, 251)
			for i, e := range next.History {
				require.Equal(t, uint64(i+1), e.EventID)
			}
			require.Len(t, next.Messages, 1, "the turn's own message was consumed exactly once")
			ids := drainWork(t, p)
			require.Len(t, ids, 30, "every activity exactly once")
			seen := map[uint64]bool{}
			for _, id := range ids {
				require.False(t, seen[id])
				seen[id] = true
			}
			require.Equal(t, 0, countDocs(t, container, inst, "c.type = 'staged'"), "nothing left staged")
			require.NoError(t, p.AckOrchestrationItem(ctx, next.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
				HistoryDelta: []history.Event{ev(inst, 1, 252, history.ExternalEvent{Name: "next"})}}))
			// The child start is delivered exactly once.
			if child == nil {
				child = mustFetchOrch(t, p, lockLong)
			}
			require.Equal(t, inst+"-child", child.Instance)
			require.Len(t, child.Messages, 1)
		})
	}
}

// TestLargeTurnAbandonedStagingIsDiscarded: a large ack dies while staging
// and its lock expires; the next fetch discards the staged documents.
func TestLargeTurnAbandonedStagingIsDiscarded(t *testing.T) {
	container := freshContainer("large-turn-abandoned")
	p := openProvider(t, quietConfig(container))
	ctx := context.Background()
	inst := "big"
	createInstance(t, p, inst, "")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: inst, Name: "go"}, 0))
	item := mustFetchOrch(t, p, 300*time.Millisecond)
	middleware.failNth(container, cosmosemu.OpBatch, 3, 403)
	require.Error(t, p.AckOrchestrationItem(ctx, item.LockToken, bigTurn(inst)))
	require.True(t, middleware.disarm(container))
	require.Greater(t, countDocs(t, container, inst, "IS_DEFINED(c.stagedBy)"), 0)
	time.Sleep(400 * time.Millisecond) // lock expiry is what is under test
	again := mustFetchOrch(t, p, lockLong)
	require.Len(t, again.History, 1, "the staged events never became visible")
	require.Equal(t, 0, countDocs(t, container, inst, "IS_DEFINED(c.stagedBy)"), "staged documents were discarded")
	require.NoError(t, p.AckOrchestrationItem(ctx, again.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{ev(inst, 1, 2, history.ExternalEvent{Name: "go"})}}), "event 2 is free again")
}

// TestDeletionInterruptedAtEveryPhase interrupts a cascading deletion in
// the mark phase and at each purge step, then checks that the interrupted
// state is invisible or intact, and that a retry finishes it.
func TestDeletionInterruptedAtEveryPhase(t *testing.T) {
	cases := []struct {
		name string
		op   cosmosemu.OperationType
		nth  int
		// marked says whether the failure leaves the instances marked
		// (deleted as far as readers know) rather than intact.
		marked bool
	}{
		{"mark_second_instance", cosmosemu.OpPatch, 2, false},
		{"purge_first_partition", cosmosemu.OpBatch, 1, true},
		{"purge_first_instance_document", cosmosemu.OpDelete, 1, true},
		{"purge_second_partition", cosmosemu.OpBatch, 2, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			container := freshContainer("del-" + tc.name)
			container = container[:min(len(container), 40)]
			p := openProvider(t, quietConfig(container))
			ctx := context.Background()
			createInstance(t, p, "root", "")
			createInstance(t, p, "leaf", "root")
			require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: "root", Name: "x"}, 0))
			require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: "leaf", Name: "x"}, 0))

			middleware.failNth(container, tc.op, tc.nth, 403)
			_, err := p.DeleteInstancesAtomic(ctx, []string{"leaf", "root"}, true)
			require.Error(t, err)
			require.True(t, middleware.disarm(container))
			list, lerr := p.ListInstances(ctx)
			require.NoError(t, lerr)
			if tc.marked {
				require.Empty(t, list, "a marked instance is deleted as far as readers know")
				_, ierr := p.GetInstanceInfo(ctx, "root")
				require.ErrorIs(t, ierr, durable.ErrPermanent)
				item, ferr := p.FetchOrchestrationItem(ctx, lockLong, 0, nil)
				require.NoError(t, ferr)
				require.Nil(t, item, "a marked instance is never fetched")
			} else {
				require.ElementsMatch(t, []string{"root", "leaf"}, list, "an aborted mark leaves everything intact")
				evs, _ := p.Read(ctx, "root")
				require.Len(t, evs, 1)
			}
			res, err := p.DeleteInstancesAtomic(ctx, []string{"leaf", "root"}, true)
			require.NoError(t, err)
			if !tc.marked {
				require.Equal(t, uint64(2), res.InstancesDeleted)
				require.Equal(t, uint64(2), res.EventsDeleted)
			}
			for _, inst := range []string{"root", "leaf"} {
				require.Equal(t, 0, countDocs(t, container, inst, "true"), "partition %s is empty", inst)
			}
		})
	}
}

// TestOutboxDeliveredOnceAfterFailure fails the delivery that follows a
// commit; the reconciler delivers the intent exactly once.
func TestOutboxDeliveredOnceAfterFailure(t *testing.T) {
	container := freshContainer("outbox-retry")
	cfg := testConfig(container)
	cfg.ReconcileInterval, cfg.ReconcileAge = 50*time.Millisecond, 50*time.Millisecond
	p := openProvider(t, cfg)
	ctx := context.Background()
	createInstance(t, p, "parent", "")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: "parent", Name: "go"}, 0))
	item := mustFetchOrch(t, p, lockLong)
	middleware.failNth(container, cosmosemu.OpCreate, 1, 403)
	require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta:      []history.Event{ev("parent", 1, 2, history.SubOrchestrationScheduled{Name: "C", Instance: "child", Input: "{}"})},
		OrchestratorItems: []durable.WorkItem{durable.StartOrchestration{Instance: "child", Orchestration: "C", Input: "{}", ExecutionID: 1, ParentInstance: "parent", ParentID: 2}}}))
	require.True(t, middleware.disarm(container), "the delivery failed")
	require.Equal(t, 1, countDocs(t, container, "parent", "c.type = 'outbox_intent'"), "the intent waits for the reconciler")
	var child *durable.OrchestrationItem
	require.Eventually(t, func() bool {
		var err error
		child, err = p.FetchOrchestrationItem(ctx, lockLong, 0, nil)
		require.NoError(t, err)
		return child != nil
	}, hang, 20*time.Millisecond)
	require.Equal(t, "child", child.Instance)
	require.Len(t, child.Messages, 1)
	require.Eventually(t, func() bool { return countDocs(t, container, "parent", "c.type = 'outbox_intent'") == 0 }, hang, 20*time.Millisecond)
	// A second delivery of the same intent is absorbed by its deterministic id.
	var in outbox.Intent
	in.InstanceID, in.TargetInstance, in.ID = "parent", "child", "intent:none"
	wi, _ := durable.MarshalWorkItem(durable.ExternalRaised{Instance: "child", Name: "dup"})
	b, _ := json.Marshal(map[string]any{"id": "outbox:parent|1|nonce|1", "instanceId": "child", "type": "orch_queue",
		"workItem": string(wi), "dispatchSlot": slots.Of("child"), "visibleAt": time.Now().UnixMilli(), "enqueuedAt": time.Now().UnixMilli(),
		"lockedUntil": 0, "attemptCount": 0, "sessionId": "", "tag": ""})
	in.Payload = string(b)
	out := outbox.New(p.s, nil)
	for range 2 {
		_, err := out.Deliver(ctx, in)
		require.NoError(t, err)
	}
	require.Equal(t, 2, countDocs(t, container, "child", "c.type = 'orch_queue'"), "start + one dup message")
}

// TestConsumedOutboxTargetIsNotCreatedAgain: a message an outbox intent
// delivered and the target's turn consumed is not created again by a
// second delivery of the same intent (a resend after a lost answer, the
// repair pass, the committer and the slot's owner both delivering): the
// turn leaves a tombstone under the message's id, which expires with the
// request retention, and the second create finds it.
func TestConsumedOutboxTargetIsNotCreatedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	container := freshContainer("tombstone")
	p := openProvider(t, quietConfig(container))
	createInstance(t, p, "src", "")
	createInstance(t, p, "dst", "")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: "src", Name: "go"}, 0))
	item := mustFetchOrch(t, p, lockLong)
	require.Equal(t, "src", item.Instance)
	c, err := p.s.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta:      []history.Event{ev("src", 1, 2, history.ExternalEvent{Name: "go"})},
		OrchestratorItems: []durable.WorkItem{durable.ExternalRaised{Instance: "dst", Name: "ping", Data: "1"}}})
	require.NoError(t, err)
	require.Len(t, c.Intents, 1, "the event to another instance is an intent")
	in := c.Intents[0]
	ob := outbox.New(p.s, nil)
	_, err = ob.Deliver(ctx, in)
	require.NoError(t, err)

	got := mustFetchOrch(t, p, lockLong)
	require.Equal(t, "dst", got.Instance)
	require.Len(t, got.Messages, 1)
	require.NoError(t, p.AckOrchestrationItem(ctx, got.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{ev("dst", 1, 2, history.ExternalEvent{Name: "ping", Data: "1"})}}))
	require.Equal(t, 1, countDocs(t, container, "dst", "c.type = 'outbox_tombstone'"), "the consumed target's tombstone")
	pager := rawContainer(t, container).NewQueryItemsPager("SELECT VALUE c.ttl FROM c WHERE c.type = 'outbox_tombstone'", azcosmos.NewPartitionKeyString("dst"), nil)
	page, err := pager.NextPage(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"86400"}, func() (out []string) {
		for _, b := range page.Items {
			out = append(out, string(b))
		}
		return out
	}(), "it expires with the request retention (24 h)")

	// The same intent again, after its target was consumed.
	_, err = ob.Deliver(ctx, in)
	require.NoError(t, err)
	require.Zero(t, countDocs(t, container, "dst", "c.type = 'orch_queue'"), "no second message")
	again, err := p.FetchOrchestrationItem(ctx, lockLong, 0, nil)
	require.NoError(t, err)
	require.Nil(t, again, "nothing to run")
	depths, err := p.GetQueueDepths(ctx)
	require.NoError(t, err)
	require.Zero(t, depths.OrchestratorQueue, "a tombstone is no queued message")
}
