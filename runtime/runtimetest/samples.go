package runtimetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/runtime"
)

// Samples returns the sample suite.
func Samples() []Sample {
	return []Sample{
		{"HelloWorld", sampleHelloWorld},
		{"ControlFlow", sampleControlFlow},
		{"Loop", sampleLoop},
		{"ErrorHandlingAndRecovery", sampleErrorHandling},
		{"RetryWithBackoff", sampleRetry},
		{"TimerRacesActivity", sampleTimerRace},
		{"SelectActivityVsEvent", sampleSelectActivityVsEvent},
		{"StatusPolling", sampleStatusPolling},
		{"SubOrchestrationBasic", sampleSubOrchBasic},
		{"SubOrchestrationFanOut", sampleSubOrchFanOut},
		{"SubOrchestrationChained", sampleSubOrchChained},
		{"DetachedOrchestrations", sampleDetached},
		{"ContinueAsNew", sampleContinueAsNew},
		{"TypedActivitiesAndEvents", sampleTyped},
		{"DeterministicTimeAndGUID", sampleDeterministicValues},
		{"VersioningStartLatestVsExact", sampleVersioningStart},
		{"VersioningSubOrchestration", sampleVersioningSubOrch},
		{"VersioningContinueAsNewUpgrade", sampleVersioningCANUpgrade},
		{"CancellationCascadesToChildren", sampleCancellationCascade},
		{"NestedErrors", sampleNestedErrors},
		{"BadInputPanicsAndUnregistered", sampleBadInputs},
		{"SelfPruningEternalOrchestration", sampleSelfPruning},
		{"PersistentEventConfigReload", sampleConfigReload},
		{"HeterogeneousWorkersWithTags", sampleTags},
		{"KVRequestResponse", sampleKVRequestResponse},
		{"KVCrossOrchestrationRead", sampleKVCrossRead},
		{"KVCounter", sampleKVCounter},
		{"SessionAffinity", sampleSessions},
		{"TwoRuntimesOneStopped", sampleTwoRuntimes},
		{"FanOutFanIn50Activities", sampleFanOutFanIn},
		{"HumanApprovalEventRacesTimeout", sampleHumanApproval},
		{"TwoRuntimesCooperateOnTags", sampleTagsTwoRuntimes},
		{"LargeFanOut200ActivitiesTwoRuntimes", sampleLargeFanOutTwoRuntimes},
		{"LateChildCompletionAfterContinueAsNew", sampleLateChildAfterContinueAsNew},
	}
}

func greetActivity(reg *runtime.Registry) {
	runtime.RegisterActivity(reg, "Greet", func(_ context.Context, name string) (string, error) {
		return "Hello, " + name + "!", nil
	})
}

func sampleHelloWorld(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	greetActivity(e.Reg)
	runtime.RegisterOrchestration(e.Reg, "HelloWorld", func(ctx *runtime.OrchestrationContext, name string) (string, error) {
		ctx.Logger().Info("greeting")
		return runtime.AwaitAs[string](ctx.CallActivity("Greet", name))
	})
	e.StartDefault()
	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "hello-1", "HelloWorld", "Rust"))
	var out string
	e.RequireCompleted("hello-1", &out)
	require.Equal(t, "Hello, Rust!", out)

	// A second start of the same instance does not restart it.
	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "hello-1", "HelloWorld", "Again"))
	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "hello-2", "HelloWorld", "Two"))
	e.RequireCompleted("hello-2", nil)
	events, err := e.Client.ReadHistory(e.Ctx(), "hello-1")
	require.NoError(t, err)
	require.Equal(t, 1, CountKinds(events)["OrchestrationStarted"])
	require.Equal(t, 1, CountKinds(events)["OrchestrationCompleted"])
	for i, ev := range events {
		require.Equal(t, uint64(i+1), ev.EventID, "contiguous event ids")
	}
}

func sampleControlFlow(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	runtime.RegisterActivity(e.Reg, "GetFlag", func(_ context.Context, _ string) (bool, error) { return true, nil })
	runtime.RegisterActivity(e.Reg, "SayYes", func(_ context.Context, _ string) (string, error) { return "picked_yes", nil })
	runtime.RegisterActivity(e.Reg, "SayNo", func(_ context.Context, _ string) (string, error) { return "picked_no", nil })
	runtime.RegisterOrchestration(e.Reg, "ControlFlow", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		flag, err := runtime.AwaitAs[bool](ctx.CallActivity("GetFlag", ""))
		if err != nil {
			return "", err
		}
		if flag {
			return runtime.AwaitAs[string](ctx.CallActivity("SayYes", ""))
		}
		return runtime.AwaitAs[string](ctx.CallActivity("SayNo", ""))
	})
	e.StartDefault()
	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "cf-1", "ControlFlow", ""))
	var out string
	e.RequireCompleted("cf-1", &out)
	require.Equal(t, "picked_yes", out)
}

func sampleLoop(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	runtime.RegisterActivity(e.Reg, "Append", func(_ context.Context, s string) (string, error) { return s + "x", nil })
	runtime.RegisterOrchestration(e.Reg, "Loop", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		acc := "start"
		for i := 0; i < 5; i++ {
			v, err := runtime.AwaitAs[string](ctx.CallActivity("Append", acc))
			if err != nil {
				return "", err
			}
			acc = v
		}
		return acc, nil
	})
	e.StartDefault()
	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "loop-1", "Loop", ""))
	var out string
	e.RequireCompleted("loop-1", &out)
	require.Equal(t, "startxxxxx", out)
}

