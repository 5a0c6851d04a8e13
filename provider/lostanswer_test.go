package provider

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// unknownOutcomes are the answers after which a write may have committed:
// the service timed out, failed or was unavailable (the fault injector
// serves the request first, then answers with the status).
var unknownOutcomes = []int{http.StatusRequestTimeout, http.StatusInternalServerError, http.StatusServiceUnavailable}

// eachLostAnswer runs scenario once per unknown outcome, in parallel
// subtests, each on a polling provider of its own container whose
// background work (the repair pass) is an hour away, so that the nth write
// of a kind is the scenario's. With instance set, instance "i" is created
// first and an event waits for its next turn.
func eachLostAnswer(t *testing.T, name string, instance bool, scenario func(t *testing.T, p *Provider, container string, status int)) {
	t.Parallel()
	for _, status := range unknownOutcomes {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			container := freshContainer(name + "-" + strconv.Itoa(status))
			p := openProvider(t, quietConfig(container))
			if instance {
				createInstance(t, p, "i", "")
				require.NoError(t, p.EnqueueForOrchestrator(context.Background(), durable.ExternalRaised{Instance: "i", Name: "go"}, 0))
			}
			scenario(t, p, container, status)
		})
	}
}

// TestLostAnswerOnEnqueue: an enqueue whose create committed but whose
// answer was lost succeeds once: the store does not resend it (a resend
// after the message was consumed would be a second message), it reads it
// back.
func TestLostAnswerOnEnqueue(t *testing.T) {
	eachLostAnswer(t, "lost-enqueue", false, func(t *testing.T, p *Provider, container string, status int) {
		ctx := context.Background()
		middleware.loseNthAnswer(container, cosmosemu.OpCreate, 1, status)
		require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: "i", Name: "e", Data: "1"}, 0), "status %d", status)
		require.True(t, middleware.disarm(container))
		require.Equal(t, 1, countDocs(t, container, "i", "c.type = 'orch_queue'"), "one message (status %d)", status)

		middleware.loseNthAnswer(container, cosmosemu.OpCreate, 1, status)
		require.NoError(t, p.EnqueueForWorker(ctx, durable.ActivityExecute{Instance: "i", ExecutionID: 1, ID: 2, Name: "A", Input: "{}"}))
		require.True(t, middleware.disarm(container))
		require.Equal(t, 1, countDocs(t, container, "i", "c.type = 'worker_queue'"), "one work item (status %d)", status)
	})
}

// TestLostAnswerOnLocks: a lock write that committed but whose answer was
// lost is read back and returned to its fetch, instead of waiting for the
// lock to expire.
func TestLostAnswerOnLocks(t *testing.T) {
	eachLostAnswer(t, "lost-lock", true, func(t *testing.T, p *Provider, container string, status int) {
		ctx := context.Background()
		middleware.loseNthAnswer(container, cosmosemu.OpBatch, 1, status)
		item, err := p.FetchOrchestrationItem(ctx, time.Hour, 0, nil)
		require.True(t, middleware.disarm(container))
		require.NoError(t, err, "status %d", status)
		require.NotNil(t, item, "the orchestration lock is ours (status %d)", status)
		require.Len(t, item.Messages, 1)
		require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
			HistoryDelta: []history.Event{ev("i", 1, 2, history.ExternalEvent{Name: "go"})}}))

		require.NoError(t, p.EnqueueForWorker(ctx, durable.ActivityExecute{Instance: "i", ExecutionID: 1, ID: 3, Name: "A", Input: "{}"}))
		middleware.loseNthAnswer(container, cosmosemu.OpPatch, 1, status)
		w, err := p.FetchWorkItem(ctx, time.Hour, 0, nil, durable.DefaultOnlyTags())
		require.True(t, middleware.disarm(container))
		require.NoError(t, err, "status %d", status)
		require.NotNil(t, w, "the work item lock is ours (status %d)", status)
		require.EqualValues(t, 1, w.AttemptCount)
		require.NoError(t, p.AckWorkItem(ctx, w.LockToken, durable.ActivityCompleted{Instance: "i", ExecutionID: 1, ID: 3, Result: "1"}))
	})
}

// TestLostAnswerOnAcks: an ack that committed but whose answer was lost
// succeeds, and its effects are there once.
func TestLostAnswerOnAcks(t *testing.T) {
	eachLostAnswer(t, "lost-ack", true, func(t *testing.T, p *Provider, container string, status int) {
		ctx := context.Background()
		item := mustFetchOrch(t, p, time.Hour)
		middleware.loseNthAnswer(container, cosmosemu.OpBatch, 1, status)
		require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
			HistoryDelta: []history.Event{ev("i", 1, 2, history.ExternalEvent{Name: "go"})},
			WorkerItems:  []durable.WorkItem{durable.ActivityExecute{Instance: "i", ExecutionID: 1, ID: 3, Name: "A", Input: "{}"}}}),
			"status %d", status)
		require.True(t, middleware.disarm(container))
		hist, err := p.Read(ctx, "i")
		require.NoError(t, err)
		require.Len(t, hist, 2, "the turn's event once (status %d)", status)

		w, err := p.FetchWorkItem(ctx, time.Hour, 0, nil, durable.DefaultOnlyTags())
		require.NoError(t, err)
		require.NotNil(t, w)
		middleware.loseNthAnswer(container, cosmosemu.OpBatch, 1, status)
		require.NoError(t, p.AckWorkItem(ctx, w.LockToken, durable.ActivityCompleted{Instance: "i", ExecutionID: 1, ID: 3, Result: "1"}),
			"status %d", status)
		require.True(t, middleware.disarm(container))
		require.Equal(t, 1, countDocs(t, container, "i", "c.type = 'orch_queue'"), "one completion (status %d)", status)
		require.Zero(t, countDocs(t, container, "i", "c.type = 'worker_queue'"))
	})
}
