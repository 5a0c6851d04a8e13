package conformance

import (
	"errors"
	"slices"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// cancellationScenarios checks activity cancellation by lock stealing and
// the worker-queue behaviour it relies on:
//
//   - fetching and renewing a worker item never depends on the state of its
//     orchestration (running, completed, failed, continued-as-new or missing):
//     the provider does not interpret instance state for the worker queue;
//   - the CancelledActivities of an ack delete exactly the matching worker
//     items (instance, execution and activity id), several at once, and
//     ignore entries that match nothing (unknown or already acked);
//   - WorkerItems are enqueued before CancelledActivities are removed, so an
//     activity scheduled and cancelled in the same turn leaves nothing;
//   - a worker whose item was deleted (by cancellation or by its own ack)
//     learns it from a permanent error on renew and on ack, and its late
//     completion is not enqueued;
//   - AckWorkItem with no completion deletes the item and enqueues nothing;
//   - force-deleting an instance leaves the worker queue usable.
func cancellationScenarios() []Scenario {
	return []Scenario{
		{"fetch_returns_running_state_for_active_orchestration", func(h *H) {
			cancellationFetchWhatever(h, "", nil, "")
		}},
		{"fetch_returns_terminal_state_when_orchestration_completed", func(h *H) {
			cancellationFetchWhatever(h, durable.StatusCompleted, history.OrchestrationCompleted{Output: "done"}, "done")
		}},
		{"fetch_returns_terminal_state_when_orchestration_failed", func(h *H) {
			details := history.ApplicationError(history.AppOrchestrationFailed, "boom", false)
			cancellationFetchWhatever(h, durable.StatusFailed, history.OrchestrationFailed{Details: details}, details.DisplayMessage())
		}},
		{"fetch_returns_terminal_state_when_orchestration_continued_as_new", func(h *H) {
			cancellationFetchWhatever(h, durable.StatusContinuedAsNew, history.OrchestrationContinuedAsNew{Input: "new-input"}, "new-input")
		}},
		{"fetch_returns_missing_state_when_instance_deleted", func(h *H) {
			inst := h.ID("inst-missing")
			require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, cancellationActivity(inst, 1, 1, "TestActivity")))

			w := h.MustFetchWork(h.P, LongLock)
			cancellationRequireActivity(h, w, inst, 1, 1)
			// Fetching the worker item does not create the instance.
			stats, err := h.P.GetInstanceStats(h.Ctx, inst)
			require.NoError(h.T, err)
			require.Nil(h.T, stats, "fetching a worker item must not create its instance")
		}},
		{"renew_returns_running_when_orchestration_active", func(h *H) {
			inst := h.ID("inst-renew-run")
			cancellationStart(h, inst, cancellationActivity(inst, 1, 2, "TestActivity"))
			w := h.MustFetchWork(h.P, LongLock)
			cancellationRequireActivity(h, w, inst, 1, 2)

			require.NoError(h.T, h.P.RenewWorkItemLock(h.Ctx, w.LockToken, LongLock))
			h.NoWork(h.P) // still locked after the renew
			require.NoError(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken, nil), "the renewed lock must still be valid")
			h.NoWork(h.P)
		}},
		{"renew_returns_terminal_when_orchestration_completed", func(h *H) {
			inst := h.ID("inst-renew-term")
			cancellationStart(h, inst, cancellationActivity(inst, 1, 2, "TestActivity"))
			w := h.MustFetchWork(h.P, LongLock)
			cancellationRequireActivity(h, w, inst, 1, 2)

			// Another turn completes the orchestration while the activity runs,
			// without cancelling it.
			out := "done"
			cancellationTurn(h, inst, durable.OrchestrationTurn{
				ExecutionID:  1,
				HistoryDelta: []history.Event{Event(inst, 1, 3, history.OrchestrationCompleted{Output: out})},
				Metadata:     durable.ExecutionMetadata{Status: durable.StatusCompleted, Output: &out},
			})

			// The provider does not interpret the instance's state: renew
			// still works, and so does the late completion.
			require.NoError(h.T, h.P.RenewWorkItemLock(h.Ctx, w.LockToken, LongLock))
			h.NoWork(h.P)
			completion := durable.ActivityCompleted{Instance: inst, ExecutionID: 1, ID: 2, Result: "late"}
			require.NoError(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken, completion))
			item := h.MustFetchOrch(h.P, LongLock)
			require.Equal(h.T, inst, item.Instance)
			require.Equal(h.T, []durable.WorkItem{completion}, item.Messages)
		}},
		{"renew_returns_missing_when_instance_deleted", func(h *H) {
			// The instance never existed (as in duroxide's scenario): only
			// its activity does.
			inst := h.ID("inst-renew-missing")
			require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, cancellationActivity(inst, 1, 1, "TestActivity")))
			if a, ok := h.P.Admin(); ok {
				_, err := a.GetInstanceInfo(h.Ctx, inst)
				require.ErrorIs(h.T, err, durable.ErrPermanent, "the instance is missing")
			}
			w := h.MustFetchWork(h.P, LongLock)
			cancellationRequireActivity(h, w, inst, 1, 1)

			require.NoError(h.T, h.P.RenewWorkItemLock(h.Ctx, w.LockToken, LongLock),
				"renewing an activity of an instance that does not exist must succeed")
			h.NoWork(h.P)
			require.NoError(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken, nil))
			h.NoWork(h.P)
		}},
		{"ack_work_item_none_deletes_without_enqueue", func(h *H) {
			inst := h.ID("inst-ack-none")
			require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, cancellationActivity(inst, 1, 1, "TestActivity")))
			w := h.MustFetchWork(h.P, LongLock)
			require.NoError(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken, nil))

			h.NoOrchOrWork(h.P)
			if a, ok := h.P.Admin(); ok {
				d, err := a.GetQueueDepths(h.Ctx)
				require.NoError(h.T, err)
				require.Equal(h.T, durable.QueueDepths{}, d, "ack with no completion must leave both queues empty")
			}
		}},
		{"cancelled_activities_deleted_from_worker_queue", func(h *H) {
			inst := h.ID("inst-cancel-delete")
			cancellationStart(h, inst,
				cancellationActivity(inst, 1, 2, "Activity1"),
				cancellationActivity(inst, 1, 3, "Activity2"),
				cancellationActivity(inst, 1, 4, "Activity3"))

			// The activities are on the worker queue: lock one and put it back.
			w := h.MustFetchWork(h.P, LongLock)
			require.Equal(h.T, inst, w.Item.TargetInstance())
			require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, w.LockToken, 0, false))

			cancellationTurn(h, inst, durable.OrchestrationTurn{
				ExecutionID: 1,
				HistoryDelta: []history.Event{
					cancellationCancelRequested(inst, 5, 2),
					cancellationCancelRequested(inst, 6, 3),
				},
				CancelledActivities: []durable.ScheduledActivityIdentifier{
					{Instance: inst, ExecutionID: 1, ActivityID: 2},
					{Instance: inst, ExecutionID: 1, ActivityID: 3},
				},
			})

			w = h.MustFetchWork(h.P, LongLock)
			cancellationRequireActivity(h, w, inst, 1, 4)
			h.NoWork(h.P)
		}},
		{"ack_work_item_fails_when_entry_deleted", func(h *H) {
			inst := h.ID("inst-ack-stolen")
			require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, cancellationActivity(inst, 1, 1, "TestActivity")))
			w := h.MustFetchWork(h.P, LongLock)
			require.NoError(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken, nil))

			err := h.P.AckWorkItem(h.Ctx, w.LockToken, durable.ActivityCompleted{Instance: inst, ExecutionID: 1, ID: 1, Result: "done"})
			require.Error(h.T, err, "ack of a deleted work item must fail")
			require.True(h.T, errors.Is(err, durable.ErrPermanent), "ack of a deleted work item must fail permanently, got %v", err)
			h.NoOrch(h.P) // the failed ack enqueued no completion
		}},
		{"renew_fails_when_entry_deleted", func(h *H) {
			inst := h.ID("inst-renew-stolen")
			require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, cancellationActivity(inst, 1, 1, "TestActivity")))
			w := h.MustFetchWork(h.P, LongLock)
			require.NoError(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken, nil))

			err := h.P.RenewWorkItemLock(h.Ctx, w.LockToken, LongLock)
			require.Error(h.T, err, "renew of a deleted work item must fail")
			require.True(h.T, errors.Is(err, durable.ErrPermanent), "renew of a deleted work item must fail permanently, got %v", err)
		}},
		{"cancelling_nonexistent_activities_is_idempotent", func(h *H) {
			inst := h.ID("inst-cancel-idempotent")
			h.Enqueue(h.P, StartItem(inst))
			item := h.MustFetchOrch(h.P, LongLock)
			require.Equal(h.T, inst, item.Instance)

			// Neither cancelled activity exists; the activity scheduled in
			// the same turn under another id must survive.
			require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
				ExecutionID:  1,
				HistoryDelta: []history.Event{Started(inst, 1), cancellationScheduled(inst, 2, "Survivor")},
				WorkerItems:  []durable.WorkItem{cancellationActivity(inst, 1, 2, "Survivor")},
				Metadata:     StartedMetadata(),
				CancelledActivities: []durable.ScheduledActivityIdentifier{
					{Instance: inst, ExecutionID: 1, ActivityID: 999},
					{Instance: inst, ExecutionID: 1, ActivityID: 1},
				},
			}), "cancelling activities that are not queued must not fail the ack")

			hist, err := h.P.Read(h.Ctx, inst)
			require.NoError(h.T, err)
			require.Len(h.T, hist, 2, "the ack must have committed")
			w := h.MustFetchWork(h.P, LongLock)
			cancellationRequireActivity(h, w, inst, 1, 2)
			h.NoWork(h.P)
		}},
		{"batch_cancellation_deletes_multiple_activities", func(h *H) {
			inst := h.ID("inst-batch-cancel")
			var acts []durable.ActivityExecute
			var cancels []durable.ScheduledActivityIdentifier
			for id := uint64(2); id <= 6; id++ {
				acts = append(acts, cancellationActivity(inst, 1, id, "Activity"))
				cancels = append(cancels, durable.ScheduledActivityIdentifier{Instance: inst, ExecutionID: 1, ActivityID: id})
			}
			cancellationStart(h, inst, acts...)
			// The activities are on the worker queue, fetchable: lock them
			// all and put them back, so that the absence below is the
			// cancellation's doing.
			var queued, fetched []durable.WorkItem
			var tokens []string
			for _, a := range acts {
				queued = append(queued, a)
				w := h.MustFetchWork(h.P, LongLock)
				fetched = append(fetched, w.Item)
				tokens = append(tokens, w.LockToken)
			}
			require.ElementsMatch(h.T, queued, fetched)
			for _, tok := range tokens {
				require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, tok, 0, true))
			}

			cancellationTurn(h, inst, durable.OrchestrationTurn{ExecutionID: 1, CancelledActivities: cancels})

			h.NoWork(h.P)
			if a, ok := h.P.Admin(); ok {
				d, err := a.GetQueueDepths(h.Ctx)
				require.NoError(h.T, err)
				require.Zero(h.T, d.WorkerQueue, "every cancelled activity must be gone from the worker queue")
			}
		}},
		{"same_activity_in_worker_items_and_cancelled_is_noop", func(h *H) {
			inst := h.ID("inst-schedule-then-cancel")
			h.Enqueue(h.P, StartItem(inst))
			item := h.MustFetchOrch(h.P, LongLock)
			require.Equal(h.T, inst, item.Instance)

			require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
				ExecutionID: 1,
				HistoryDelta: []history.Event{Started(inst, 1),
					cancellationScheduled(inst, 2, "DroppedActivity"), cancellationScheduled(inst, 3, "NormalActivity")},
				WorkerItems: []durable.WorkItem{
					cancellationActivity(inst, 1, 2, "DroppedActivity"),
					cancellationActivity(inst, 1, 3, "NormalActivity"),
				},
				Metadata:            StartedMetadata(),
				CancelledActivities: []durable.ScheduledActivityIdentifier{{Instance: inst, ExecutionID: 1, ActivityID: 2}},
			}))

			w := h.MustFetchWork(h.P, LongLock)
			cancellationRequireActivity(h, w, inst, 1, 3)
			require.Equal(h.T, "NormalActivity", w.Item.(durable.ActivityExecute).Name)
			require.NoError(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken, nil))
			h.NoWork(h.P) // the scheduled-and-cancelled activity was never left behind
		}},
		{"orphan_activity_after_instance_force_deletion", func(h *H) {
			inst := h.ID("inst-orphan-activity")
			cancellationStart(h, inst, cancellationActivity(inst, 1, 2, "TestActivity"))
			admin := h.Admin()

			res, err := admin.DeleteInstance(h.Ctx, inst, true)
			require.NoError(h.T, err)
			require.GreaterOrEqual(h.T, res.InstancesDeleted, uint64(1))
			_, err = admin.GetInstanceInfo(h.Ctx, inst)
			require.True(h.T, errors.Is(err, durable.ErrPermanent), "deleted instance must be unknown, got %v", err)

			// The activity may or may not have been deleted with the
			// instance; if it survived, running it to completion is harmless.
			w, err := h.P.FetchWorkItem(h.Ctx, LongLock, 0, nil, durable.AnyTag())
			require.NoError(h.T, err)
			if w == nil {
				// Deleted with the instance, not merely hidden: no worker
				// item is left anywhere.
				d, err := admin.GetQueueDepths(h.Ctx)
				require.NoError(h.T, err)
				require.Zero(h.T, d.WorkerQueue, "the orphan activity is gone")
			}
			if w != nil {
				cancellationRequireActivity(h, w, inst, 1, 2)
				require.NoError(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken,
					durable.ActivityCompleted{Instance: inst, ExecutionID: 1, ID: 2, Result: "orphan-result"}))
				h.NoWork(h.P)
				_, err = admin.GetInstanceInfo(h.Ctx, inst)
				require.True(h.T, errors.Is(err, durable.ErrPermanent),
					"an orphaned completion must not recreate the instance, got %v", err)
			}
		}},
		{"in_flight_activity_cancelled_by_lock_stealing", func(h *H) {
			inst := h.ID("inst-steal")
			cancellationStart(h, inst, cancellationActivity(inst, 1, 2, "LongRunning"))
			w := h.MustFetchWork(h.P, LongLock)
			cancellationRequireActivity(h, w, inst, 1, 2)

			// The orchestration cancels the activity while a worker holds it.
			cancellationTurn(h, inst, durable.OrchestrationTurn{
				ExecutionID:         1,
				HistoryDelta:        []history.Event{cancellationCancelRequested(inst, 3, 2)},
				CancelledActivities: []durable.ScheduledActivityIdentifier{{Instance: inst, ExecutionID: 1, ActivityID: 2}},
			})

			// The worker's next renew tells it, permanently.
			err := h.P.RenewWorkItemLock(h.Ctx, w.LockToken, LongLock)
			require.True(h.T, errors.Is(err, durable.ErrPermanent), "renew of a cancelled activity must fail permanently, got %v", err)
			err = h.P.AckWorkItem(h.Ctx, w.LockToken, durable.ActivityCompleted{Instance: inst, ExecutionID: 1, ID: 2, Result: "too late"})
			require.True(h.T, errors.Is(err, durable.ErrPermanent), "ack of a cancelled activity must fail permanently, got %v", err)
			h.NoOrchOrWork(h.P) // the late completion was not enqueued, and the activity is gone
		}},
		{"cancelled_activities_match_instance_execution_and_id", func(h *H) {
			a, b := h.ID("inst-cancel-a"), h.ID("inst-cancel-b")
			cancellationStart(h, a, cancellationActivity(a, 1, 2, "A2"), cancellationActivity(a, 1, 3, "A3"))
			cancellationStart(h, b, cancellationActivity(b, 1, 2, "B2"))
			// A stale item of another execution of a, with the same activity id.
			require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, cancellationActivity(a, 2, 2, "A-exec2")))

			cancellationTurn(h, a, durable.OrchestrationTurn{
				ExecutionID:         1,
				HistoryDelta:        []history.Event{cancellationCancelRequested(a, 4, 2)},
				CancelledActivities: []durable.ScheduledActivityIdentifier{{Instance: a, ExecutionID: 1, ActivityID: 2}},
			})

			var got []string
			for range 3 {
				w := h.MustFetchWork(h.P, LongLock)
				got = append(got, w.Item.(durable.ActivityExecute).Name)
			}
			slices.Sort(got)
			require.Equal(h.T, []string{"A-exec2", "A3", "B2"}, got,
				"only the activity matching instance, execution and id may be cancelled")
			h.NoWork(h.P)
		}},
		{"cancelling_acked_activity_is_not_an_error", func(h *H) {
			inst := h.ID("inst-cancel-acked")
			cancellationStart(h, inst, cancellationActivity(inst, 1, 2, "Quick"))
			w := h.MustFetchWork(h.P, LongLock)
			completion := durable.ActivityCompleted{Instance: inst, ExecutionID: 1, ID: 2, Result: "r"}
			require.NoError(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken, completion))

			// The orchestration cancels the activity in the turn that receives
			// its completion (for example it lost a race): nothing to delete.
			item := h.MustFetchOrch(h.P, LongLock)
			require.Equal(h.T, inst, item.Instance)
			require.Equal(h.T, []durable.WorkItem{completion}, item.Messages)
			ev := Event(inst, 1, 3, history.ActivityCompleted{Result: "r"})
			ev.SourceEventID = 2
			require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
				ExecutionID:         1,
				HistoryDelta:        []history.Event{ev},
				CancelledActivities: []durable.ScheduledActivityIdentifier{{Instance: inst, ExecutionID: 1, ActivityID: 2}},
			}), "cancelling an already-acked activity must not fail the ack")

			hist, err := h.P.Read(h.Ctx, inst)
			require.NoError(h.T, err)
			require.Len(h.T, hist, 3, "the ack must have committed")
			h.NoOrchOrWork(h.P)
		}},
	}
}