func sampleErrorHandling(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	runtime.RegisterActivity(e.Reg, "Fragile", func(_ context.Context, mode string) (string, error) {
		if mode == "bad" {
			return "", errors.New("fragile failed")
		}
		return "ok", nil
	})
	runtime.RegisterActivity(e.Reg, "Recover", func(_ context.Context, _ string) (string, error) { return "recovered", nil })
	runtime.RegisterOrchestration(e.Reg, "ErrorHandling", func(ctx *runtime.OrchestrationContext, mode string) (string, error) {
		v, err := runtime.AwaitAs[string](ctx.CallActivity("Fragile", mode))
		if err != nil {
			var d runtime.ErrorDetails
			if !errors.As(err, &d) || d.Kind != string(history.AppActivityFailed) {
				return "", fmt.Errorf("unexpected error %v", err)
			}
			ctx.Logger().Warn("fragile failed; recovering")
			return runtime.AwaitAs[string](ctx.CallActivity("Recover", ""))
		}
		return v, nil
	})
	runtime.RegisterOrchestration(e.Reg, "Propagate", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		return runtime.AwaitAs[string](ctx.CallActivity("Fragile", "bad"))
	})
	e.StartDefault()
	ctx := e.Ctx()
	require.NoError(t, e.Client.StartOrchestration(ctx, "err-bad", "ErrorHandling", "bad"))
	require.NoError(t, e.Client.StartOrchestration(ctx, "err-good", "ErrorHandling", "good"))
	require.NoError(t, e.Client.StartOrchestration(ctx, "err-prop", "Propagate", ""))
	var out string
	e.RequireCompleted("err-bad", &out)
	require.Equal(t, "recovered", out)
	e.RequireCompleted("err-good", &out)
	require.Equal(t, "ok", out)
	d := e.RequireFailed("err-prop")
	require.Equal(t, history.CategoryApplication, d.Category)
	require.Equal(t, string(history.AppOrchestrationFailed), d.Kind)
	require.Contains(t, d.Message, "fragile failed")
}

func sampleRetry(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	var calls atomic.Int32
	runtime.RegisterActivity(e.Reg, "Flaky", func(_ context.Context, _ string) (string, error) {
		if calls.Add(1) < 3 {
			return "", errors.New("transient")
		}
		return "finally", nil
	})
	runtime.RegisterOrchestration(e.Reg, "Retry", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		policy := runtime.RetryPolicy{MaxAttempts: 5, Backoff: runtime.Backoff{Kind: runtime.BackoffExponential, Base: 10 * time.Millisecond, Multiplier: 2, Max: 50 * time.Millisecond}}
		return runtime.AwaitAs[string](ctx.CallActivity("Flaky", "", runtime.WithRetry(policy)))
	})
	e.StartDefault()
	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "retry-1", "Retry", ""))
	var out string
	e.RequireCompleted("retry-1", &out)
	require.Equal(t, "finally", out)
	events, err := e.Client.ReadHistory(e.Ctx(), "retry-1")
	require.NoError(t, err)
	k := CountKinds(events)
	require.Equal(t, 3, k["ActivityScheduled"])
	require.Equal(t, 2, k["TimerCreated"], "backoff waits are durable timers")
}

func sampleTimerRace(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	runtime.RegisterActivity(e.Reg, "Slow", func(ctx context.Context, _ string) (string, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "slow", nil
	})
	runtime.RegisterActivity(e.Reg, "Fast", func(_ context.Context, _ string) (string, error) { return "fast", nil })
	race := func(activity string) func(*runtime.OrchestrationContext, string) (string, error) {
		return func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
			act := ctx.CallActivity(activity, "")
			// Long enough that "Fast" wins on a loaded machine (its
			// activity is a few round trips; under -race with every
			// package's tests running, 200 ms was sometimes too short),
			// while "Slow" never returns before its release.
			w, err := ctx.Select(act, ctx.CreateTimer(2*time.Second))
			if err != nil {
				return "", err
			}
			if w == 1 {
				return "timeout", nil
			}
			return runtime.AwaitAs[string](act)
		}
	}
	runtime.RegisterOrchestration(e.Reg, "RaceSlow", race("Slow"))
	runtime.RegisterOrchestration(e.Reg, "RaceFast", race("Fast"))
	e.StartDefault()
	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "race-slow", "RaceSlow", ""))
	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "race-fast", "RaceFast", ""))
	var out string
	e.RequireCompleted("race-slow", &out)
	require.Equal(t, "timeout", out)
	e.RequireCompleted("race-fast", &out)
	require.Equal(t, "fast", out)
	events, err := e.Client.ReadHistory(e.Ctx(), "race-slow")
	require.NoError(t, err)
	require.Equal(t, 1, CountKinds(events)["ActivityCancelRequested"])
}

func sampleSelectActivityVsEvent(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	runtime.RegisterActivity(e.Reg, "Sleep", func(ctx context.Context, _ string) (string, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "slept", nil
	})
	runtime.RegisterOrchestration(e.Reg, "ActivityVsEvent", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		act := ctx.CallActivity("Sleep", "")
		ev := ctx.WaitForEvent("Go")
		w, err := ctx.Select(act, ev)
		if err != nil {
			return "", err
		}
		if w == 1 {
			d, err := runtime.AwaitAs[string](ev)
			return "event:" + d, err
		}
		return "activity", nil
	})
	e.StartDefault()
	ctx := e.Ctx()
	require.NoError(t, e.Client.StartOrchestration(ctx, "ave-1", "ActivityVsEvent", ""))
	e.WaitForSubscription("ave-1", "Go", 1)
	require.NoError(t, e.Client.RaiseEvent(ctx, "ave-1", "Go", "ok"))
	var out string
	e.RequireCompleted("ave-1", &out)
	require.Equal(t, "event:ok", out)
}

