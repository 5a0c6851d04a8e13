package runtime_test

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/internal/memprovider"
	"github.com/durafeed/durafeed/runtime"
	"github.com/durafeed/durafeed/runtime/runtimetest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func start(t *testing.T, p durable.Provider, reg *runtime.Registry, mutate func(*runtime.Options)) *runtime.Runtime {
	t.Helper()
	opts := runtimetest.FastOptions(t)
	if mutate != nil {
		mutate(&opts)
	}
	rt := runtime.New(p, reg, opts)
	require.NoError(t, rt.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
	})
	return rt
}

func TestPoisonOrchestration(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	store := memprovider.NewStore()
	p := store.Open()
	cli := runtime.NewClient(p)
	require.NoError(t, cli.StartOrchestration(ctx, "poison-1", "Anything", ""))
	// Two failed deliveries before any runtime sees it.
	for i := 0; i < 2; i++ {
		item, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NotNil(t, item)
		require.NoError(t, p.AbandonOrchestrationItem(ctx, item.LockToken, 0, false))
	}
	reg := runtime.NewRegistry()
	runtime.RegisterOrchestrationRaw(reg, "Anything", func(*runtime.OrchestrationContext, string) (string, error) { return "ran", nil })
	start(t, p, reg, func(o *runtime.Options) { o.MaxAttempts = 2 })
	st, err := cli.WaitForOrchestration(ctx, "poison-1")
	require.NoError(t, err)
	require.Equal(t, runtime.StateFailed, st.State)
	require.Equal(t, history.CategoryPoison, st.Failure.Category)
	require.Equal(t, history.PoisonOrchestration, st.Failure.Poison.Type)
	require.Equal(t, uint32(3), st.Failure.Poison.AttemptCount)
	events, err := cli.ReadHistory(ctx, "poison-1")
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2}, []uint64{events[0].EventID, events[1].EventID})
}

func TestPoisonActivity(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := memprovider.NewStore().Open()
	cli := runtime.NewClient(p)
	reg := runtime.NewRegistry()
	runtime.RegisterActivityRaw(reg, "A", func(context.Context, string) (string, error) { return "never", nil })
	runtime.RegisterOrchestrationRaw(reg, "O", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		return ctx.CallActivityRaw("A", "").AwaitRaw()
	})
	// An orchestration-only runtime schedules the activity.
	start(t, p, reg, func(o *runtime.Options) { o.WorkerConcurrency = -1 })
	require.NoError(t, cli.StartOrchestration(ctx, "pa", "O", ""))
	var lw *durable.LockedWorkItem
	for lw == nil {
		var err error
		lw, err = p.FetchWorkItem(ctx, time.Minute, 0, nil, durable.DefaultOnlyTags())
		require.NoError(t, err)
		if lw == nil {
			time.Sleep(2 * time.Millisecond) // polling a queue: no signal exists
		}
	}
	require.NoError(t, p.AbandonWorkItem(ctx, lw.LockToken, 0, false))
	lw, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, durable.DefaultOnlyTags())
	require.NoError(t, err)
	require.NoError(t, p.AbandonWorkItem(ctx, lw.LockToken, 0, false))
	start(t, p, reg, func(o *runtime.Options) { o.MaxAttempts = 2; o.OrchestrationConcurrency = -1 })
	st, err := cli.WaitForOrchestration(ctx, "pa")
	require.NoError(t, err)
	require.Equal(t, runtime.StateFailed, st.State)
	require.Equal(t, history.CategoryPoison, st.Failure.Category, st.Failure.DisplayMessage())
	require.Equal(t, history.PoisonActivity, st.Failure.Poison.Type)
	require.Equal(t, "A", st.Failure.Poison.ActivityName)
}

