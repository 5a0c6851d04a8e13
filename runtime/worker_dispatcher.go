package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/internal/clock"
	"github.com/durafeed/durafeed/runtime/replay"
)

// ErrLockLost is the cause (context.Cause) of an activity context
// cancelled because the activity's lock could not be renewed: the activity
// was cancelled by its orchestration (lock stealing) or taken over.
var ErrLockLost = errors.New("activity lock lost")

// ActivityInfo describes the activity an activity function is running.
type ActivityInfo struct {
	Instance     string
	ExecutionID  uint64
	Name         string
	ActivityID   uint64
	SessionID    string
	Tag          string
	Attempt      uint32
	WorkerNodeID string
}

type activityInfoKey struct{}
type clientKey struct{}

// ActivityInfoFrom returns the ActivityInfo of the activity whose context
// is ctx.
func ActivityInfoFrom(ctx context.Context) (ActivityInfo, bool) {
	info, ok := ctx.Value(activityInfoKey{}).(ActivityInfo)
	return info, ok
}

// ClientFrom returns a Client on the runtime's provider from an activity
// context (nil outside activities).
func ClientFrom(ctx context.Context) *Client {
	c, _ := ctx.Value(clientKey{}).(*Client)
	return c
}

// workerLoop is one worker dispatcher goroutine. It reports an
// activity's outcome (the ack, or an abandon) in a goroutine of its own
// while it fetches and runs the next item: the report's round trip is off
// the dispatcher's path. At most one report per dispatcher is in flight:
// the next waits for it, and so does the loop's return.
func (r *Runtime) workerLoop(pollCtx, workCtx context.Context) {
	session := &durable.SessionFetchConfig{OwnerID: r.opts.WorkerNodeID, LockTimeout: r.opts.SessionLockTimeout}
	var reported chan struct{} // closed when the report in flight has ended
	defer func() {
		if reported != nil {
			<-reported
		}
	}()
	for pollCtx.Err() == nil {
		started := time.Now()
		lw, err := r.p.FetchWorkItem(pollCtx, r.opts.WorkerLockTimeout, r.opts.PollTimeout, session, r.opts.TagFilter)
		if err != nil {
			if pollCtx.Err() == nil {
				r.log.Warn("fetch work item failed", zap.Error(err))
			}
			clock.Sleep(pollCtx, r.opts.IdleBackoff)
			continue
		}
		if lw == nil {
			clock.Sleep(pollCtx, r.opts.IdleBackoff-time.Since(started))
			continue
		}
		report := r.processActivity(workCtx, lw)
		if report == nil {
			continue
		}
		if reported != nil {
			<-reported
		}
		done := make(chan struct{})
		reported = done
		go func() {
			defer close(done)
			report()
		}()
	}
}

