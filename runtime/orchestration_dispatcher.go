package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/internal/clock"
	"github.com/durafeed/durafeed/runtime/replay"
)

// CorruptHistoryEventID is the event id of the OrchestrationFailed event
// that ends an instance whose history cannot be decoded: the runtime cannot
// know the last event id, so it uses the contract's sentinel
// (history.PoisonEventID), far beyond normal histories.
const CorruptHistoryEventID = history.PoisonEventID

// historyErrorBackoff is the fixed delay before an item whose history could
// not be decoded is fetched again (possibly by a newer node).
const historyErrorBackoff = time.Second

// orchestrationLoop is one orchestration dispatcher goroutine.
func (r *Runtime) orchestrationLoop(pollCtx, workCtx context.Context) {
	filter := durable.DefaultCapabilityFilter(*r.opts.RuntimeVersion)
	for pollCtx.Err() == nil {
		started := time.Now()
		item, err := r.p.FetchOrchestrationItem(pollCtx, r.opts.OrchestratorLockTimeout, r.opts.PollTimeout, filter)
		if err != nil {
			if pollCtx.Err() == nil {
				r.log.Warn("fetch orchestration item failed", zap.Error(err))
			}
			clock.Sleep(pollCtx, r.opts.IdleBackoff)
			continue
		}
		if item == nil {
			clock.Sleep(pollCtx, r.opts.IdleBackoff-time.Since(started))
			continue
		}
		r.processOrchestration(workCtx, item)
	}
}

// processOrchestration runs and commits one turn.
func (r *Runtime) processOrchestration(ctx context.Context, item *durable.OrchestrationItem) {
	log := r.log.With(zap.String("instance", item.Instance), zap.Uint64("execution_id", item.ExecutionID), zap.Uint32("attempt", item.AttemptCount))
	if item.AttemptCount > r.opts.MaxAttempts {
		r.poisonOrchestration(ctx, item, log)
		return
	}
	if item.HistoryError != "" {
		log.Warn("history cannot be decoded; abandoning", zap.String("error", item.HistoryError))
		r.abandonOrchestration(ctx, item, historyErrorBackoff, false, log)
		return
	}

	began := time.Now()
	sctx, span := r.ins.startTurn(ctx, item)
	outcome, failed := "abandoned", true
	defer func() { r.ins.endTurn(sctx, span, item.OrchestrationName, outcome, failed, began) }()
	turnCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	half := r.opts.OrchestratorLockTimeout / 2
	rn := startRenewer(turnCtx, half, func(c context.Context) error {
		return r.p.RenewOrchestrationItemLock(c, item.LockToken, r.opts.OrchestratorLockTimeout)
	}, func(err error) {
		log.Warn("orchestration lock lost", zap.Error(err))
		cancel()
	})
	res, err := replay.Execute(turnCtx, replay.Input{
		Item: item, Now: r.opts.Clock(), RuntimeVersion: *r.opts.RuntimeVersion, Resolver: r.reg, Logger: r.opts.Logger,
		TraceParent: traceParent(sctx),
	})
	rn.Stop()
	if err != nil {
		log.Warn("turn abandoned", zap.Error(err))
		r.abandonOrchestration(ctx, item, 0, true, log)
		return
	}
	switch res.Outcome {
	case replay.OutcomeAbandon:
		log.Warn("cannot run turn on this node; abandoning", zap.String("reason", res.Reason))
		r.abandonOrchestration(ctx, item, r.opts.UnregisteredBackoff, false, log)
		return
	case replay.OutcomeFailed:
		log.Warn("orchestration failed", zap.String("error", res.Failure.DisplayMessage()))
	case replay.OutcomeCompleted:
		log.Debug("orchestration completed", r.payload("output", res.Output))
	}
	stampTurn(sctx, &res.Turn)
	switch r.commitTurn(ctx, item, res.Turn, log) {
	case commitDone:
		outcome, failed = turnOutcome(res.Outcome), res.Outcome == replay.OutcomeFailed
	case commitFailedInstead:
		outcome, failed = "failed", true
	default:
		outcome = "not_committed"
	}
}

// commitResult is what commitTurn did.
type commitResult int

