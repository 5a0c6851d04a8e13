// Package runtimetest is the end-to-end sample suite of the durafeed
// runtime, written against any durable.Provider so that every provider
// (the in-memory reference, the Cosmos DB provider) runs the same samples:
//
//	func TestSamples(t *testing.T) {
//		runtimetest.RunSamples(t, func(t testing.TB) func() durable.Provider {
//			store := memprovider.NewStore()
//			return store.Open
//		})
//	}
//
// Each sample is a realistic orchestration scenario modelled on duroxide's
// e2e samples; it starts one or more runtimes on a fresh store, drives
// instances through a Client and checks outcomes and histories.
package runtimetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/runtime"
)

// Factory creates a fresh, empty store for one sample and returns a
// function that opens provider handles on it; every handle sees the same
// data (like replicas of one deployment).
type Factory func(t testing.TB) (open func() durable.Provider)

// Sample is one end-to-end scenario.
type Sample struct {
	Name string
	Run  func(t *testing.T, f Factory)
}

// RunSamples runs every sample as a parallel subtest.
func RunSamples(t *testing.T, f Factory) {
	for _, s := range Samples() {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			s.Run(t, f)
		})
	}
}

// Timeout bounds how long a sample waits for an instance: long enough
// that only a hang reaches it on a loaded machine (a sample takes seconds
// alone; with the suite running twice on 2 cores, several times that).
const Timeout = 2 * time.Minute

// FastOptions are runtime options suited to tests: short idle backoff and
// lock timeouts, and a logger bound to t.
func FastOptions(t testing.TB) runtime.Options {
	return runtime.Options{
		IdleBackoff:              2 * time.Millisecond,
		OrchestratorLockTimeout:  5 * time.Second,
		WorkerLockTimeout:        5 * time.Second,
		PollTimeout:              50 * time.Millisecond,
		FailureBackoff:           20 * time.Millisecond,
		UnregisteredBackoff:      20 * time.Millisecond,
		WorkerConcurrency:        4,
		OrchestrationConcurrency: 4,
		Logger:                   zaptest.NewLogger(t, zaptest.Level(zapcore.WarnLevel)),
	}
}

// Env is a sample's environment: a store, a registry and a client.
type Env struct {
	T      *testing.T
	Open   func() durable.Provider
	Reg    *runtime.Registry
	Client *runtime.Client
}

// NewEnv creates an environment on a fresh store.
func NewEnv(t *testing.T, f Factory) *Env {
	open := f(t)
	return &Env{T: t, Open: open, Reg: runtime.NewRegistry(), Client: runtime.NewClient(open())}
}

// Start starts a runtime on a new provider handle with the registry reg
// (the Env's registry if nil) and stops it when the test ends.
func (e *Env) Start(reg *runtime.Registry, opts runtime.Options) *runtime.Runtime {
	if reg == nil {
		reg = e.Reg
	}
	rt := runtime.New(e.Open(), reg, opts)
	require.NoError(e.T, rt.Start())
	e.T.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
	})
	return rt
}

// StartDefault starts a runtime with FastOptions.
func (e *Env) StartDefault() *runtime.Runtime { return e.Start(nil, FastOptions(e.T)) }

// Ctx returns a context bounded by Timeout.
func (e *Env) Ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	e.T.Cleanup(cancel)
	return ctx
}

// Wait waits for instance to finish.
func (e *Env) Wait(instance string) runtime.Status {
	e.T.Helper()
	st, err := e.Client.WaitForOrchestration(e.Ctx(), instance)
	require.NoError(e.T, err, "waiting for %s", instance)
	return st
}

// RequireCompleted waits for instance and decodes its output into out.
func (e *Env) RequireCompleted(instance string, out any) {
	e.T.Helper()
	st := e.Wait(instance)
	if st.State != runtime.StateCompleted {
		msg := ""
		if st.Failure != nil {
			msg = st.Failure.DisplayMessage()
		}
		e.T.Fatalf("instance %s: state %s, failure %s", instance, st.State, msg)
	}
	if out != nil {
		require.NoError(e.T, st.DecodeOutput(out))
	}
}

// RequireFailed waits for instance and returns its failure.
func (e *Env) RequireFailed(instance string) history.ErrorDetails {
	e.T.Helper()
	st := e.Wait(instance)
	require.Equal(e.T, runtime.StateFailed, st.State, "instance %s output %s", instance, st.Output)
	require.NotNil(e.T, st.Failure)
	return *st.Failure
}

// WaitForSubscription waits until instance has recorded a subscription
// to external event name (ExternalSubscribed) in its current execution,
// so that a raised event is not dropped as early.
func (e *Env) WaitForSubscription(instance, name string, count int) {
	e.T.Helper()
	e.waitHistory(instance, func(events []history.Event) bool {
		n := 0
		for _, ev := range events {
			if s, ok := ev.Kind.(history.ExternalSubscribed); ok && s.Name == name {
				n++
			}
		}
		return n >= count
	})
}

// WaitForEvent waits until instance's current history satisfies pred.
func (e *Env) waitHistory(instance string, pred func([]history.Event) bool) {
	e.T.Helper()
	ctx := e.Ctx()
	delay := time.Millisecond
	for {
		events, err := e.Client.ReadHistory(ctx, instance)
		if err == nil && pred(events) {
			return
		}
		select {
		case <-ctx.Done():
			e.T.Fatalf("timed out waiting for history of %s", instance)
		case <-time.After(delay):
		}
		delay = min(delay*2, 50*time.Millisecond)
	}
}

// WaitStarted waits until instance has a history.
func (e *Env) WaitStarted(instance string) {
	e.T.Helper()
	e.waitHistory(instance, func(events []history.Event) bool { return len(events) > 0 })
}

// CountKinds counts events of each kind in a history.
func CountKinds(events []history.Event) map[string]int {
	out := map[string]int{}
	for _, ev := range events {
		out[ev.Kind.KindName()]++
	}
	return out
}