// cancellationActivity is an untagged, sessionless ActivityExecute.
func cancellationActivity(instance string, executionID, id uint64, name string) durable.ActivityExecute {
	return durable.ActivityExecute{Instance: instance, ExecutionID: executionID, ID: id, Name: name, Input: "{}"}
}

// cancellationScheduled is the ActivityScheduled event (execution 1) of an activity.
func cancellationScheduled(instance string, id uint64, name string) history.Event {
	return Event(instance, 1, id, history.ActivityScheduled{Name: name, Input: "{}"})
}

// cancellationCancelRequested is event id of execution 1, cancelling the
// activity scheduled at activityID.
func cancellationCancelRequested(instance string, id, activityID uint64) history.Event {
	ev := Event(instance, 1, id, history.ActivityCancelRequested{Reason: "dropped"})
	ev.SourceEventID = activityID
	return ev
}

// cancellationStart runs the instance's first turn, which schedules acts
// (activities of execution 1 whose ids are event ids 2, 3, ...).
func cancellationStart(h *H, instance string, acts ...durable.ActivityExecute) {
	h.T.Helper()
	h.Enqueue(h.P, StartItem(instance))
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, instance, item.Instance)
	delta := []history.Event{Started(instance, 1)}
	var workers []durable.WorkItem
	for _, a := range acts {
		if a.ExecutionID == 1 {
			delta = append(delta, cancellationScheduled(instance, a.ID, a.Name))
		}
		workers = append(workers, a)
	}
	md := StartedMetadata()
	md.Status = durable.StatusRunning
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID: 1, HistoryDelta: delta, WorkerItems: workers, Metadata: md}))
}