const (
	commitNone          commitResult = iota // nothing committed: the turn runs again
	commitDone                              // the turn committed
	commitFailedInstead                     // the turn could not be written; a failure of the orchestration was
)

// turnOutcome names a committed turn's outcome for spans and metrics.
func turnOutcome(o replay.Outcome) string {
	switch o {
	case replay.OutcomeContinue:
		return "continue"
	case replay.OutcomeCompleted:
		return "completed"
	case replay.OutcomeFailed:
		return "failed"
	case replay.OutcomeContinuedAsNew:
		return "continued_as_new"
	default:
		return "none"
	}
}

// commitTurn acks the turn. A child's completion is routed to the parent
// execution recorded when the child was scheduled (ParentExecutionID);
// children started before that field existed carry 0, and for them the
// parent's current execution is looked up instead.
//
// A turn the provider cannot write for its size (durable.ErrTooLarge:
// an output, a payload or a batch over the store's limit) fails at once
// instead of running again into the same refusal until it is poisoned:
// the orchestration fails with the provider's message, which names the
// size and the limit, never the payload.
func (r *Runtime) commitTurn(ctx context.Context, item *durable.OrchestrationItem, turn durable.OrchestrationTurn, log *zap.Logger) commitResult {
	err := r.ackTurn(ctx, item, turn, log)
	if !errors.Is(err, durable.ErrTooLarge) {
		if err != nil {
			return commitNone
		}
		return commitDone
	}
	log.Error("the turn is too large for the store; failing the orchestration", zap.Error(err))
	details := history.InfrastructureError("ack_orchestration_item", "the turn cannot be written: "+err.Error(), false)
	if r.ackTurn(ctx, item, r.failureTurn(item, details), log) != nil {
		return commitNone
	}
	return commitFailedInstead
}

// ackTurn acks the turn with the routing fix-ups, and says what an
// error means: a refused ack leaves the lock to expire, a failed one
// abandons the turn.
func (r *Runtime) ackTurn(ctx context.Context, item *durable.OrchestrationItem, turn durable.OrchestrationTurn, log *zap.Logger) error {
	cctx, cancel := commitCtx(ctx)
	defer cancel()
	for i, w := range turn.OrchestratorItems {
		switch c := w.(type) {
		case durable.SubOrchCompleted:
			if c.ParentExecutionID == 0 {
				c.ParentExecutionID = r.parentExecution(cctx, c.ParentInstance)
				turn.OrchestratorItems[i] = c
			}
		case durable.SubOrchFailed:
			if c.ParentExecutionID == 0 {
				c.ParentExecutionID = r.parentExecution(cctx, c.ParentInstance)
				turn.OrchestratorItems[i] = c
			}
		}
	}
	err := retryCommit(cctx, func(c context.Context) error { return r.p.AckOrchestrationItem(c, item.LockToken, turn) })
	if err == nil || errors.Is(err, durable.ErrTooLarge) {
		return err
	}
	if !durable.IsRetryable(err) {
		// The lock is gone (expired, or released because this replica was
		// judged dead): the turn did not commit and runs again wherever
		// the lock is taken next. (An ack that committed but whose answer
		// was lost is read back by the provider and returns nil.)
		log.Warn("ack refused: the turn's lock is no longer held; the turn did not commit and will run again", zap.Error(err))
		return err
	}
	log.Warn("ack failed; abandoning", zap.Error(err))
	r.abandonOrchestration(ctx, item, r.opts.FailureBackoff, true, log)
	return err
}

// parentExecution returns the parent's current execution id (1 if
// unknown): the fallback routing of a completion from a child whose start
// predates ParentExecutionID.
func (r *Runtime) parentExecution(ctx context.Context, parent string) uint64 {
	st, err := r.p.GetInstanceStats(ctx, parent)
	if err != nil || st == nil || st.ExecutionID == 0 {
		return 1
	}
	return st.ExecutionID
}

func (r *Runtime) abandonOrchestration(ctx context.Context, item *durable.OrchestrationItem, delay time.Duration, ignoreAttempt bool, log *zap.Logger) {
	cctx, cancel := commitCtx(ctx)
	defer cancel()
	if err := retryCommit(cctx, func(c context.Context) error {
		return r.p.AbandonOrchestrationItem(c, item.LockToken, delay, ignoreAttempt)
	}); err != nil {
		log.Warn("abandon failed", zap.Error(err))
	}
}

