package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// unknownOutcomes are the answers after which a write may have committed:
// the service timed out, failed or was unavailable, or the connection
// dropped (the fault injector serves the request first, then answers with
// the status, or not at all).
var unknownOutcomes = []int{http.StatusRequestTimeout, http.StatusInternalServerError, http.StatusServiceUnavailable, dropAnswer}

func outcomeName(status int) string {
	if status == dropAnswer {
		return "drop"
	}
	return strconv.Itoa(status)
}

// eachLostAnswer runs scenario once per unknown outcome, in parallel
// subtests, each on a polling provider of its own container whose
// background work (the repair pass) is an hour away, so that the nth write
// of a kind is the scenario's. With instance set, instance "i" is created
// first and an event waits for its next turn.
func eachLostAnswer(t *testing.T, name string, instance bool, scenario func(t *testing.T, p *Provider, container string, status int)) {
	t.Parallel()
	for _, status := range unknownOutcomes {
		t.Run(outcomeName(status), func(t *testing.T) {
			t.Parallel()
			container := freshContainer(name + "-" + outcomeName(status))
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

// TestLostAnswerAndReadBackOnAck: an ack whose commit's answer was lost
// and whose read-back of the commit record failed too reports a
// retryable error; its resend (the runtime's retry, with the same turn)
// is decided by the commit record, which carries the lock's nonce and
// the turn's digest: done, and the turn's effects are there once. Another
// turn under the same lock is refused.
func TestLostAnswerAndReadBackOnAck(t *testing.T) {
	eachLostAnswer(t, "lost-ack-readback", true, func(t *testing.T, p *Provider, container string, status int) {
		ctx := context.Background()
		item := mustFetchOrch(t, p, time.Hour)
		turn := durable.OrchestrationTurn{ExecutionID: 1,
			HistoryDelta: []history.Event{ev("i", 1, 2, history.ExternalEvent{Name: "go"})},
			WorkerItems:  []durable.WorkItem{durable.ActivityExecute{Instance: "i", ExecutionID: 1, ID: 3, Name: "A", Input: "{}"}}}
		middleware.loseNthAnswer(container, cosmosemu.OpBatch, 1, status)
		middleware.thenFailNext(container, cosmosemu.OpRead, 50, http.StatusServiceUnavailable)
		err := p.AckOrchestrationItem(ctx, item.LockToken, turn)
		require.True(t, middleware.disarm(container), "the read-back failed too")
		require.Error(t, err, "status %d: the outcome is unknown", status)
		require.True(t, durable.IsRetryable(err), "status %d: %v", status, err)

		other := turn
		other.HistoryDelta = []history.Event{ev("i", 1, 2, history.ExternalEvent{Name: "other"})}
		require.ErrorIs(t, p.AckOrchestrationItem(ctx, item.LockToken, other), durable.ErrPermanent, "another turn under the lock")
		require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, turn), "status %d: the resend finds its commit", status)
		hist, err := p.Read(ctx, "i")
		require.NoError(t, err)
		require.Len(t, hist, 2, "the turn's event once (status %d)", status)
		require.Equal(t, 1, countDocs(t, container, "i", "c.type = 'worker_queue'"), "one activity (status %d)", status)
	})
}

// TestLostAnswerWithConsumedMessage: a client call whose batch committed
// but whose answer was lost, and whose message a turn consumed before the
// resend, takes effect once: the resend is decided by the request record,
// which outlives the message.
func TestLostAnswerWithConsumedMessage(t *testing.T) {
	eachLostAnswer(t, "lost-consumed", true, func(t *testing.T, p *Provider, container string, status int) {
		ctx := context.Background()
		// Consume the "go" event first, so the next fetch holds only what
		// the call enqueues.
		item := mustFetchOrch(t, p, time.Hour)
		require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
			HistoryDelta: []history.Event{ev("i", 1, 2, history.ExternalEvent{Name: "go"})}}))

		consumer := openProvider(t, quietConfig(container))
		var consumed []durable.WorkItem
		var consumeErr error
		middleware.loseNthAnswerAfter(container, cosmosemu.OpBatch, 1, status, func() {
			// Between the commit and its lost answer: another process
			// runs the turn that consumes the message.
			got, err := consumer.FetchOrchestrationItem(ctx, time.Hour, 0, nil)
			if err != nil || got == nil {
				consumeErr = fmt.Errorf("fetch: %v, %v", got, err)
				return
			}
			consumed = got.Messages
			consumeErr = consumer.AckOrchestrationItem(ctx, got.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
				HistoryDelta: []history.Event{ev("i", 1, 3, history.ExternalEvent{Name: "e"})}})
		})
		call := durable.ExternalRaised{Instance: "i", Name: "e", Data: "1", RequestID: "r-1"}
		require.NoError(t, p.EnqueueForOrchestrator(ctx, call, 0), "status %d", status)
		require.True(t, middleware.disarm(container))
		require.NoError(t, consumeErr)
		require.Equal(t, []durable.WorkItem{call}, consumed, "the turn consumed the call's message")
		require.Zero(t, countDocs(t, container, "i", "c.type = 'orch_queue'"), "no second message (status %d)", status)
		require.NoError(t, p.EnqueueForOrchestrator(ctx, call, 0), "the caller's own resend")
		require.Zero(t, countDocs(t, container, "i", "c.type = 'orch_queue'"), "still none (status %d)", status)
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

// TestLostAnswerOnClientCalls: a client call (start, raise, persistent
// event, cancel) carries a request id; when its write committed but the
// answer was lost, the store's resend finds the request record and the
// call succeeds with one message. The caller's own repeat of the call,
// before or after a turn consumed the message, is done without a second
// message; the same id with other arguments is refused.
func TestLostAnswerOnClientCalls(t *testing.T) {
	eachLostAnswer(t, "lost-call", false, func(t *testing.T, p *Provider, container string, status int) {
		ctx := context.Background()
		calls := []struct {
			name  string
			item  durable.WorkItem
			other durable.WorkItem // same request id, other arguments
		}{
			{"start", durable.StartOrchestration{Instance: "i", Orchestration: "O", Input: "{}", ExecutionID: 1, RequestID: "s"},
				durable.StartOrchestration{Instance: "i", Orchestration: "O", Input: `{"x":1}`, ExecutionID: 1, RequestID: "s"}},
			{"raise", durable.ExternalRaised{Instance: "i", Name: "e", Data: "1", RequestID: "r"},
				durable.ExternalRaised{Instance: "i", Name: "e", Data: "2", RequestID: "r"}},
			{"enqueue-event", durable.QueueMessage{Instance: "i", Name: "q", Data: "1", RequestID: "q"},
				durable.QueueMessage{Instance: "i", Name: "q", Data: "2", RequestID: "q"}},
			{"cancel", durable.CancelInstance{Instance: "i", Reason: "r", RequestID: "c"},
				durable.CancelInstance{Instance: "i", Reason: "other", RequestID: "r"}},
		}
		for _, c := range calls {
			middleware.loseNthAnswer(container, cosmosemu.OpBatch, 1, status)
			require.NoError(t, p.EnqueueForOrchestrator(ctx, c.item, 0), "%s, %s", c.name, outcomeName(status))
			require.True(t, middleware.disarm(container), c.name)
			require.Equal(t, 1, countDocs(t, container, "i", "c.type = 'orch_queue'"), "one message (%s, %s)", c.name, outcomeName(status))
			require.NoError(t, p.EnqueueForOrchestrator(ctx, c.item, 0), "the caller's repeat (%s)", c.name)
			require.Equal(t, 1, countDocs(t, container, "i", "c.type = 'orch_queue'"), "still one message (%s)", c.name)

			item := mustFetchOrch(t, p, time.Hour)
			require.Len(t, item.Messages, 1, c.name)
			require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, turnFor(item)))
			require.Zero(t, countDocs(t, container, "i", "c.type = 'orch_queue'"), c.name)

			require.NoError(t, p.EnqueueForOrchestrator(ctx, c.item, 0), "the caller's repeat after the turn (%s)", c.name)
			require.Zero(t, countDocs(t, container, "i", "c.type = 'orch_queue'"), "no second message (%s)", c.name)
			err := p.EnqueueForOrchestrator(ctx, c.other, 0)
			require.ErrorIs(t, err, durable.ErrPermanent, "another call under a used request id (%s)", c.name)
			require.Zero(t, countDocs(t, container, "i", "c.type = 'orch_queue'"), c.name)
		}
		require.Equal(t, len(calls), countDocs(t, container, "i", "c.type = 'request'"), "one record per call")
		var rec struct {
			TTL int64 `json:"ttl"`
		}
		got, err := rawContainer(t, container).ReadItem(ctx, azcosmos.NewPartitionKeyString("i"), "req:s", nil)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(got.Value, &rec))
		require.EqualValues(t, 24*60*60, rec.TTL, "a record expires after the retention (24 h by default)")
	})
}