// cancellationTurn triggers a turn of instance with an external event and
// acks it with turn.
func cancellationTurn(h *H, instance string, turn durable.OrchestrationTurn) {
	h.T.Helper()
	h.Enqueue(h.P, durable.ExternalRaised{Instance: instance, Name: "Trigger", Data: "{}"})
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, instance, item.Instance)
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, turn))
}

// cancellationRequireActivity checks that w is the first delivery of the
// activity instance/executionID/id, locked with a token.
func cancellationRequireActivity(h *H, w *durable.LockedWorkItem, instance string, executionID, id uint64) {
	h.T.Helper()
	a, ok := w.Item.(durable.ActivityExecute)
	require.True(h.T, ok, "expected ActivityExecute, got %T", w.Item)
	require.Equal(h.T, instance, a.Instance)
	require.Equal(h.T, executionID, a.ExecutionID)
	require.Equal(h.T, id, a.ID)
	require.NotEmpty(h.T, w.LockToken)
	require.Equal(h.T, uint32(1), w.AttemptCount)
}

// cancellationFetchWhatever checks that an activity scheduled in the first
// turn can be fetched whatever the status that turn gave the execution:
// status "" keeps it running; otherwise end is the terminal event and
// output the execution's output.
func cancellationFetchWhatever(h *H, status durable.Status, end history.EventKind, output string) {
	h.T.Helper()
	inst := h.ID("inst")
	h.Enqueue(h.P, StartItem(inst))
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, inst, item.Instance)

	md := StartedMetadata()
	md.Status = durable.StatusRunning
	delta := []history.Event{Started(inst, 1), cancellationScheduled(inst, 2, "TestActivity")}
	if status != "" {
		md.Status = status
		md.Output = &output
		delta = append(delta, Event(inst, 1, 3, end))
	}
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID: 1, HistoryDelta: delta, Metadata: md,
		WorkerItems: []durable.WorkItem{cancellationActivity(inst, 1, 2, "TestActivity")},
	}))
	if a, ok := h.P.Admin(); ok {
		info, err := a.GetInstanceInfo(h.Ctx, inst)
		require.NoError(h.T, err)
		require.Equal(h.T, md.Status, info.Status)
	}

	w := h.MustFetchWork(h.P, LongLock)
	cancellationRequireActivity(h, w, inst, 1, 2)
	require.Equal(h.T, "TestActivity", w.Item.(durable.ActivityExecute).Name)
}
