package conformance

import (
	"fmt"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// multiExecutionScenarios checks histories of instances with several
// executions (continue-as-new):
//   - each execution keeps its own history, readable by execution id, and
//     Read returns the current (latest) execution's;
//   - the execution id is the runtime's: a fetch reports the current
//     execution (with its history) until a turn is acked into a new one;
//   - a ContinueAsNew message is delivered like any other and the ack of
//     the next execution makes it current, older executions untouched;
//   - histories are returned ordered numerically by event id, whatever the
//     order of appends (event 10 after event 9, not after event 1);
//   - messages for an execution wait for the message that starts it
//     (ContinueAsNew, or a withheld StartOrchestration) rather than being
//     handed out, or dropped, without it.
func multiExecutionScenarios() []Scenario {
	return []Scenario{
		{"execution_isolation", multiExecIsolation},
		{"latest_execution_detection", multiExecLatest},
		{"execution_id_sequencing", multiExecIDSequencing},
		{"continue_as_new_creates_new_execution", multiExecContinueAsNew},
		{"execution_history_persistence", multiExecPersistence},
		{"history_ordered_by_event_id", multiExecOrderedByEventID},
		{"messages_wait_for_their_continue_as_new", multiExecMessagesWaitForContinuation},
		{"persistent_event_waits_for_a_withheld_start", multiExecEventWaitsForStart},
	}
}

// multiExecStart is the StartOrchestration of one execution of instance.
func multiExecStart(instance string, executionID uint64) durable.StartOrchestration {
	s := StartItem(instance)
	s.ExecutionID = executionID
	return s
}

// multiExecRead reads one execution's history, failing on error.
func multiExecRead(h *H, instance string, executionID uint64) []history.Event {
	h.T.Helper()
	events, err := h.P.ReadWithExecution(h.Ctx, instance, executionID)
	require.NoError(h.T, err)
	return events
}

// multiExecKinds returns the events' kinds.
func multiExecKinds(events []history.Event) []history.EventKind {
	kinds := make([]history.EventKind, len(events))
	for i, e := range events {
		kinds[i] = e.Kind
	}
	return kinds
}

func multiExecIsolation(h *H) {
	id := h.ID("instance-a")
	res1, res2 := "result1", "result2"

	h.Enqueue(h.P, multiExecStart(id, 1))
	item := h.MustFetchOrch(h.P, LongLock)
	exec1 := []history.Event{
		Started(id, 1),
		Event(id, 1, 2, history.ActivityScheduled{Name: "Activity1", Input: "input1"}),
		Event(id, 1, 3, history.OrchestrationCompleted{Output: res1}),
	}
	md := StartedMetadata()
	md.Status, md.Output = durable.StatusCompleted, &res1
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken,
		durable.OrchestrationTurn{ExecutionID: 1, HistoryDelta: exec1, Metadata: md}))

	h.Enqueue(h.P, multiExecStart(id, 2))
	item = h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, uint64(1), item.ExecutionID, "execution 2 does not exist until acked")
	exec2 := []history.Event{Started(id, 2), Event(id, 2, 2, history.OrchestrationCompleted{Output: res2})}
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 2,
		HistoryDelta: exec2, Metadata: durable.ExecutionMetadata{Status: durable.StatusCompleted, Output: &res2}}))

	got1 := multiExecRead(h, id, 1)
	require.Equal(h.T, multiExecKinds(exec1), multiExecKinds(got1))
	for _, e := range got1 {
		require.Equal(h.T, uint64(1), e.ExecutionID)
	}
	got2 := multiExecRead(h, id, 2)
	require.Equal(h.T, multiExecKinds(exec2), multiExecKinds(got2))
	for _, e := range got2 {
		require.Equal(h.T, uint64(2), e.ExecutionID)
	}
	latest, err := h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	require.Equal(h.T, multiExecKinds(exec2), multiExecKinds(latest), "Read returns the latest execution")
	require.Empty(h.T, multiExecRead(h, id, 3), "an execution that does not exist reads empty")
}