func TestCorruptHistoryIsPoisoned(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	store := memprovider.NewStore()
	p := store.Open()
	cli := runtime.NewClient(p)
	reg := runtime.NewRegistry()
	runtime.RegisterOrchestrationRaw(reg, "Wait", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		return ctx.WaitForEvent("go").AwaitRaw()
	})
	rt := start(t, p, reg, func(o *runtime.Options) { o.MaxAttempts = 1 })
	require.NoError(t, cli.StartOrchestration(ctx, "corrupt", "Wait", ""))
	env := &runtimetest.Env{T: t, Client: cli}
	env.WaitForSubscription("corrupt", "go", 1)
	store.CorruptHistory("corrupt")
	require.NoError(t, cli.RaiseEvent(ctx, "corrupt", "go", ""))
	admin, ok := p.Admin()
	require.True(t, ok)
	for {
		info, err := admin.GetInstanceInfo(ctx, "corrupt")
		require.NoError(t, err)
		if info.Status == durable.StatusFailed {
			require.Contains(t, *info.Output, "deserialization failed")
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("instance was not poisoned")
		case <-time.After(20 * time.Millisecond):
		}
	}
	_ = rt
}

func TestLockStealingCancelsActivityContext(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := memprovider.NewStore().Open()
	cli := runtime.NewClient(p)
	reg := runtime.NewRegistry()
	causes := make(chan error, 1)
	runtime.RegisterActivityRaw(reg, "Block", func(ctx context.Context, _ string) (string, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return "", ctx.Err()
	})
	runtime.RegisterOrchestrationRaw(reg, "Race", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		w, err := ctx.Select(ctx.CallActivityRaw("Block", ""), ctx.CreateTimer(30*time.Millisecond))
		return fmt.Sprint(w), err
	})
	start(t, p, reg, func(o *runtime.Options) { o.WorkerLockTimeout = 100 * time.Millisecond })
	require.NoError(t, cli.StartOrchestration(ctx, "steal", "Race", ""))
	st, err := cli.WaitForOrchestration(ctx, "steal")
	require.NoError(t, err)
	require.Equal(t, `1`, st.Output)
	select {
	case cause := <-causes:
		require.ErrorIs(t, cause, runtime.ErrLockLost)
	case <-ctx.Done():
		t.Fatal("the cancelled activity never saw its context end")
	}
}

func TestPinnedVersionAndCapabilityFilter(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := memprovider.NewStore().Open()
	cli := runtime.NewClient(p)
	reg := runtime.NewRegistry()
	runtime.RegisterOrchestrationRaw(reg, "Wait", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		return ctx.WaitForEvent("go").AwaitRaw()
	})
	newer := durable.SemVer{Major: 0, Minor: 9}
	rt := start(t, p, reg, func(o *runtime.Options) { o.RuntimeVersion = &newer })
	require.NoError(t, cli.StartOrchestration(ctx, "pinned", "Wait", ""))
	env := &runtimetest.Env{T: t, Client: cli}
	env.WaitForSubscription("pinned", "go", 1)
	require.NoError(t, rt.Shutdown(ctx))
	events, err := cli.ReadHistory(ctx, "pinned")
	require.NoError(t, err)
	require.Equal(t, "0.9.0", events[0].RuntimeVersion)

	require.NoError(t, cli.RaiseEvent(ctx, "pinned", "go", "x"))
	// An older runtime's filter does not see the execution pinned at 0.9.0.
	item, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, durable.DefaultCapabilityFilter(runtime.Version()))
	require.NoError(t, err)
	require.Nil(t, item)
	item, err = p.FetchOrchestrationItem(ctx, time.Minute, 0, durable.DefaultCapabilityFilter(newer))
	require.NoError(t, err)
	require.NotNil(t, item)
	require.NoError(t, p.AbandonOrchestrationItem(ctx, item.LockToken, 0, true))
	start(t, p, reg, func(o *runtime.Options) { o.RuntimeVersion = &newer })
	st, err := cli.WaitForOrchestration(ctx, "pinned")
	require.NoError(t, err)
	require.Equal(t, runtime.StateCompleted, st.State)
}