func sampleStatusPolling(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	runtime.RegisterOrchestration(e.Reg, "StatusSteps", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		for _, step := range []string{"step-1", "step-2"} {
			ctx.SetCustomStatus(step)
			if _, err := ctx.WaitForEvent("next").AwaitRaw(); err != nil {
				return "", err
			}
		}
		ctx.ResetCustomStatus()
		return "done", nil
	})
	e.StartDefault()
	ctx := e.Ctx()
	require.NoError(t, e.Client.StartOrchestration(ctx, "status-1", "StatusSteps", ""))
	var seen uint64
	for i, want := range []string{"step-1", "step-2"} {
		cs, err := e.Client.WaitForCustomStatus(ctx, "status-1", seen)
		require.NoError(t, err)
		require.NotNil(t, cs.Status)
		require.Equal(t, want, *cs.Status)
		seen = cs.Version
		e.WaitForSubscription("status-1", "next", i+1)
		require.NoError(t, e.Client.RaiseEvent(ctx, "status-1", "next", ""))
	}
	e.RequireCompleted("status-1", nil)
	cs, err := e.Client.GetCustomStatus(ctx, "status-1", seen)
	require.NoError(t, err)
	require.NotNil(t, cs)
	require.Nil(t, cs.Status, "reset clears the custom status")
}

func registerUpper(reg *runtime.Registry) {
	runtime.RegisterActivity(reg, "Upper", func(_ context.Context, s string) (string, error) { return strings.ToUpper(s), nil })
	runtime.RegisterOrchestration(reg, "ChildUpper", func(ctx *runtime.OrchestrationContext, s string) (string, error) {
		return runtime.AwaitAs[string](ctx.CallActivity("Upper", s))
	})
}

func sampleSubOrchBasic(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	registerUpper(e.Reg)
	runtime.RegisterOrchestration(e.Reg, "Parent", func(ctx *runtime.OrchestrationContext, s string) (string, error) {
		r, err := runtime.AwaitAs[string](ctx.CallSubOrchestration("ChildUpper", s))
		return "parent:" + r, err
	})
	e.StartDefault()
	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "sub-basic", "Parent", "hi"))
	var out string
	e.RequireCompleted("sub-basic", &out)
	require.Equal(t, "parent:HI", out)
	child := e.Wait("sub-basic::sub::2")
	require.Equal(t, runtime.StateCompleted, child.State, "auto child id <parent>::sub::<eventId>")
	info, err := e.Client.GetInstanceInfo(e.Ctx(), "sub-basic::sub::2")
	require.NoError(t, err)
	require.Equal(t, "sub-basic", info.ParentInstanceID)
}

func sampleSubOrchFanOut(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	registerUpper(e.Reg)
	runtime.RegisterOrchestration(e.Reg, "FanOut", func(ctx *runtime.OrchestrationContext, items []string) ([]string, error) {
		tasks := make([]*runtime.Task, len(items))
		for i, it := range items {
			tasks[i] = ctx.CallSubOrchestration("ChildUpper", it, runtime.WithInstanceID(fmt.Sprintf("%s-child-%d", ctx.InstanceID(), i)))
		}
		return runtime.JoinAs[string](ctx, tasks...)
	})
	e.StartDefault()
	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "fan", "FanOut", []string{"a", "b", "c", "d"}))
	var out []string
	e.RequireCompleted("fan", &out)
	require.Equal(t, []string{"A", "B", "C", "D"}, out)
	children, err := e.Client.ListInstances(e.Ctx())
	require.NoError(t, err)
	require.Len(t, children, 5)
}

func sampleSubOrchChained(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	registerUpper(e.Reg)
	runtime.RegisterOrchestration(e.Reg, "Middle", func(ctx *runtime.OrchestrationContext, s string) (string, error) {
		r, err := runtime.AwaitAs[string](ctx.CallSubOrchestration("ChildUpper", s+"-leaf"))
		return "mid(" + r + ")", err
	})
	runtime.RegisterOrchestration(e.Reg, "Root", func(ctx *runtime.OrchestrationContext, s string) (string, error) {
		r, err := runtime.AwaitAs[string](ctx.CallSubOrchestration("Middle", s))
		return "root(" + r + ")", err
	})
	e.StartDefault()
	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "chain", "Root", "x"))
	var out string
	e.RequireCompleted("chain", &out)
	require.Equal(t, "root(mid(X-LEAF))", out)
}

func sampleDetached(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	greetActivity(e.Reg)
	runtime.RegisterOrchestration(e.Reg, "Worker", func(ctx *runtime.OrchestrationContext, name string) (string, error) {
		return runtime.AwaitAs[string](ctx.CallActivity("Greet", name))
	})
	runtime.RegisterOrchestration(e.Reg, "Scheduler", func(ctx *runtime.OrchestrationContext, names []string) (string, error) {
		for _, n := range names {
			if err := ctx.StartOrchestration("Worker", n, runtime.WithInstanceID("detached-"+n)); err != nil {
				return "", err
			}
		}
		return runtime.AwaitAs[string](ctx.CallActivity("Greet", "scheduler"))
	})
	e.StartDefault()
	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "sched", "Scheduler", []string{"a", "b"}))
	var out string
	e.RequireCompleted("sched", &out)
	require.Equal(t, "Hello, scheduler!", out)
	for _, n := range []string{"a", "b"} {
		e.RequireCompleted("detached-"+n, &out)
		require.Equal(t, "Hello, "+n+"!", out)
		info, err := e.Client.GetInstanceInfo(e.Ctx(), "detached-"+n)
		require.NoError(t, err)
		require.Empty(t, info.ParentInstanceID, "detached orchestrations have no parent")
	}
}

