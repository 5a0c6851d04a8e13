package provider

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// fanOutTurn starts inst and commits a first turn scheduling n
// activities (ids 2..n+1), then locks all n on p's workers.
func fanOutTurn(t *testing.T, p *Provider, inst string, n int) []*durable.LockedWorkItem {
	return fanOutTurnAwaiting(t, p, inst, n, false)
}

// fanOutTurnAwaiting is fanOutTurn whose turn, with awaitAll, says its
// orchestration awaits every one of the activities (a Join).
func fanOutTurnAwaiting(t *testing.T, p *Provider, inst string, n int, awaitAll bool) []*durable.LockedWorkItem {
	t.Helper()
	commitFanOut(t, p, inst, n, awaitAll)
	var ws []*durable.LockedWorkItem
	for range n {
		ws = append(ws, fetchWorkFor(t, p))
	}
	return ws
}

// commitFanOut starts inst on p and commits its first turn, scheduling
// n activities (ids 2..n+1), awaiting every one with awaitAll.
func commitFanOut(t *testing.T, p *Provider, inst string, n int, awaitAll bool) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: inst, Orchestration: "O", Input: "{}", ExecutionID: 1}, 0))
	item := fetchFor(t, p, inst)
	turn := durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{ev(inst, 1, 1, history.OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "{}"})},
		Metadata:     durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0", Status: durable.StatusRunning}}
	for i := range n {
		id := uint64(i + 2)
		turn.HistoryDelta = append(turn.HistoryDelta, ev(inst, 1, id, history.ActivityScheduled{Name: "A", Input: "{}"}))
		turn.WorkerItems = append(turn.WorkerItems, durable.ActivityExecute{Instance: inst, ExecutionID: 1, ID: id, Name: "A", Input: "{}"})
		if awaitAll {
			turn.AwaitingActivities = append(turn.AwaitingActivities, id)
		}
	}
	require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, turn))
}

// complete acks a locked activity with its completion.
func complete(t *testing.T, p *Provider, w *durable.LockedWorkItem) {
	t.Helper()
	a := w.Item.(durable.ActivityExecute)
	require.NoError(t, p.AckWorkItem(context.Background(), w.LockToken,
		durable.ActivityCompleted{Instance: a.Instance, ExecutionID: a.ExecutionID, ID: a.ID, Result: fmt.Sprint(a.ID)}))
}

// TestSiblingWaitCoalescesCompletions: the completion of one activity of
// a fan-out does not wake a turn while its siblings still run on this
// replica; the last one's completion does, and the turn holds every
// completion.
func TestSiblingWaitCoalescesCompletions(t *testing.T) {
	t.Parallel()
	cfg := eventConfig(freshContainer("siblings-coalesce"))
	cfg.joinEagerly = true
	cfg.siblingWait = time.Hour // only the completions end the wait here
	p := openProvider(t, cfg)
	ws := fanOutTurn(t, p, "fan", 3)

	complete(t, p, ws[0])
	got := fetchAsync(p)
	awaitHeld(t, p, got, 0)
	complete(t, p, ws[1])
	complete(t, p, ws[2])
	item := <-got
	require.NotNil(t, item, "the last completion wakes the turn")
	require.Equal(t, "fan", item.Instance)
	require.Len(t, item.Messages, 3, "one turn for the three completions")
}

// TestSiblingWaitIsBounded: a turn whose siblings never complete here
// (another replica runs them, or they are lost) is put off for at most
// SiblingWait, and an instance with no outstanding activity is not put
// off at all.
func TestSiblingWaitIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := eventConfig(freshContainer("siblings-bound"))
	cfg.joinEagerly = true
	cfg.siblingWait = 50 * time.Millisecond
	p := openProvider(t, cfg)
	ws := fanOutTurn(t, p, "fan", 2)
	complete(t, p, ws[0])
	item := fetchFor(t, p, "fan")
	require.Len(t, item.Messages, 1, "the bound passed with a sibling outstanding")
	require.GreaterOrEqual(t, p.ev().Stats().TurnsPutOff, int64(1))
	require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{ev("fan", 1, 4, history.ActivityCompleted{Result: "2"})}}))

	// On a replica with no fan-out outstanding, nothing is put off.
	lcfg := eventConfig(freshContainer("siblings-none"))
	lcfg.joinEagerly = true
	lcfg.siblingWait = time.Hour
	lone := openProvider(t, lcfg)
	startTurn(t, lone, "lone")
	require.Zero(t, lone.ev().Stats().TurnsPutOff)
}

// holdConfig is a joined event-driven replica that holds turns only on a
// turn's await hint (no sibling wait), for as long as it takes.
func holdConfig(name string) testCfg {
	cfg := eventConfig(freshContainer(name))
	cfg.joinEagerly = true
	cfg.siblingWait, cfg.awaitHold = -1, time.Hour
	return cfg
}

