package runtime

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/internal/clock"
)

// ErrNotRunning is returned by Shutdown on a runtime that is not running.
var ErrNotRunning = errors.New("runtime is not running")

// Runtime runs orchestrations and activities from a Registry against a
// durable.Provider: orchestration dispatchers fetch, replay and commit
// turns; worker dispatchers run activities. Several runtimes (processes)
// may share one provider. Start it with Start and stop it with Shutdown.
type Runtime struct {
	// p is the dispatchers' provider (raw behind a crash gate); raw the
	// caller's, which the client uses.
	p    durable.Provider
	raw  durable.Provider
	dead *atomic.Bool
	reg  *Registry
	opts Options
	log  *zap.Logger
	cli  *Client
	ins  *instruments

	mu      sync.Mutex
	running bool
	// pollCancel stops fetching; workCancel aborts in-flight work.
	pollCancel context.CancelFunc
	workCancel context.CancelFunc
	wg         sync.WaitGroup
}

// New returns a runtime for provider and registry; it does not start it.
func New(p durable.Provider, reg *Registry, opts Options) *Runtime {
	o := opts.withDefaults(p)
	dead := &atomic.Bool{}
	return &Runtime{p: crashGate{Provider: p, dead: dead}, raw: p, dead: dead, reg: reg, opts: o,
		log: o.Logger.With(zap.String("node", o.WorkerNodeID)), cli: NewClient(p),
		ins: newInstruments(o.TracerProvider, o.MeterProvider)}
}

// Start starts the dispatchers. They run until Shutdown.
func (r *Runtime) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running {
		return errors.New("runtime already running")
	}
	if r.dead.Load() {
		return errors.New("runtime crashed (Crash); it cannot be started again")
	}
	pollCtx, pollCancel := context.WithCancel(context.Background())
	workCtx, workCancel := context.WithCancel(context.Background())
	r.pollCancel, r.workCancel, r.running = pollCancel, workCancel, true
	for i := 0; i < r.opts.OrchestrationConcurrency; i++ {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.orchestrationLoop(pollCtx, workCtx)
		}()
	}
	if r.opts.WorkerConcurrency > 0 {
		for i := 0; i < r.opts.WorkerConcurrency; i++ {
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.workerLoop(pollCtx, workCtx)
			}()
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.sessionLoop(pollCtx)
		}()
	}
	r.log.Info("runtime started",
		zap.Int("orchestration_concurrency", r.opts.OrchestrationConcurrency),
		zap.Int("worker_concurrency", r.opts.WorkerConcurrency),
		zap.Stringer("runtime_version", r.opts.RuntimeVersion),
		zap.Stringer("tags", r.opts.TagFilter))
	return nil
}

// Shutdown stops fetching new work at once and waits for in-flight turns
// and activities to finish. When ctx ends first, in-flight work is
// cancelled (activities see their context cancelled; their items are
// abandoned so another runtime takes them over) and Shutdown returns
// ctx.Err() once every goroutine has exited.
func (r *Runtime) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	if !r.running {
		r.mu.Unlock()
		return ErrNotRunning
	}
	r.running = false
	pollCancel, workCancel := r.pollCancel, r.workCancel
	r.mu.Unlock()

	pollCancel()
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		workCancel()
		<-done
	}
	workCancel()
	r.log.Info("runtime stopped")
	return err
}

// Client returns a client on the runtime's provider.
func (r *Runtime) Client() *Client { return r.cli }

// commitCtx returns a context for committing work that was done: it
// survives the cancellation of ctx for a short grace period, so a finished
// turn or activity is still acked or abandoned during shutdown.
func commitCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
}

// retryCommit runs op, retrying retryable provider errors a few times.
func retryCommit(ctx context.Context, op func(context.Context) error) error {
	var err error
	delay := 20 * time.Millisecond
	for attempt := 0; attempt < 5; attempt++ {
		if err = op(ctx); err == nil || !durable.IsRetryable(err) {
			return err
		}
		if !clock.Sleep(ctx, delay) {
			return err
		}
		delay *= 2
	}
	return err
}

// renewer renews a lock every interval until stopped; onLost is called
// (once) when renewal fails permanently.
type renewer struct {
	stop chan struct{}
	done chan struct{}
}

func startRenewer(ctx context.Context, interval time.Duration, renew func(context.Context) error, onLost func(error)) *renewer {
	rn := &renewer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(rn.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-rn.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if err := renew(ctx); err != nil && !durable.IsRetryable(err) && ctx.Err() == nil {
					onLost(err)
					return
				}
			}
		}
	}()
	return rn
}

// Stop ends the renewal goroutine and waits for it.
func (rn *renewer) Stop() {
	close(rn.stop)
	<-rn.done
}

// payload returns a log field for a payload, redacted unless LogPayloads.
func (r *Runtime) payload(key, v string) zap.Field {
	if r.opts.LogPayloads {
		return zap.String(key, v)
	}
	return zap.Int(key+"_bytes", len(v))
}

// sessionLoop renews this node's sessions and sweeps orphaned ones.
func (r *Runtime) sessionLoop(ctx context.Context) {
	renewEvery := r.opts.SessionLockTimeout / 2
	renew := time.NewTicker(renewEvery)
	defer renew.Stop()
	cleanup := time.NewTicker(r.opts.SessionCleanupInterval)
	defer cleanup.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-renew.C:
			if n, err := r.p.RenewSessionLock(ctx, []string{r.opts.WorkerNodeID}, r.opts.SessionLockTimeout, r.opts.SessionIdleTimeout); err != nil {
				if ctx.Err() == nil {
					r.log.Warn("session renewal failed", zap.Error(err))
				}
			} else if n > 0 {
				r.log.Debug("sessions renewed", zap.Int("count", n))
			}
		case <-cleanup.C:
			if n, err := r.p.CleanupOrphanedSessions(ctx, r.opts.SessionIdleTimeout); err != nil {
				if ctx.Err() == nil {
					r.log.Warn("session cleanup failed", zap.Error(err))
				}
			} else if n > 0 {
				r.log.Debug("orphaned sessions removed", zap.Int("count", n))
			}
		}
	}
}