func sampleContinueAsNew(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	runtime.RegisterOrchestration(e.Reg, "Counter", func(ctx *runtime.OrchestrationContext, n int) (string, error) {
		if n < 3 {
			ctx.SetCustomStatus(fmt.Sprint("at ", n))
			return "", ctx.ContinueAsNew(n + 1)
		}
		cs, _ := ctx.CustomStatus()
		return fmt.Sprintf("final %d (%s) exec %d", n, cs, ctx.ExecutionID()), nil
	})
	e.StartDefault()
	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "can-1", "Counter", 0))
	var out string
	e.RequireCompleted("can-1", &out)
	require.Equal(t, "final 3 (at 2) exec 4", out, "custom status carries forward")
	execs, err := e.Client.ListExecutions(e.Ctx(), "can-1")
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 3, 4}, execs)
	first, err := e.Client.ReadExecutionHistory(e.Ctx(), "can-1", 1)
	require.NoError(t, err)
	require.IsType(t, history.OrchestrationContinuedAsNew{}, first[len(first)-1].Kind)
}

type order struct {
	ID    string  `json:"id"`
	Items int     `json:"items"`
	Total float64 `json:"total"`
}

type receipt struct {
	OrderID  string `json:"order_id"`
	Approved bool   `json:"approved"`
	Charged  float64
}

func sampleTyped(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	runtime.RegisterActivity(e.Reg, "Charge", func(_ context.Context, o order) (float64, error) {
		return o.Total * 1.1, nil
	})
	runtime.RegisterActivity(e.Reg, "RawEcho", func(_ context.Context, s string) (string, error) { return "raw:" + s, nil })
	runtime.RegisterOrchestration(e.Reg, "Typed", func(ctx *runtime.OrchestrationContext, o order) (receipt, error) {
		charged, err := runtime.AwaitAs[float64](ctx.CallActivity("Charge", o))
		if err != nil {
			return receipt{}, err
		}
		var approval struct{ OK bool }
		if err := ctx.WaitForEvent("Approval").Await(&approval); err != nil {
			return receipt{}, err
		}
		// Mixed raw and typed: a raw call on a typed string activity.
		raw, err := ctx.CallActivityRaw("RawEcho", "plain").AwaitRaw()
		if err != nil || raw != `"raw:plain"` {
			return receipt{}, fmt.Errorf("raw call returned %q, %v", raw, err)
		}
		return receipt{OrderID: o.ID, Approved: approval.OK, Charged: charged}, nil
	})
	e.StartDefault()
	ctx := e.Ctx()
	require.NoError(t, e.Client.StartOrchestration(ctx, "typed-1", "Typed", order{ID: "o-1", Items: 2, Total: 10}))
	e.WaitForSubscription("typed-1", "Approval", 1)
	require.NoError(t, e.Client.RaiseEvent(ctx, "typed-1", "Approval", struct{ OK bool }{true}))
	var r receipt
	e.RequireCompleted("typed-1", &r)
	require.Equal(t, "o-1", r.OrderID)
	require.True(t, r.Approved)
	require.InDelta(t, 11.0, r.Charged, 1e-9)
}

func sampleDeterministicValues(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	runtime.RegisterActivity(e.Reg, "Echo", func(_ context.Context, v string) (string, error) { return v, nil })
	runtime.RegisterOrchestration(e.Reg, "Values", func(ctx *runtime.OrchestrationContext, _ string) ([]string, error) {
		g := ctx.NewGUID().String()
		now := ctx.Now().UnixMilli()
		// The activity's result is what the first run of this code took;
		// the last run, replaying the history, takes the values again:
		// deterministic values are the same.
		var first string
		if err := ctx.CallActivity("Echo", fmt.Sprint(g, " ", now)).Await(&first); err != nil {
			return nil, err
		}
		ctx.SetKV("guid", g)
		return []string{fmt.Sprint(g, " ", now), first, fmt.Sprint(ctx.Now().UnixMilli() >= now)}, nil
	})
	e.StartDefault()
	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "values", "Values", ""))
	var out []string
	e.RequireCompleted("values", &out)
	require.Len(t, out, 3)
	require.Equal(t, out[1], out[0], "the GUID and time of the last replay are the first run's")
	require.Equal(t, "true", out[2], "orchestration time does not go backwards")
	v, ok, err := e.Client.GetKVValue(e.Ctx(), "values", "guid")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, strings.Fields(out[0])[0], v)
}

func registerVersions(reg *runtime.Registry) {
	for _, v := range []string{"1.0.0", "1.1.0", "2.0.0"} {
		runtime.RegisterOrchestration(reg, "Versioned", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
			return "v" + v + ":" + ctx.OrchestrationVersion(), nil
		}, runtime.WithVersion(v))
	}
}

func sampleVersioningStart(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	registerVersions(e.Reg)
	e.StartDefault()
	ctx := e.Ctx()
	require.NoError(t, e.Client.StartOrchestration(ctx, "ver-latest", "Versioned", ""))
	require.NoError(t, e.Client.StartOrchestration(ctx, "ver-exact", "Versioned", "", runtime.WithStartVersion("1.1.0")))
	require.NoError(t, e.Client.StartOrchestration(ctx, "ver-missing", "Versioned", "", runtime.WithStartVersion("9.0.0")))
	var out string
	e.RequireCompleted("ver-latest", &out)
	require.Equal(t, "v2.0.0:2.0.0", out)
	e.RequireCompleted("ver-exact", &out)
	require.Equal(t, "v1.1.0:1.1.0", out)
	d := e.RequireFailed("ver-missing")
	require.Equal(t, string(history.ConfigUnregistered), d.Kind)
	info, err := e.Client.GetInstanceInfo(ctx, "ver-exact")
	require.NoError(t, err)
	require.Equal(t, "1.1.0", info.OrchestrationVersion)
}

