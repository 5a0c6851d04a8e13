package runtime

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/durafeed/durafeed/durable"
)

// errCrashed is the error of every provider call a crashed runtime's
// dispatchers attempt after Crash (they are refused, not sent).
var errCrashed = durable.Permanent("runtime", nil, "the runtime crashed (Runtime.Crash)")

// Crasher is a provider that can stop as a killed process would, releasing
// nothing (provider.Provider.Crash).
type Crasher interface {
	Crash()
}

// Crash stops the runtime as a killed process would, for failover drills
// and tests: from the moment it is called, its dispatchers send no
// further provider call (no ack, abandon, renewal or fetch: in-flight
// turns and activities are cut off with their context cancelled, and
// their locks are left to expire or to be freed by the replica that takes
// this one's leases over), and a provider that implements Crasher is
// crashed first. Requests already on the wire may still land, as they
// would after a real kill. Crash returns once every dispatcher goroutine
// has exited; the runtime cannot be started again. Calls after the first,
// and on a runtime that is not running, only crash the provider.
func (r *Runtime) Crash() {
	r.dead.Store(true)
	if c, ok := r.raw.(Crasher); ok {
		c.Crash()
	}
	r.mu.Lock()
	if !r.running {
		r.mu.Unlock()
		return
	}
	r.running = false
	pollCancel, workCancel := r.pollCancel, r.workCancel
	r.mu.Unlock()
	pollCancel()
	workCancel()
	r.wg.Wait()
	r.log.Info("runtime crashed (drill): nothing released")
}

// crashGate is the provider the dispatchers use: it refuses every call
// once the runtime has crashed.
type crashGate struct {
	durable.Provider
	dead *atomic.Bool
}

func (g crashGate) FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *durable.DispatcherCapabilityFilter) (*durable.OrchestrationItem, error) {
	if g.dead.Load() {
		return nil, errCrashed
	}
	return g.Provider.FetchOrchestrationItem(ctx, lockTimeout, pollTimeout, filter)
}

func (g crashGate) AckOrchestrationItem(ctx context.Context, lockToken string, turn durable.OrchestrationTurn) error {
	if g.dead.Load() {
		return errCrashed
	}
	return g.Provider.AckOrchestrationItem(ctx, lockToken, turn)
}

func (g crashGate) AbandonOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	if g.dead.Load() {
		return errCrashed
	}
	return g.Provider.AbandonOrchestrationItem(ctx, lockToken, delay, ignoreAttempt)
}

func (g crashGate) RenewOrchestrationItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	if g.dead.Load() {
		return errCrashed
	}
	return g.Provider.RenewOrchestrationItemLock(ctx, lockToken, extendFor)
}

func (g crashGate) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *durable.SessionFetchConfig, tags durable.TagFilter) (*durable.LockedWorkItem, error) {
	if g.dead.Load() {
		return nil, errCrashed
	}
	return g.Provider.FetchWorkItem(ctx, lockTimeout, pollTimeout, session, tags)
}

func (g crashGate) AckWorkItem(ctx context.Context, lockToken string, completion durable.WorkItem) error {
	if g.dead.Load() {
		return errCrashed
	}
	return g.Provider.AckWorkItem(ctx, lockToken, completion)
}

func (g crashGate) AbandonWorkItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	if g.dead.Load() {
		return errCrashed
	}
	return g.Provider.AbandonWorkItem(ctx, lockToken, delay, ignoreAttempt)
}

func (g crashGate) RenewWorkItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	if g.dead.Load() {
		return errCrashed
	}
	return g.Provider.RenewWorkItemLock(ctx, lockToken, extendFor)
}

func (g crashGate) RenewSessionLock(ctx context.Context, ownerIDs []string, extendFor, idleTimeout time.Duration) (int, error) {
	if g.dead.Load() {
		return 0, errCrashed
	}
	return g.Provider.RenewSessionLock(ctx, ownerIDs, extendFor, idleTimeout)
}

func (g crashGate) EnqueueForOrchestrator(ctx context.Context, item durable.WorkItem, delay time.Duration) error {
	if g.dead.Load() {
		return errCrashed
	}
	return g.Provider.EnqueueForOrchestrator(ctx, item, delay)
}

func (g crashGate) EnqueueForWorker(ctx context.Context, item durable.WorkItem) error {
	if g.dead.Load() {
		return errCrashed
	}
	return g.Provider.EnqueueForWorker(ctx, item)
}
