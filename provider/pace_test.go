package provider

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/polling"
	"github.com/durafeed/durafeed/slots"
)

// instanceInSlots returns an instance id (with prefix) whose dispatch slot
// lies in b.
func instanceInSlots(t *testing.T, prefix string, b slots.Block) string {
	t.Helper()
	return instancesWhere(t, prefix, 1, b.Contains)[0]
}

// instancesWhere returns n instance ids, named prefix-k, whose dispatch
// slots satisfy in.
func instancesWhere(t *testing.T, prefix string, n int, in func(slot int) bool) []string {
	t.Helper()
	var ids []string
	for k := 0; len(ids) < n; k++ {
		require.Less(t, k, 1_000_000, "no instance id in the slots for %s", prefix)
		if id := fmt.Sprintf("%s-%d", prefix, k); in(slots.Of(id)) {
			ids = append(ids, id)
		}
	}
	return ids
}

// TestPollingEmptyShareScansEverySlot: in polling mode with four shares
// per queue, a fetch whose share is empty still takes work in another
// share (the dispatcher counts are concurrency, not a partition of the
// work among fetches).
func TestPollingEmptyShareScansEverySlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig(freshContainer("pace-shares"))
	cfg.OrchestrationDispatchers, cfg.WorkerDispatchers = 4, 4
	p := openProvider(t, cfg)
	last := slots.Split(4)[3]
	// Every fetch below checks out the share polled least recently: the
	// first, second, third share in turn, and the work lies in the
	// fourth.
	for i := range 3 {
		inst := instanceInSlots(t, fmt.Sprintf("last-share-%d", i), last)
		require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: inst, Orchestration: "O", Input: "{}", ExecutionID: 1}, 0))
		item, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NotNil(t, item, "fetch %d: the work in the last share is found", i)
		require.Equal(t, inst, item.Instance)
		require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
			HistoryDelta: []history.Event{ev(inst, 1, 1, history.OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "{}"})},
			WorkerItems:  []durable.WorkItem{durable.ActivityExecute{Instance: inst, ExecutionID: 1, ID: 2, Name: "A", Input: "{}"}},
			Metadata:     durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0", Status: durable.StatusRunning}}))
		w, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, durable.AnyTag())
		require.NoError(t, err)
		require.NotNil(t, w, "fetch %d: the activity in the last share is found", i)
		require.NoError(t, p.AckWorkItem(ctx, w.LockToken, durable.ActivityCompleted{Instance: inst, ExecutionID: 1, ID: 2, Result: "1"}))
		item, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NotNil(t, item, "fetch %d: the completion in the last share is found", i)
		require.Equal(t, inst, item.Instance)
		require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
			HistoryDelta: []history.Event{ev(inst, 1, 2, history.ActivityCompleted{Result: "1"})}}))
	}
}

// TestPollInterval: polling mode states its poll interval (the seeds'
// 1 s unless configured); event-driven mode, whose fetches wait for work,
// states none.
func TestPollInterval(t *testing.T) {
	t.Parallel()
	def := testConfig(freshContainer("pace-interval"))
	require.Equal(t, polling.DefaultPollInterval, openProvider(t, def).PollInterval())
	require.Equal(t, time.Second, polling.DefaultPollInterval)
	set := def
	set.PollInterval = 250 * time.Millisecond
	require.Equal(t, 250*time.Millisecond, openProvider(t, set).PollInterval())
	require.Zero(t, openProvider(t, eventConfig(freshContainer("pace-interval-ev"))).PollInterval())
}

// TestWatchHearsCommittedTurns: a watch receives after a turn of its
// instance commits through this provider, and only then; a closed watch
// receives nothing more; bad input is refused.
func TestWatchHearsCommittedTurns(t *testing.T) {
	t.Parallel()
	for _, mode := range []Mode{ModePolling, ModeEventDriven} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cfg := testConfig(freshContainer("watch-" + mode.String()))
			if mode == ModeEventDriven {
				cfg = eventConfig(freshContainer("watch-" + mode.String()))
			}
			p := openProvider(t, cfg)
			w, err := p.WatchInstance(ctx, "watched")
			require.NoError(t, err)
			other, err := p.WatchInstance(ctx, "other")
			require.NoError(t, err)

			startTurn(t, p, "other")
			require.Empty(t, w.Changed(), "another instance's turn")
			require.Len(t, other.Changed(), 1, "its own instance's turn")
			require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: "watched", Orchestration: "O", Input: "{}", ExecutionID: 1}, 0))
			require.Empty(t, w.Changed(), "an enqueue is no turn")

			item := fetchFor(t, p, "watched")
			out := "done"
			require.Empty(t, w.Changed(), "a fetch changes nothing a client reads")
			require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
				HistoryDelta: []history.Event{
					ev("watched", 1, 1, history.OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "{}"}),
					ev("watched", 1, 2, history.OrchestrationCompleted{Output: "done"}),
				},
				Metadata: durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0", Status: durable.StatusCompleted, Output: &out}}))
			select {
			case <-w.Changed():
			default:
				require.FailNow(t, "the completing turn is not signalled")
			}

			<-other.Changed()
			other.Close()
			other.Close() // idempotent
			require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: "other", Name: "go", Data: "{}"}, 0))
			item = fetchFor(t, p, "other")
			require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
				HistoryDelta: []history.Event{ev("other", 1, 2, history.ExternalEvent{Name: "go", Data: "{}"})}}))
			require.Empty(t, other.Changed(), "a closed watch hears nothing")
			w.Close()

			_, err = p.WatchInstance(ctx, "")
			require.ErrorIs(t, err, durable.ErrPermanent)
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			_, err = p.WatchInstance(cctx, "x")
			require.ErrorIs(t, err, context.Canceled)
		})
	}
}