func sampleVersioningSubOrch(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	registerVersions(e.Reg)
	runtime.RegisterOrchestration(e.Reg, "VersionParent", func(ctx *runtime.OrchestrationContext, _ string) ([]string, error) {
		latest := ctx.CallSubOrchestration("Versioned", "")
		exact := ctx.CallSubOrchestration("Versioned", "", runtime.WithChildVersion("1.0.0"))
		if err := ctx.Join(latest, exact); err != nil {
			return nil, err
		}
		a, _ := runtime.AwaitAs[string](latest)
		b, _ := runtime.AwaitAs[string](exact)
		return []string{a, b}, nil
	})
	e.StartDefault()
	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "ver-parent", "VersionParent", ""))
	var out []string
	e.RequireCompleted("ver-parent", &out)
	require.Equal(t, []string{"v2.0.0:2.0.0", "v1.0.0:1.0.0"}, out)
}

func sampleVersioningCANUpgrade(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	runtime.RegisterOrchestration(e.Reg, "Upgrader", func(ctx *runtime.OrchestrationContext, n int) (string, error) {
		return "", ctx.ContinueAsNew(n+1, runtime.WithNextVersion("2.0.0"))
	}, runtime.WithVersion("1.0.0"))
	runtime.RegisterOrchestration(e.Reg, "Upgrader", func(ctx *runtime.OrchestrationContext, n int) (string, error) {
		return fmt.Sprintf("upgraded to %s with %d", ctx.OrchestrationVersion(), n), nil
	}, runtime.WithVersion("2.0.0"))
	e.StartDefault()
	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "upgrade", "Upgrader", 41, runtime.WithStartVersion("1.0.0")))
	var out string
	e.RequireCompleted("upgrade", &out)
	require.Equal(t, "upgraded to 2.0.0 with 42", out)
	ex1, err := e.Client.ReadExecutionHistory(e.Ctx(), "upgrade", 1)
	require.NoError(t, err)
	require.Equal(t, "1.0.0", ex1[0].Kind.(history.OrchestrationStarted).Version)
}

func sampleCancellationCascade(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	runtime.RegisterOrchestration(e.Reg, "WaitingChild", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		return runtime.AwaitAs[string](ctx.WaitForEvent("never"))
	})
	runtime.RegisterOrchestration(e.Reg, "CancelParent", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		a := ctx.CallSubOrchestration("WaitingChild", "", runtime.WithInstanceID("cancel-child-a"))
		b := ctx.CallSubOrchestration("WaitingChild", "", runtime.WithInstanceID("cancel-child-b"))
		return "", ctx.Join(a, b)
	})
	e.StartDefault()
	ctx := e.Ctx()
	require.NoError(t, e.Client.StartOrchestration(ctx, "cancel-parent", "CancelParent", ""))
	e.WaitForSubscription("cancel-child-a", "never", 1)
	e.WaitForSubscription("cancel-child-b", "never", 1)
	require.NoError(t, e.Client.CancelInstance(ctx, "cancel-parent", "operator"))
	d := e.RequireFailed("cancel-parent")
	require.Equal(t, string(history.AppCancelled), d.Kind)
	require.Equal(t, "operator", d.Reason)
	for _, c := range []string{"cancel-child-a", "cancel-child-b"} {
		cd := e.RequireFailed(c)
		require.Equal(t, string(history.AppCancelled), cd.Kind, "cancellation cascades to %s", c)
	}
}

func sampleNestedErrors(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	runtime.RegisterActivity(e.Reg, "Validate", func(_ context.Context, n int) (int, error) {
		if n < 0 {
			return 0, fmt.Errorf("negative input %d", n)
		}
		return n, nil
	})
	runtime.RegisterOrchestration(e.Reg, "Inner", func(ctx *runtime.OrchestrationContext, n int) (int, error) {
		v, err := runtime.AwaitAs[int](ctx.CallActivity("Validate", n))
		if err != nil {
			return 0, fmt.Errorf("inner: %w", err)
		}
		return v * 2, nil
	})
	runtime.RegisterOrchestration(e.Reg, "Outer", func(ctx *runtime.OrchestrationContext, n int) (string, error) {
		v, err := runtime.AwaitAs[int](ctx.CallSubOrchestration("Inner", n))
		if err != nil {
			var d runtime.ErrorDetails
			if errors.As(err, &d) && d.Kind == string(history.AppOrchestrationFailed) {
				return "handled: " + d.Message, nil
			}
			return "", err
		}
		return fmt.Sprint(v), nil
	})
	e.StartDefault()
	ctx := e.Ctx()
	require.NoError(t, e.Client.StartOrchestration(ctx, "nested-ok", "Outer", 4))
	require.NoError(t, e.Client.StartOrchestration(ctx, "nested-bad", "Outer", -1))
	var out string
	e.RequireCompleted("nested-ok", &out)
	require.Equal(t, "8", out)
	e.RequireCompleted("nested-bad", &out)
	require.Equal(t, "handled: inner: negative input -1", out)
}