func multiExecLatest(h *H) {
	id := h.ID("instance-a")
	for i, name := range []string{"A", "B"} {
		exec := uint64(i + 1)
		h.Enqueue(h.P, multiExecStart(id, exec))
		item := h.MustFetchOrch(h.P, LongLock)
		turn := durable.OrchestrationTurn{ExecutionID: exec, HistoryDelta: []history.Event{
			Started(id, exec), Event(id, exec, 2, history.ActivityScheduled{Name: name, Input: ""})}}
		if exec == 1 {
			turn.Metadata = StartedMetadata()
		}
		require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, turn))
	}

	latest, err := h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	require.Len(h.T, latest, 2)
	require.Equal(h.T, history.ActivityScheduled{Name: "B", Input: ""}, latest[1].Kind, "Read returns execution 2")
	first := multiExecRead(h, id, 1)
	require.Len(h.T, first, 2)
	require.Equal(h.T, history.ActivityScheduled{Name: "A", Input: ""}, first[1].Kind)

	stats, err := h.P.GetInstanceStats(h.Ctx, id)
	require.NoError(h.T, err)
	require.NotNil(h.T, stats)
	require.Equal(h.T, uint64(2), stats.ExecutionID)
	if a, ok := h.P.Admin(); ok {
		latestID, err := a.LatestExecutionID(h.Ctx, id)
		require.NoError(h.T, err)
		require.Equal(h.T, uint64(2), latestID)
	}
}

func multiExecIDSequencing(h *H) {
	id := h.ID("instance-a")
	h.Enqueue(h.P, multiExecStart(id, 1))
	item1 := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, uint64(1), item1.ExecutionID)
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item1.LockToken, creationFirstTurn(id)))

	// The start of execution 2 is fetched against the current execution, 1.
	h.Enqueue(h.P, multiExecStart(id, 2))
	item2 := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, uint64(1), item2.ExecutionID, "the current execution until a turn is acked into 2")
	require.Len(h.T, item2.History, 1)
	require.Equal(h.T, uint64(1), item2.History[0].ExecutionID)
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item2.LockToken, durable.OrchestrationTurn{
		ExecutionID: 2, HistoryDelta: []history.Event{Started(id, 2)}, Metadata: StartedMetadata()}))

	h.Enqueue(h.P, durable.ExternalRaised{Instance: id, Name: "poke", Data: "{}"})
	item3 := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, uint64(2), item3.ExecutionID, "the current execution is now 2")
	require.Len(h.T, item3.History, 1)
	require.Equal(h.T, uint64(2), item3.History[0].ExecutionID, "the fetch loads the current execution's history")

	if a, ok := h.P.Admin(); ok {
		execs, err := a.ListExecutions(h.Ctx, id)
		require.NoError(h.T, err)
		require.Equal(h.T, []uint64{1, 2}, execs)
	}
}

// multiExecContinued creates instance id and runs execution 1 to its end
// in continue-as-new: its final turn queues the returned ContinueAsNew
// message, whose input is next.
func multiExecContinued(h *H, id, next string) durable.ContinueAsNew {
	h.T.Helper()
	h.CreateInstance(h.P, id)
	h.Enqueue(h.P, durable.ExternalRaised{Instance: id, Name: "restart", Data: "{}"})
	item := h.MustFetchOrch(h.P, LongLock)
	can := durable.ContinueAsNew{Instance: id, Orchestration: TestOrchestration, Input: next, Version: TestVersion}
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID:       1,
		HistoryDelta:      []history.Event{Event(id, 1, 2, history.OrchestrationContinuedAsNew{Input: next})},
		OrchestratorItems: []durable.WorkItem{can},
		Metadata:          durable.ExecutionMetadata{Status: durable.StatusContinuedAsNew, Output: &next},
	}))
	return can
}

func multiExecContinueAsNew(h *H) {
	id := h.ID("instance-a")
	next := "new-input"
	can := multiExecContinued(h, id, next)

	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, []durable.WorkItem{can}, item.Messages)
	require.Equal(h.T, uint64(1), item.ExecutionID)
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID: 2,
		HistoryDelta: []history.Event{Event(id, 2, 1, history.OrchestrationStarted{Name: TestOrchestration,
			Version: TestVersion, Input: next})},
		Metadata: durable.ExecutionMetadata{Status: durable.StatusRunning},
	}))

	h.Enqueue(h.P, durable.ExternalRaised{Instance: id, Name: "poke", Data: "{}"})
	item = h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, uint64(2), item.ExecutionID, "continue-as-new made execution 2 current")
	require.Len(h.T, item.History, 1)
	require.Equal(h.T, next, item.History[0].Kind.(history.OrchestrationStarted).Input)

	old := multiExecRead(h, id, 1)
	require.Len(h.T, old, 2, "execution 1 is kept intact")
	require.IsType(h.T, history.OrchestrationContinuedAsNew{}, old[1].Kind)
	if a, ok := h.P.Admin(); ok {
		info, err := a.GetExecutionInfo(h.Ctx, id, 1)
		require.NoError(h.T, err)
		require.Equal(h.T, durable.StatusContinuedAsNew, info.Status)
		info, err = a.GetExecutionInfo(h.Ctx, id, 2)
		require.NoError(h.T, err)
		require.Equal(h.T, durable.StatusRunning, info.Status)
	}
}