func TestUnregisteredVersionMovesToCapableNode(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := memprovider.NewStore().Open()
	cli := runtime.NewClient(p)
	v1 := func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		d, err := ctx.WaitForEvent("go").AwaitRaw()
		return "v1:" + d, err
	}
	regOld := runtime.NewRegistry()
	runtime.RegisterOrchestrationRaw(regOld, "O", v1)
	rtOld := start(t, p, regOld, nil)
	require.NoError(t, cli.StartOrchestration(ctx, "mv", "O", ""))
	env := &runtimetest.Env{T: t, Client: cli}
	env.WaitForSubscription("mv", "go", 1)
	require.NoError(t, rtOld.Shutdown(ctx))
	// A node that only has 2.0.0 abandons the turn; a node with 1.0.0 runs it.
	// The abandoning node waits the default UnregisteredBackoff (1 s)
	// between attempts: with the fast options' 20 ms it could use up the
	// attempts before the capable node had started on a loaded machine.
	regNew := runtime.NewRegistry()
	runtime.RegisterOrchestrationRaw(regNew, "O", v1, runtime.WithVersion("2.0.0"))
	start(t, p, regNew, func(o *runtime.Options) { o.UnregisteredBackoff = time.Second })
	require.NoError(t, cli.RaiseEventRaw(ctx, "mv", "go", "x"))
	start(t, p, regOld, nil)
	st, err := cli.WaitForOrchestration(ctx, "mv")
	require.NoError(t, err)
	require.Equal(t, runtime.StateCompleted, st.State)
	require.Equal(t, "v1:x", st.Output)
}

func TestGracefulShutdownFinishesActivity(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := memprovider.NewStore().Open()
	cli := runtime.NewClient(p)
	reg := runtime.NewRegistry()
	started, release := make(chan struct{}), make(chan struct{})
	runtime.RegisterActivityRaw(reg, "Slow", func(context.Context, string) (string, error) {
		close(started)
		<-release
		return "finished", nil
	})
	runtime.RegisterOrchestrationRaw(reg, "O", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		return ctx.CallActivityRaw("Slow", "").AwaitRaw()
	})
	rt := start(t, p, reg, nil)
	require.NoError(t, cli.StartOrchestration(ctx, "graceful", "O", ""))
	<-started
	done := make(chan error, 1)
	go func() { done <- rt.Shutdown(ctx) }()
	close(release)
	require.NoError(t, <-done)
	// The completion was committed; a new runtime finishes the orchestration.
	start(t, p, reg, nil)
	st, err := cli.WaitForOrchestration(ctx, "graceful")
	require.NoError(t, err)
	require.Equal(t, "finished", st.Output)
	require.ErrorIs(t, rt.Shutdown(ctx), runtime.ErrNotRunning)
}

func TestForcedShutdownAbandonsActivity(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := memprovider.NewStore().Open()
	cli := runtime.NewClient(p)
	stuck := make(chan struct{})
	regA := runtime.NewRegistry()
	runtime.RegisterActivityRaw(regA, "Work", func(ctx context.Context, _ string) (string, error) {
		close(stuck)
		<-ctx.Done()
		return "", ctx.Err()
	})
	orch := func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		return ctx.CallActivityRaw("Work", "").AwaitRaw()
	}
	runtime.RegisterOrchestrationRaw(regA, "O", orch)
	rtA := start(t, p, regA, nil)
	require.NoError(t, cli.StartOrchestration(ctx, "forced", "O", ""))
	<-stuck
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, rtA.Shutdown(short), context.DeadlineExceeded)
	regB := runtime.NewRegistry()
	runtime.RegisterActivityRaw(regB, "Work", func(context.Context, string) (string, error) { return "by b", nil })
	runtime.RegisterOrchestrationRaw(regB, "O", orch)
	start(t, p, regB, nil)
	st, err := cli.WaitForOrchestration(ctx, "forced")
	require.NoError(t, err)
	require.Equal(t, "by b", st.Output)
}