func sampleBadInputs(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	runtime.RegisterActivity(e.Reg, "Panics", func(_ context.Context, _ string) (string, error) { panic("activity exploded") })
	runtime.RegisterActivity(e.Reg, "WantsInt", func(_ context.Context, n int) (int, error) { return n, nil })
	runtime.RegisterOrchestration(e.Reg, "CallsMissing", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		return runtime.AwaitAs[string](ctx.CallActivity("DoesNotExist", ""))
	})
	runtime.RegisterOrchestration(e.Reg, "CallsPanics", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		_, err := ctx.CallActivity("Panics", "").AwaitRaw()
		var d runtime.ErrorDetails
		if errors.As(err, &d) && d.Kind == string(history.AppPanicked) {
			return "caught panic", nil
		}
		return "", err
	})
	runtime.RegisterOrchestration(e.Reg, "BadActivityInput", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		return runtime.AwaitAs[string](ctx.CallActivityRaw("WantsInt", `"not a number"`))
	})
	runtime.RegisterOrchestration(e.Reg, "OrchPanics", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		panic("orchestration exploded")
	})
	runtime.RegisterOrchestration(e.Reg, "WantsStruct", func(ctx *runtime.OrchestrationContext, o order) (string, error) {
		return o.ID, nil
	})
	e.StartDefault()
	ctx := e.Ctx()
	for id, name := range map[string]string{"bad-missing": "CallsMissing", "bad-panic": "CallsPanics", "bad-act-input": "BadActivityInput", "bad-orch-panic": "OrchPanics", "bad-unknown": "NoSuchOrchestration"} {
		require.NoError(t, e.Client.StartOrchestration(ctx, id, name, ""))
	}
	require.NoError(t, e.Client.StartOrchestrationRaw(ctx, "bad-orch-input", "WantsStruct", "[1,2"))
	require.Equal(t, string(history.ConfigUnregistered), e.RequireFailed("bad-missing").Kind)
	var out string
	e.RequireCompleted("bad-panic", &out)
	require.Equal(t, "caught panic", out)
	require.Equal(t, string(history.ConfigBadInput), e.RequireFailed("bad-act-input").Kind)
	require.Equal(t, string(history.AppPanicked), e.RequireFailed("bad-orch-panic").Kind)
	require.Equal(t, string(history.ConfigUnregistered), e.RequireFailed("bad-unknown").Kind)
	require.Equal(t, string(history.ConfigBadInput), e.RequireFailed("bad-orch-input").Kind)
}

func sampleSelfPruning(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	var pruned atomic.Uint64
	runtime.RegisterActivity(e.Reg, "ProcessBatch", func(_ context.Context, n int) (string, error) {
		return fmt.Sprint("batch ", n), nil
	})
	runtime.RegisterActivity(e.Reg, "PruneSelf", func(ctx context.Context, _ string) (uint64, error) {
		info, _ := runtime.ActivityInfoFrom(ctx)
		res, err := runtime.ClientFrom(ctx).PruneExecutions(ctx, info.Instance, durable.PruneOptions{KeepLast: 1})
		if err != nil {
			return 0, err
		}
		pruned.Add(res.ExecutionsDeleted)
		return res.ExecutionsDeleted, nil
	})
	runtime.RegisterOrchestration(e.Reg, "Eternal", func(ctx *runtime.OrchestrationContext, n int) (string, error) {
		if _, err := ctx.CallActivity("ProcessBatch", n).AwaitRaw(); err != nil {
			return "", err
		}
		if _, err := ctx.CallActivity("PruneSelf", "").AwaitRaw(); err != nil {
			return "", err
		}
		if n >= 4 {
			return "completed 5 batches", nil
		}
		return "", ctx.ContinueAsNew(n + 1)
	})
	e.StartDefault()
	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "eternal", "Eternal", 0))
	var out string
	e.RequireCompleted("eternal", &out)
	require.Equal(t, "completed 5 batches", out)
	require.GreaterOrEqual(t, pruned.Load(), uint64(4))
	execs, err := e.Client.ListExecutions(e.Ctx(), "eternal")
	require.NoError(t, err)
	require.Equal(t, []uint64{5}, execs, "only the final execution remains")
}

func sampleConfigReload(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	var mu sync.Mutex
	var applied, dequeued []string // in the order the activities ran
	note := func(to *[]string, v string) {
		mu.Lock()
		defer mu.Unlock()
		if n := len(*to); n == 0 || (*to)[n-1] != v { // an activity may run twice
			*to = append(*to, v)
		}
	}
	runtime.RegisterActivity(e.Reg, "Work", func(_ context.Context, cfg string) (string, error) {
		note(&applied, cfg)
		return cfg, nil
	})
	runtime.RegisterActivity(e.Reg, "Dequeued", func(_ context.Context, v string) (string, error) {
		note(&dequeued, v)
		return v, nil
	})
	runtime.RegisterOrchestration(e.Reg, "ConfigLoop", func(ctx *runtime.OrchestrationContext, cfg string) (string, error) {
		// Drain every update that arrived, without blocking.
		for {
			upd := ctx.DequeueEvent("ConfigUpdate")
			w, err := ctx.Select(upd, ctx.CreateTimer(0))
			if err != nil {
				return "", err
			}
			if w != 0 {
				break
			}
			var v string
			if err := upd.Await(&v); err != nil {
				return "", err
			}
			if _, err := ctx.CallActivity("Dequeued", v).AwaitRaw(); err != nil {
				return "", err
			}
			cfg = v
		}
		ctx.SetCustomStatus("config=" + cfg)
		if _, err := ctx.CallActivity("Work", cfg).AwaitRaw(); err != nil {
			return "", err
		}
		if cfg == "v3" {
			return "final " + cfg, nil
		}
		if _, err := ctx.CreateTimer(20 * time.Millisecond).AwaitRaw(); err != nil {
			return "", err
		}
		return "", ctx.ContinueAsNew(cfg)
	})
	e.StartDefault()
	ctx := e.Ctx()
	require.NoError(t, e.Client.StartOrchestration(ctx, "config", "ConfigLoop", "v0"))
	e.WaitStarted("config")
	// Updates arrive at any time, several between cycles; none is lost and
	// the last one wins.
	require.NoError(t, e.Client.EnqueueEvent(ctx, "config", "ConfigUpdate", "v1"))
	require.NoError(t, e.Client.EnqueueEvent(ctx, "config", "ConfigUpdate", "v2"))
	require.NoError(t, e.Client.EnqueueEvent(ctx, "config", "ConfigUpdate", "v3"))
	var out string
	e.RequireCompleted("config", &out)
	require.Equal(t, "final v3", out)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"v1", "v2", "v3"}, dequeued, "every update dequeued once, in order")
	require.Equal(t, "v3", applied[len(applied)-1])
	require.True(t, slices.IsSorted(applied), "configurations applied in order: %v", applied)
}