// poisonOrchestration ends an instance whose messages exceeded MaxAttempts.
func (r *Runtime) poisonOrchestration(ctx context.Context, item *durable.OrchestrationItem, log *zap.Logger) {
	msg, _ := json.Marshal(item.Messages)
	details := history.PoisonError(history.PoisonDetails{
		AttemptCount: item.AttemptCount, MaxAttempts: r.opts.MaxAttempts, Type: history.PoisonOrchestration,
		Instance: item.Instance, ExecutionID: max(item.ExecutionID, 1), Message: string(msg),
	})
	if item.HistoryError != "" {
		details.Poison.Type = history.PoisonFailedDeserialization
		details.Poison.DecodeError = item.HistoryError
	}
	turn := r.failureTurn(item, details)
	if turn.Metadata.Status == durable.StatusFailed {
		log.Error("orchestration poisoned", zap.String("error", details.DisplayMessage()))
	} else {
		log.Warn("dropping poison messages of an instance that never started or has ended")
	}
	r.commitTurn(ctx, item, turn, log)
}

// failureTurn is the turn that fails item's orchestration with details,
// consuming its messages: the start and the failure for an instance whose
// start is among them, the failure after its history otherwise (and a
// failure for its parent, if any). An instance that never started (no
// start among the messages) or has ended gets a turn that only consumes
// the messages (its Metadata.Status is not Failed).
func (r *Runtime) failureTurn(item *durable.OrchestrationItem, details history.ErrorDetails) durable.OrchestrationTurn {
	now := uint64(r.opts.Clock().UnixMilli())
	rv := r.opts.RuntimeVersion.String()
	execID := max(item.ExecutionID, 1)
	ev := func(id uint64, k history.EventKind) history.Event {
		return history.Event{EventID: id, InstanceID: item.Instance, ExecutionID: execID, TimestampMS: now, RuntimeVersion: rv, Kind: k}
	}
	turn := durable.OrchestrationTurn{ExecutionID: execID}
	var parent string
	var parentExec, parentID uint64
	switch {
	case item.HistoryError != "":
		turn.HistoryDelta = []history.Event{ev(CorruptHistoryEventID, history.OrchestrationFailed{Details: details})}
	case len(item.History) == 0:
		var start *durable.StartOrchestration
		for _, m := range item.Messages {
			if s, ok := m.(durable.StartOrchestration); ok {
				start = &s
				break
			}
		}
		if start == nil {
			return turn
		}
		parent, parentExec, parentID = start.ParentInstance, start.ParentExecutionID, start.ParentID
		turn.HistoryDelta = []history.Event{
			ev(1, history.OrchestrationStarted{Name: start.Orchestration, Version: start.Version, Input: start.Input,
				ParentInstance: parent, ParentExecutionID: parentExec, ParentID: parentID}),
			ev(2, history.OrchestrationFailed{Details: details}),
		}
		pv := *r.opts.RuntimeVersion
		turn.Metadata = durable.ExecutionMetadata{OrchestrationName: start.Orchestration, OrchestrationVersion: start.Version, ParentInstanceID: parent, PinnedVersion: &pv}
	case item.History[len(item.History)-1].IsTerminal():
		return turn
	default:
		if st, ok := item.History[0].Kind.(history.OrchestrationStarted); ok {
			parent, parentExec, parentID = st.ParentInstance, st.ParentExecutionID, st.ParentID
		}
		last := item.History[len(item.History)-1].EventID
		turn.HistoryDelta = []history.Event{ev(last+1, history.OrchestrationFailed{Details: details})}
	}
	out := details.DisplayMessage()
	turn.Metadata.Status, turn.Metadata.Output = durable.StatusFailed, &out
	if parent != "" {
		turn.OrchestratorItems = append(turn.OrchestratorItems, durable.SubOrchFailed{
			ParentInstance: parent, ParentExecutionID: parentExec, ParentID: parentID, Details: details})
	}
	return turn
}