func TestClientManagement(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := memprovider.NewStore().Open()
	cli := runtime.NewClient(p)
	reg := runtime.NewRegistry()
	runtime.RegisterOrchestration(reg, "Echo", func(ctx *runtime.OrchestrationContext, s string) (string, error) {
		if s == "again" && ctx.ExecutionID() == 1 {
			return "", ctx.ContinueAsNew(s)
		}
		return s, nil
	})
	start(t, p, reg, nil)
	for _, id := range []string{"m1", "m2"} {
		require.NoError(t, cli.StartOrchestration(ctx, id, "Echo", "again"))
		_, err := cli.WaitForOrchestration(ctx, id)
		require.NoError(t, err)
	}
	ids, err := cli.ListInstances(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"m1", "m2"}, ids)
	done, err := cli.ListInstancesByStatus(ctx, durable.StatusCompleted)
	require.NoError(t, err)
	require.Len(t, done, 2)
	m, err := cli.GetSystemMetrics(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2), m.CompletedInstances)
	require.Equal(t, uint64(4), m.TotalExecutions)
	_, err = cli.GetQueueDepths(ctx)
	require.NoError(t, err)
	ex, err := cli.GetExecutionInfo(ctx, "m1", 1)
	require.NoError(t, err)
	require.Equal(t, durable.StatusContinuedAsNew, ex.Status)
	pr, err := cli.PruneExecutions(ctx, "m1", durable.PruneOptions{KeepLast: 1})
	require.NoError(t, err)
	require.Equal(t, uint64(1), pr.ExecutionsDeleted)
	del, err := cli.DeleteInstance(ctx, "m2", false)
	require.NoError(t, err)
	require.Equal(t, uint64(1), del.InstancesDeleted)
	st, err := cli.GetStatus(ctx, "m2")
	require.NoError(t, err)
	require.Equal(t, runtime.StateNotFound, st.State)
	bulk, err := cli.DeleteInstanceBulk(ctx, durable.InstanceFilter{})
	require.NoError(t, err)
	require.Equal(t, uint64(1), bulk.InstancesDeleted)
	_, err = cli.PruneExecutionsBulk(ctx, durable.InstanceFilter{}, durable.PruneOptions{})
	require.NoError(t, err)

	// Without the admin capability, management calls fail cleanly.
	noAdmin := runtime.NewClient(adminless{p})
	_, err = noAdmin.ListInstances(ctx)
	require.ErrorIs(t, err, runtime.ErrNoAdmin)
}

type adminless struct{ durable.Provider }

func (adminless) Admin() (durable.ProviderAdmin, bool) { return nil, false }