func sampleTags(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	var gpuNode, cpuNode atomic.Value
	gpuNode.Store("")
	cpuNode.Store("")
	runtime.RegisterOrchestration(e.Reg, "Pipeline", func(ctx *runtime.OrchestrationContext, _ string) ([]string, error) {
		gpu := ctx.CallActivity("Render", "scene", runtime.WithTag("gpu"))
		cpu := ctx.CallActivity("Encode", "video")
		if err := ctx.Join(gpu, cpu); err != nil {
			return nil, err
		}
		a, _ := runtime.AwaitAs[string](gpu)
		b, _ := runtime.AwaitAs[string](cpu)
		return []string{a, b}, nil
	})
	node := func(ctx context.Context) string { i, _ := runtime.ActivityInfoFrom(ctx); return i.WorkerNodeID }
	// The GPU node registers only the GPU activity and only takes gpu work.
	gpuReg := runtime.NewRegistry()
	runtime.RegisterActivity(gpuReg, "Render", func(ctx context.Context, s string) (string, error) {
		gpuNode.Store(node(ctx))
		return "rendered " + s, nil
	})
	// The default node runs orchestrations and untagged activities.
	runtime.RegisterActivity(e.Reg, "Encode", func(ctx context.Context, s string) (string, error) {
		cpuNode.Store(node(ctx))
		return "encoded " + s, nil
	})
	gpuTags, err := durable.OnlyTags("gpu")
	require.NoError(t, err)
	gpuOpts := FastOptions(t)
	gpuOpts.TagFilter, gpuOpts.WorkerNodeID, gpuOpts.OrchestrationConcurrency = gpuTags, "gpu-node", -1
	e.Start(gpuReg, gpuOpts)
	cpuOpts := FastOptions(t)
	cpuOpts.WorkerNodeID = "cpu-node"
	e.Start(nil, cpuOpts)
	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "tags", "Pipeline", ""))
	var out []string
	e.RequireCompleted("tags", &out)
	require.Equal(t, []string{"rendered scene", "encoded video"}, out)
	require.Equal(t, "gpu-node", gpuNode.Load())
	require.Equal(t, "cpu-node", cpuNode.Load())
}

func sampleKVRequestResponse(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	runtime.RegisterOrchestration(e.Reg, "KVServer", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		for {
			var req struct {
				ID, Op string
			}
			if err := ctx.DequeueEvent("request").Await(&req); err != nil {
				return "", err
			}
			if req.Op == "stop" {
				return "stopped", nil
			}
			ctx.SetKV("response:"+req.ID, strings.ToUpper(req.Op))
		}
	})
	e.StartDefault()
	ctx := e.Ctx()
	require.NoError(t, e.Client.StartOrchestration(ctx, "kv-server", "KVServer", ""))
	e.WaitStarted("kv-server")
	for i, op := range []string{"ping", "status"} {
		id := fmt.Sprint(i)
		require.NoError(t, e.Client.EnqueueEvent(ctx, "kv-server", "request", map[string]string{"ID": id, "Op": op}))
		var got string
		for got == "" {
			v, ok, err := e.Client.GetKVValue(ctx, "kv-server", "response:"+id)
			require.NoError(t, err)
			if ok {
				got = v
				break
			}
			select {
			case <-ctx.Done():
				t.Fatal("no response")
			case <-time.After(5 * time.Millisecond):
			}
		}
		require.Equal(t, strings.ToUpper(op), got)
	}
	require.NoError(t, e.Client.EnqueueEvent(ctx, "kv-server", "request", map[string]string{"ID": "x", "Op": "stop"}))
	e.RequireCompleted("kv-server", nil)
}

func sampleKVCrossRead(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	runtime.RegisterOrchestration(e.Reg, "Publisher", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		ctx.SetKV("config", "blue")
		_, err := ctx.WaitForEvent("done").AwaitRaw()
		return "published", err
	})
	runtime.RegisterOrchestration(e.Reg, "Reader", func(ctx *runtime.OrchestrationContext, target string) (string, error) {
		v, found, err := ctx.ReadKVFromInstance(target, "config")
		if err != nil {
			return "", err
		}
		_, missing, err := ctx.ReadKVFromInstance(target, "absent")
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s %v %v", v, found, missing), nil
	})
	e.StartDefault()
	ctx := e.Ctx()
	require.NoError(t, e.Client.StartOrchestration(ctx, "publisher", "Publisher", ""))
	e.WaitForSubscription("publisher", "done", 1)
	require.NoError(t, e.Client.StartOrchestration(ctx, "reader", "Reader", "publisher"))
	var out string
	e.RequireCompleted("reader", &out)
	require.Equal(t, "blue true false", out)
	require.NoError(t, e.Client.RaiseEvent(ctx, "publisher", "done", ""))
	e.RequireCompleted("publisher", nil)
}