// turnFor is a minimal turn consuming item's messages: the start's
// OrchestrationStarted on the first turn, nothing else.
func turnFor(item *durable.OrchestrationItem) durable.OrchestrationTurn {
	turn := durable.OrchestrationTurn{ExecutionID: 1, Metadata: durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0"}}
	if len(item.History) == 0 {
		turn.HistoryDelta = []history.Event{ev(item.Instance, 1, 1, history.OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "{}"})}
	}
	return turn
}

// TestLostAnswerOnSessionClaim: a session claim that landed but whose
// answer was lost is read back: the fetch gets its item (the session is
// its owner's), neither an error nor a wait for the claim to expire.
func TestLostAnswerOnSessionClaim(t *testing.T) {
	eachLostAnswer(t, "lost-claim", false, func(t *testing.T, p *Provider, container string, status int) {
		ctx := context.Background()
		cfg := &durable.SessionFetchConfig{OwnerID: "w1", LockTimeout: time.Hour}
		require.NoError(t, p.EnqueueForWorker(ctx, durable.ActivityExecute{Instance: "i", ExecutionID: 1, ID: 2, Name: "A", Input: "{}", SessionID: "s1"}))
		middleware.loseNthAnswer(container, cosmosemu.OpCreate, 1, status)
		w, err := p.FetchWorkItem(ctx, time.Hour, 0, cfg, durable.DefaultOnlyTags())
		require.True(t, middleware.disarm(container), "the claim's create was the fault's")
		require.NoError(t, err, outcomeName(status))
		require.NotNil(t, w, "the session claim is ours (%s)", outcomeName(status))
		require.NoError(t, p.AckWorkItem(ctx, w.LockToken, durable.ActivityCompleted{Instance: "i", ExecutionID: 1, ID: 2, Result: "1"}))

		// Another owner cannot take the session the lost answer gave w1.
		require.NoError(t, p.EnqueueForWorker(ctx, durable.ActivityExecute{Instance: "i", ExecutionID: 1, ID: 3, Name: "A", Input: "{}", SessionID: "s1"}))
		w, err = p.FetchWorkItem(ctx, time.Hour, 0, &durable.SessionFetchConfig{OwnerID: "w2", LockTimeout: time.Hour}, durable.DefaultOnlyTags())
		require.NoError(t, err)
		require.Nil(t, w, "the session stays w1's")
	})
}