func TestWaitHonoursContext(t *testing.T) {
	t.Parallel()
	p := memprovider.NewStore().Open()
	cli := runtime.NewClientWithOptions(p, runtime.ClientOptions{PollInitial: time.Millisecond, PollMax: 5 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := cli.WaitForOrchestration(ctx, "nobody")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = cli.WaitForCustomStatus(ctx, "nobody", 0)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestRegistryErrors(t *testing.T) {
	t.Parallel()
	reg := runtime.NewRegistry()
	fn := func(*runtime.OrchestrationContext, string) (string, error) { return "", nil }
	require.NoError(t, reg.AddOrchestration("O", fn))
	require.Error(t, reg.AddOrchestration("O", fn), "duplicate version")
	require.NoError(t, reg.AddOrchestration("O", fn, runtime.WithVersion("1.2.3")))
	require.Error(t, reg.AddOrchestration("O", fn, runtime.WithVersion("v1")))
	require.Error(t, reg.AddOrchestration("", fn))
	act := func(context.Context, string) (string, error) { return "", nil }
	require.NoError(t, reg.AddActivity("A", act))
	require.Error(t, reg.AddActivity("A", act))
	require.Error(t, reg.AddActivity("__durafeed:get_kv_value", act))
	_, v, ok := reg.ResolveOrchestration("O", "")
	require.True(t, ok)
	require.Equal(t, "1.2.3", v)
	_, _, ok = reg.ResolveOrchestration("O", "9.9.9")
	require.False(t, ok)
	require.Panics(t, func() { runtime.RegisterActivityRaw(reg, "A", act) })
}

func TestRuntimeLeavesNoGoroutines(t *testing.T) {
	// Not parallel: counts goroutines.
	before := goruntime.NumGoroutine()
	func() {
		ctx := testCtx(t)
		p := memprovider.NewStore().Open()
		reg := runtime.NewRegistry()
		runtime.RegisterOrchestrationRaw(reg, "W", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
			return ctx.WaitForEvent("never").AwaitRaw()
		})
		rt := runtime.New(p, reg, runtimetest.FastOptions(t))
		require.NoError(t, rt.Start())
		cli := rt.Client()
		for i := 0; i < 10; i++ {
			require.NoError(t, cli.StartOrchestration(ctx, fmt.Sprint("w", i), "W", ""))
		}
		env := &runtimetest.Env{T: t, Client: cli}
		for i := 0; i < 10; i++ {
			env.WaitForSubscription(fmt.Sprint("w", i), "never", 1)
		}
		require.NoError(t, rt.Shutdown(ctx))
	}()
	for i := 0; i < 500 && goruntime.NumGoroutine() > before; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	require.LessOrEqual(t, goruntime.NumGoroutine(), before, "goroutines leaked")
}

func TestActivityErrorDetailsPassThrough(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := memprovider.NewStore().Open()
	cli := runtime.NewClient(p)
	reg := runtime.NewRegistry()
	runtime.RegisterActivityRaw(reg, "Retryable", func(context.Context, string) (string, error) {
		return "", history.ApplicationError(history.AppActivityFailed, "try later", true)
	})
	runtime.RegisterOrchestrationRaw(reg, "O", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		_, err := ctx.CallActivityRaw("Retryable", "").AwaitRaw()
		var d runtime.ErrorDetails
		if errors.As(err, &d) && d.IsRetryable() {
			return "retryable: " + d.Message, nil
		}
		return "", err
	})
	start(t, p, reg, nil)
	require.NoError(t, cli.StartOrchestration(ctx, "details", "O", ""))
	st, err := cli.WaitForOrchestration(ctx, "details")
	require.NoError(t, err)
	require.Equal(t, "retryable: try later", st.Output)
}

// legacyStarts imitates a runtime that predates ParentExecutionID: the
// sub-orchestration starts it commits carry none. It records the child
// completions it commits.
type legacyStarts struct {
	durable.Provider
	mu          *sync.Mutex
	completions *[]durable.SubOrchCompleted
}

func (p legacyStarts) AckOrchestrationItem(ctx context.Context, lockToken string, turn durable.OrchestrationTurn) error {
	items := make([]durable.WorkItem, len(turn.OrchestratorItems))
	for i, w := range turn.OrchestratorItems {
		switch c := w.(type) {
		case durable.StartOrchestration:
			c.ParentExecutionID = 0
			w = c
		case durable.SubOrchCompleted:
			p.mu.Lock()
			*p.completions = append(*p.completions, c)
			p.mu.Unlock()
		}
		items[i] = w
	}
	turn.OrchestratorItems = items
	return p.Provider.AckOrchestrationItem(ctx, lockToken, turn)
}

// A child started without ParentExecutionID (older data) reports 0, and
// the dispatcher routes its completion to the parent's current execution.
func TestChildWithoutParentExecutionFallsBackToLookup(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	store := memprovider.NewStore()
	reg := runtime.NewRegistry()
	runtime.RegisterOrchestration(reg, "Child", func(ctx *runtime.OrchestrationContext, s string) (string, error) { return "child:" + s, nil })
	runtime.RegisterOrchestration(reg, "Parent", func(ctx *runtime.OrchestrationContext, n int) (string, error) {
		if n == 0 {
			return "", ctx.ContinueAsNew(1) // the child belongs to execution 2
		}
		return runtime.AwaitAs[string](ctx.CallSubOrchestration("Child", "x", runtime.WithInstanceID(ctx.InstanceID()+"-child")))
	})
	cli := runtime.NewClient(store.Open())

	// Without the legacy wrapper the child records its parent's execution.
	modern := start(t, store.Open(), reg, nil)
	require.NoError(t, cli.StartOrchestration(ctx, "modern", "Parent", 1))
	st, err := cli.WaitForOrchestration(ctx, "modern")
	require.NoError(t, err)
	require.Equal(t, runtime.StateCompleted, st.State)
	child, err := cli.ReadHistory(ctx, "modern-child")
	require.NoError(t, err)
	require.Equal(t, uint64(1), child[0].Kind.(history.OrchestrationStarted).ParentExecutionID)
	require.NoError(t, modern.Shutdown(ctx))

	var mu sync.Mutex
	var completions []durable.SubOrchCompleted
	start(t, legacyStarts{Provider: store.Open(), mu: &mu, completions: &completions}, reg, nil)
	require.NoError(t, cli.StartOrchestration(ctx, "legacy", "Parent", 0))
	st, err = cli.WaitForOrchestration(ctx, "legacy")
	require.NoError(t, err)
	require.Equal(t, runtime.StateCompleted, st.State, "%+v", st.Failure)
	require.Equal(t, `"child:x"`, st.Output)
	require.Equal(t, uint64(2), st.ExecutionID)
	child, err = cli.ReadHistory(ctx, "legacy-child")
	require.NoError(t, err)
	require.Zero(t, child[0].Kind.(history.OrchestrationStarted).ParentExecutionID, "the child was started the old way")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []durable.SubOrchCompleted{{ParentInstance: "legacy", ParentExecutionID: 2, ParentID: 2, Result: `"child:x"`}}, completions,
		"the dispatcher looked up the parent's current execution")
}