func sampleKVCounter(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	runtime.RegisterActivity(e.Reg, "ProcessBatch", func(_ context.Context, b string) (string, error) { return "processed:" + b, nil })
	runtime.RegisterOrchestration(e.Reg, "BatchProcessor", func(ctx *runtime.OrchestrationContext, _ string) (int, error) {
		for _, b := range []string{"alpha", "beta", "gamma"} {
			count, _, err := runtime.GetKVAs[int](ctx, "batches_processed")
			if err != nil {
				return 0, err
			}
			r, err := runtime.AwaitAs[string](ctx.CallActivity("ProcessBatch", b))
			if err != nil {
				return 0, err
			}
			if err := runtime.SetKVAs(ctx, "batches_processed", count+1); err != nil {
				return 0, err
			}
			ctx.SetKV("last_result", r)
		}
		n, _, err := runtime.GetKVAs[int](ctx, "batches_processed")
		return n, err
	})
	e.StartDefault()
	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "counter", "BatchProcessor", ""))
	var n int
	e.RequireCompleted("counter", &n)
	require.Equal(t, 3, n, "read-modify-write across turns replays the reads")
	all, err := e.Client.GetKVAllValues(e.Ctx(), "counter")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"batches_processed": "3", "last_result": "processed:gamma"}, all)
}

func sampleSessions(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	var mu sync.Mutex
	nodes := map[string]map[string]bool{} // session → nodes
	reg := func(r *runtime.Registry) {
		runtime.RegisterActivity(r, "Step", func(ctx context.Context, s int) (int, error) {
			info, _ := runtime.ActivityInfoFrom(ctx)
			mu.Lock()
			defer mu.Unlock()
			if nodes[info.SessionID] == nil {
				nodes[info.SessionID] = map[string]bool{}
			}
			nodes[info.SessionID][info.WorkerNodeID] = true
			return s, nil
		})
	}
	regA, regB := runtime.NewRegistry(), runtime.NewRegistry()
	reg(regA)
	reg(regB)
	for _, r := range []*runtime.Registry{regA, regB} {
		runtime.RegisterOrchestration(r, "SessionFlow", func(ctx *runtime.OrchestrationContext, session string) (string, error) {
			for i := 0; i < 4; i++ {
				if _, err := ctx.CallActivity("Step", i, runtime.WithSession(session)).AwaitRaw(); err != nil {
					return "", err
				}
			}
			return "ok", nil
		})
	}
	optsA, optsB := FastOptions(t), FastOptions(t)
	optsA.WorkerNodeID, optsB.WorkerNodeID = "node-a", "node-b"
	e.Start(regA, optsA)
	e.Start(regB, optsB)
	ctx := e.Ctx()
	for i := 0; i < 4; i++ {
		require.NoError(t, e.Client.StartOrchestration(ctx, fmt.Sprint("sess-", i), "SessionFlow", fmt.Sprint("session-", i)))
	}
	for i := 0; i < 4; i++ {
		e.RequireCompleted(fmt.Sprint("sess-", i), nil)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, nodes, 4)
	for s, n := range nodes {
		require.Len(t, n, 1, "every activity of session %s ran on one node", s)
	}
}

func sampleTwoRuntimes(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	reg := func() *runtime.Registry {
		r := runtime.NewRegistry()
		runtime.RegisterActivity(r, "Work", func(ctx context.Context, n int) (int, error) {
			select {
			case <-time.After(time.Duration(n%5) * time.Millisecond):
			case <-ctx.Done():
				return 0, context.Cause(ctx)
			}
			return n * 2, nil
		})
		runtime.RegisterOrchestration(r, "Job", func(ctx *runtime.OrchestrationContext, n int) (int, error) {
			sum := 0
			for i := 0; i < 3; i++ {
				v, err := runtime.AwaitAs[int](ctx.CallActivity("Work", n+i))
				if err != nil {
					return 0, err
				}
				sum += v
				if _, err := ctx.CreateTimer(time.Millisecond).AwaitRaw(); err != nil {
					return 0, err
				}
			}
			return sum, nil
		})
		return r
	}
	optsA, optsB := FastOptions(t), FastOptions(t)
	optsA.WorkerNodeID, optsB.WorkerNodeID = "a", "b"
	rtA := e.Start(reg(), optsA)
	e.Start(reg(), optsB)
	ctx := e.Ctx()
	const n = 20
	for i := 0; i < n; i++ {
		require.NoError(t, e.Client.StartOrchestration(ctx, fmt.Sprint("job-", i), "Job", i))
	}
	// Stop runtime A while instances are in flight.
	e.WaitStarted("job-5")
	stopCtx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_ = rtA.Shutdown(stopCtx)
	for i := 0; i < n; i++ {
		id := fmt.Sprint("job-", i)
		var out int
		e.RequireCompleted(id, &out)
		require.Equal(t, 2*(3*i+3), out)
		events, err := e.Client.ReadHistory(ctx, id)
		require.NoError(t, err)
		k := CountKinds(events)
		require.Equal(t, 1, k["OrchestrationCompleted"], "%s completed exactly once", id)
		require.Equal(t, 3, k["ActivityScheduled"], "%s scheduled each activity once", id)
		for j, ev := range events {
			require.Equal(t, uint64(j+1), ev.EventID)
		}
	}
}