// fetchAsync long-polls p for an orchestration item in the background.
func fetchAsync(p *Provider) <-chan *durable.OrchestrationItem {
	got := make(chan *durable.OrchestrationItem, 1)
	go func() {
		item, err := p.FetchOrchestrationItem(context.Background(), lockLong, hang, nil)
		if err != nil {
			item = nil
		}
		got <- item
	}()
	return got
}

// awaitHeld waits until p has put a turn off more than before times,
// failing at once if the fetch behind got returns first: its turn went
// without the hold.
func awaitHeld(t *testing.T, p *Provider, got <-chan *durable.OrchestrationItem, before int64) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(hang)
	for p.ev().Stats().TurnsPutOff <= before {
		select {
		case item := <-got:
			n := -1
			if item != nil {
				n = len(item.Messages)
			}
			t.Fatalf("the fetch returned a turn of %d message(s) instead of holding it", n)
		case <-deadline:
			t.Fatalf("no turn put off within %v", hang)
		case <-tick.C:
		}
	}
}

// TestAwaitHoldWaitsForEveryAwaited: a turn that says its orchestration
// awaits every one of its activities is held past any sibling bound until
// the last of them completes, and then holds every completion.
func TestAwaitHoldWaitsForEveryAwaited(t *testing.T) {
	t.Parallel()
	p := openProvider(t, holdConfig("await-hold"))
	ws := fanOutTurnAwaiting(t, p, "join", 3, true)
	complete(t, p, ws[0])
	got := fetchAsync(p)
	awaitHeld(t, p, got, 0)
	complete(t, p, ws[1])
	complete(t, p, ws[2])
	item := <-got
	require.NotNil(t, item)
	require.Len(t, item.Messages, 3, "one turn for the three completions")
}

// TestAwaitHoldEndsOnArrival: anything else that reaches a held instance
// (an event raised here or by another process) ends the hold at once,
// its awaited activities still running; without a hint nothing is held.
func TestAwaitHoldEndsOnArrival(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := holdConfig("await-arrival")
	p := openProvider(t, cfg)
	client := openProvider(t, testConfig(cfg.Container)) // another process: reaches the owner through the feed
	for i, from := range []*Provider{p, client} {
		inst := fmt.Sprintf("held-%d", i)
		ws := fanOutTurnAwaiting(t, p, inst, 3, true)
		complete(t, p, ws[0])
		before := p.ev().Stats().TurnsPutOff
		got := fetchAsync(p)
		awaitHeld(t, p, got, before)
		require.NoError(t, from.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: inst, Name: "go", Data: "{}"}, 0))
		item := <-got
		require.NotNil(t, item, "the event ends the hold")
		require.Equal(t, inst, item.Instance)
		require.Len(t, item.Messages, 2, "the completion and the event")
		require.NoError(t, p.AbandonOrchestrationItem(ctx, item.LockToken, time.Hour, true))
	}

	before := p.ev().Stats().TurnsPutOff
	ws := fanOutTurnAwaiting(t, p, "unhinted", 2, false)
	complete(t, p, ws[0])
	item := fetchFor(t, p, "unhinted")
	require.Len(t, item.Messages, 1)
	require.Equal(t, before, p.ev().Stats().TurnsPutOff, "no hint, no sibling wait: nothing held")
}

// TestAwaitHoldLearnedByTheOwner: a turn another process committed (a
// polling provider on the container here; in a deployment, a replica
// running a start its client wrote) that awaits its fan-out holds the
// slot owner's next turn until the last completion. The owner learns the
// hold from the instance's version on its feed and runs one turn for the
// three completions its workers produced.
func TestAwaitHoldLearnedByTheOwner(t *testing.T) {
	t.Parallel()
	cfg := holdConfig("await-learned")
	p := openProvider(t, cfg)
	writer := openProvider(t, quietConfig(cfg.Container))
	commitFanOut(t, writer, "learned", 3, true)
	var ws []*durable.LockedWorkItem
	for range 3 {
		ws = append(ws, fetchWorkFor(t, p))
	}
	require.Eventually(t, func() bool { return p.ev().Stats().HoldsLearned > 0 }, hang, 5*time.Millisecond,
		"the owner's feed shows the writer's turn and its hold")
	complete(t, p, ws[0])
	got := fetchAsync(p)
	awaitHeld(t, p, got, 0)
	complete(t, p, ws[1])
	complete(t, p, ws[2])
	item := <-got
	require.NotNil(t, item)
	require.Equal(t, "learned", item.Instance)
	require.Len(t, item.Messages, 3, "one turn for the three completions")
}