// TestJoinAs: results come back in the tasks' order whatever order they
// complete in; a failed task fails the join with its error, and so does a
// result that does not decode as the asked type.
func TestJoinAs(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := memprovider.NewStore().Open()
	cli := runtime.NewClient(p)
	reg := runtime.NewRegistry()
	runtime.RegisterActivity(reg, "Echo", func(_ context.Context, s string) (string, error) {
		if s == "bad" {
			return "", errors.New("bad input")
		}
		return s, nil
	})
	runtime.RegisterOrchestration(reg, "Strings", func(ctx *runtime.OrchestrationContext, in []string) ([]string, error) {
		tasks := make([]*runtime.Task, len(in))
		for i, s := range in {
			tasks[i] = ctx.CallActivity("Echo", s)
		}
		return runtime.JoinAs[string](ctx, tasks...)
	})
	runtime.RegisterOrchestration(reg, "Ints", func(ctx *runtime.OrchestrationContext, s string) ([]int, error) {
		return runtime.JoinAs[int](ctx, ctx.CallActivity("Echo", s))
	})
	start(t, p, reg, nil)
	for _, tc := range []struct {
		id, name string
		input    any
		state    runtime.State
		want     string
	}{
		{"ok", "Strings", []string{"c", "a", "b"}, runtime.StateCompleted, `["c","a","b"]`},
		{"failed", "Strings", []string{"a", "bad"}, runtime.StateFailed, "bad input"},
		{"undecodable", "Ints", "x", runtime.StateFailed, "cannot unmarshal"},
	} {
		require.NoError(t, cli.StartOrchestration(ctx, tc.id, tc.name, tc.input))
		st, err := cli.WaitForOrchestration(ctx, tc.id)
		require.NoError(t, err)
		require.Equal(t, tc.state, st.State, tc.id)
		if tc.state == runtime.StateCompleted {
			require.JSONEq(t, tc.want, st.Output, tc.id)
		} else {
			require.Contains(t, st.Failure.DisplayMessage(), tc.want, tc.id)
		}
	}
}