// processActivity runs one activity and returns the report of its
// outcome to the provider (nil when there is none to make: the lock was
// lost).
func (r *Runtime) processActivity(ctx context.Context, lw *durable.LockedWorkItem) (report func()) {
	act, ok := lw.Item.(durable.ActivityExecute)
	if !ok {
		r.log.Error("unexpected worker item; abandoning", zap.String("kind", lw.Item.Kind()))
		return func() { r.abandonWork(ctx, lw, r.opts.FailureBackoff, false) }
	}
	log := r.log.With(zap.String("instance", act.Instance), zap.String("activity", act.Name),
		zap.Uint64("activity_id", act.ID), zap.Uint32("attempt", lw.AttemptCount))

	if lw.AttemptCount > r.opts.MaxAttempts {
		msg, _ := json.Marshal(act)
		d := history.PoisonError(history.PoisonDetails{
			AttemptCount: lw.AttemptCount, MaxAttempts: r.opts.MaxAttempts, Type: history.PoisonActivity,
			Instance: act.Instance, ExecutionID: act.ExecutionID, ActivityName: act.Name, ActivityID: act.ID, Message: string(msg),
		})
		log.Error("activity poisoned")
		return func() { r.ackWork(ctx, lw, failedCompletion(act, d), log) }
	}

	began := time.Now()
	sctx, span := r.ins.startActivity(ctx, act, lw.AttemptCount)
	outcome := "interrupted"
	var runErr error
	defer func() { r.ins.endActivity(sctx, span, act.Name, outcome, runErr, began) }()
	actCtx, cancel := context.WithCancelCause(sctx)
	defer cancel(nil)
	actCtx = context.WithValue(actCtx, activityInfoKey{}, ActivityInfo{
		Instance: act.Instance, ExecutionID: act.ExecutionID, Name: act.Name, ActivityID: act.ID,
		SessionID: act.SessionID, Tag: act.Tag, Attempt: lw.AttemptCount, WorkerNodeID: r.opts.WorkerNodeID,
	})
	actCtx = context.WithValue(actCtx, clientKey{}, r.cli)
	rn := startRenewer(actCtx, r.opts.WorkerLockTimeout/2, func(c context.Context) error {
		return r.p.RenewWorkItemLock(c, lw.LockToken, r.opts.WorkerLockTimeout)
	}, func(err error) {
		log.Info("activity lock lost; cancelling the activity", zap.Error(err))
		cancel(fmt.Errorf("%w: %w", ErrLockLost, err))
	})
	log.Debug("activity started", r.payload("input", act.Input))
	result, err := r.runActivity(actCtx, act)
	rn.Stop()
	runErr = err

	if cause := context.Cause(actCtx); errors.Is(cause, ErrLockLost) {
		log.Info("activity result dropped: lock lost")
		outcome = "lock_lost"
		return nil
	}
	if ctx.Err() != nil {
		// Shutdown deadline: hand the activity to another runtime.
		log.Info("activity interrupted by shutdown; abandoning")
		return func() { r.abandonWork(ctx, lw, 0, true) }
	}
	var completion durable.WorkItem
	if err != nil {
		var d history.ErrorDetails
		if !errors.As(err, &d) || d.Validate() != nil || d.Category == history.CategoryApplication && d.Kind == "" {
			d = history.ApplicationError(history.AppActivityFailed, err.Error(), false)
		}
		log.Debug("activity failed", zap.String("error", d.DisplayMessage()))
		completion = failedCompletion(act, d)
		outcome = "failed"
	} else {
		outcome = "completed"
		log.Debug("activity completed", r.payload("output", result))
		completion = durable.ActivityCompleted{Instance: act.Instance, ExecutionID: act.ExecutionID, ID: act.ID, Result: result}
	}
	return func() { r.ackWork(ctx, lw, completion, log) }
}

func failedCompletion(act durable.ActivityExecute, d history.ErrorDetails) durable.ActivityFailed {
	return durable.ActivityFailed{Instance: act.Instance, ExecutionID: act.ExecutionID, ID: act.ID, Details: d}
}

// runActivity calls the activity code, turning a panic into a failure.
func (r *Runtime) runActivity(ctx context.Context, act durable.ActivityExecute) (out string, err error) {
	if act.Name == replay.SystemActivityGetKV {
		return r.systemGetKV(ctx, act.Input)
	}
	fn, ok := r.reg.activity(act.Name)
	if !ok {
		return "", history.ConfigurationError(history.ConfigUnregistered, act.Name, "activity "+act.Name+" is not registered")
	}
	defer func() {
		if p := recover(); p != nil {
			err = history.ApplicationError(history.AppPanicked, fmt.Sprintf("%v\n%s", p, debug.Stack()), false)
		}
	}()
	return fn(ctx, act.Input)
}

// systemGetKV implements replay.SystemActivityGetKV.
func (r *Runtime) systemGetKV(ctx context.Context, input string) (string, error) {
	var req replay.KVReadRequest
	if err := json.Unmarshal([]byte(input), &req); err != nil {
		return "", history.ConfigurationError(history.ConfigBadInput, replay.SystemActivityGetKV, err.Error())
	}
	v, found, err := r.p.GetKVValue(ctx, req.Instance, req.Key)
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(replay.KVReadResponse{Found: found, Value: v})
	return string(b), nil
}

func (r *Runtime) ackWork(ctx context.Context, lw *durable.LockedWorkItem, completion durable.WorkItem, log *zap.Logger) {
	cctx, cancel := commitCtx(ctx)
	defer cancel()
	err := retryCommit(cctx, func(c context.Context) error { return r.p.AckWorkItem(c, lw.LockToken, completion) })
	if err == nil {
		return
	}
	if !durable.IsRetryable(err) {
		log.Info("activity ack rejected (cancelled or lock lost)", zap.Error(err))
		return
	}
	log.Warn("activity ack failed; abandoning", zap.Error(err))
	r.abandonWork(ctx, lw, r.opts.FailureBackoff, true)
}

func (r *Runtime) abandonWork(ctx context.Context, lw *durable.LockedWorkItem, delay time.Duration, ignoreAttempt bool) {
	cctx, cancel := commitCtx(ctx)
	defer cancel()
	if err := retryCommit(cctx, func(c context.Context) error {
		return r.p.AbandonWorkItem(c, lw.LockToken, delay, ignoreAttempt)
	}); err != nil {
		r.log.Warn("abandon work item failed", zap.Error(err))
	}
}