// TestRequestRecordsExpire: a request record lives RequestRetention (the
// container's time to live removes it), after which the same request id
// is a new call; the container the store creates has time to live on.
func TestRequestRecordsExpire(t *testing.T) {
	t.Parallel()
	container := freshContainer("request-ttl")
	cfg := quietConfig(container)
	cfg.RequestRetention = time.Second
	p := openProvider(t, cfg)
	ctx := context.Background()
	props, err := rawContainer(t, container).Read(ctx, nil)
	require.NoError(t, err)
	require.NotNil(t, props.ContainerProperties.DefaultTimeToLive)
	require.EqualValues(t, -1, *props.ContainerProperties.DefaultTimeToLive, "on, with no default")

	// Only what holds however slow the run: a record lives at most the
	// retention (plus the second of _ts), so this test does not check the
	// repeat within it (TestLostAnswerOnClientCalls does, under the 24 h
	// default).
	raise := durable.ExternalRaised{Instance: "i", Name: "e", Data: "1", RequestID: "r"}
	require.NoError(t, p.EnqueueForOrchestrator(ctx, raise, 0))
	require.Equal(t, 1, countDocs(t, container, "i", "c.type = 'orch_queue'"))
	require.Eventually(t, func() bool { return countDocs(t, container, "i", "c.type = 'request'") == 0 },
		hang, 50*time.Millisecond, "the record expires")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, raise, 0))
	require.Equal(t, 2, countDocs(t, container, "i", "c.type = 'orch_queue'"), "after the retention the id is a new call")
}

// TestLostAnswerOnAbandon: an orchestration abandon whose batch committed
// but whose answer was lost succeeds, once (its attempt undo is applied
// once); one that failed before it ran is sent again. Either way the turn
// is fetchable at once, not after its lock.
func TestLostAnswerOnAbandon(t *testing.T) {
	eachLostAnswer(t, "lost-abandon", true, func(t *testing.T, p *Provider, container string, status int) {
		ctx := context.Background()
		for _, lost := range []bool{true, false} {
			item := mustFetchOrch(t, p, time.Hour)
			require.EqualValues(t, 1, item.AttemptCount)
			if lost {
				middleware.loseNthAnswer(container, cosmosemu.OpBatch, 1, status)
			} else if status != dropAnswer {
				middleware.failNth(container, cosmosemu.OpBatch, 1, status)
			}
			require.NoError(t, p.AbandonOrchestrationItem(ctx, item.LockToken, 0, true), "lost %v, %s", lost, outcomeName(status))
			middleware.disarm(container)
			again, err := p.FetchOrchestrationItem(ctx, time.Hour, 0, nil)
			require.NoError(t, err)
			require.NotNil(t, again, "the abandoned turn is fetchable at once (lost %v, %s)", lost, outcomeName(status))
			require.EqualValues(t, 1, again.AttemptCount, "the attempt was undone once")
			require.NoError(t, p.AbandonOrchestrationItem(ctx, again.LockToken, 0, true))
		}
	})
}