// multiExecMessagesWaitForContinuation: after an execution continued as
// new, a message for the next execution (a persistent event) arriving
// while the ContinueAsNew message is invisible (abandoned with a delay) is
// not handed out without it. A turn of the event alone would find a
// terminal execution, have nothing to run, and its ack would drop the
// event.
func multiExecMessagesWaitForContinuation(h *H) {
	id := h.ID("instance-a")
	can := multiExecContinued(h, id, "new-input")
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, []durable.WorkItem{can}, item.Messages)
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 2*time.Second, true))

	event := durable.QueueMessage{Instance: id, Name: "item", Data: `"p"`}
	h.Enqueue(h.P, event)
	// Fetched at once (a broken provider hands out the event alone) or
	// once the continuation is visible again: either way together.
	item = h.MustFetchOrch(h.P, LongLock)
	require.ElementsMatch(h.T, []durable.WorkItem{can, event}, item.Messages,
		"the persistent event is delivered with the ContinueAsNew that starts its execution")
	require.Equal(h.T, uint64(1), item.ExecutionID)
}

// multiExecEventWaitsForStart: a persistent event for an instance whose
// StartOrchestration is withheld (abandoned with a delay, as a node that
// cannot run the orchestration does) is not dropped as the event of an
// instance that never started: it is delivered with the start.
func multiExecEventWaitsForStart(h *H) {
	id := h.ID("instance-a")
	start := StartItem(id)
	h.Enqueue(h.P, start)
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, []durable.WorkItem{start}, item.Messages)
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 2*time.Second, true))

	event := durable.QueueMessage{Instance: id, Name: "item", Data: `"p"`}
	h.Enqueue(h.P, event)
	item = h.MustFetchOrch(h.P, LongLock)
	require.ElementsMatch(h.T, []durable.WorkItem{start, event}, item.Messages,
		"the persistent event is delivered with the start it waited for")
}

func multiExecPersistence(h *H) {
	id := h.ID("instance-a")
	for exec := uint64(1); exec <= 3; exec++ {
		h.Enqueue(h.P, multiExecStart(id, exec))
		item := h.MustFetchOrch(h.P, LongLock)
		if exec > 1 {
			require.Equal(h.T, exec-1, item.ExecutionID)
			require.Len(h.T, item.History, 2, "the previous execution's history")
		}
		turn := durable.OrchestrationTurn{ExecutionID: exec, HistoryDelta: []history.Event{
			Started(id, exec),
			Event(id, exec, 2, history.ActivityScheduled{Name: fmt.Sprintf("Activity-%d", exec),
				Input: fmt.Sprintf("input-%d", exec)}),
		}}
		if exec == 1 {
			turn.Metadata = StartedMetadata()
		}
		require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, turn))
	}

	for exec := uint64(1); exec <= 3; exec++ {
		events := multiExecRead(h, id, exec)
		require.Len(h.T, events, 2, "execution %d", exec)
		require.Equal(h.T, history.ActivityScheduled{Name: fmt.Sprintf("Activity-%d", exec),
			Input: fmt.Sprintf("input-%d", exec)}, events[1].Kind)
	}
	latest, err := h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	require.Len(h.T, latest, 2)
	require.Equal(h.T, uint64(3), latest[1].ExecutionID)
	if a, ok := h.P.Admin(); ok {
		execs, err := a.ListExecutions(h.Ctx, id)
		require.NoError(h.T, err)
		require.Equal(h.T, []uint64{1, 2, 3}, execs)
	}
}

func multiExecOrderedByEventID(h *H) {
	id := h.ID("ordered")
	h.CreateInstance(h.P, id)
	ev := func(eventID uint64) history.Event {
		return Event(id, 1, eventID, history.ExternalEvent{Name: "e", Data: fmt.Sprint(eventID)})
	}
	// Appends out of order, with ids past 9 (a textual sort would misplace them).
	require.NoError(h.T, h.P.AppendWithExecution(h.Ctx, id, 1, []history.Event{ev(12), ev(11), ev(10)}))
	var rest []history.Event
	for i := uint64(9); i >= 2; i-- {
		rest = append(rest, ev(i))
	}
	require.NoError(h.T, h.P.AppendWithExecution(h.Ctx, id, 1, rest))

	check := func(events []history.Event, what string) {
		h.T.Helper()
		require.Len(h.T, events, 12, what)
		for i, e := range events {
			require.Equal(h.T, uint64(i+1), e.EventID, "%s: position %d", what, i)
		}
	}
	latest, err := h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	check(latest, "Read")
	check(multiExecRead(h, id, 1), "ReadWithExecution")
	h.Enqueue(h.P, durable.ExternalRaised{Instance: id, Name: "poke", Data: "{}"})
	check(h.MustFetchOrch(h.P, LongLock).History, "fetched history")
}
