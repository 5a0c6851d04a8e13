package runtimetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/runtime"
)

// fanOut schedules activity once per input and returns the results in
// input order, whatever order the activities complete in.
func fanOut[In, Out any](ctx *runtime.OrchestrationContext, activity string, inputs []In, opts ...runtime.ActivityOption) ([]Out, error) {
	tasks := make([]*runtime.Task, len(inputs))
	for i, in := range inputs {
		tasks[i] = ctx.CallActivity(activity, in, opts...)
	}
	return runtime.JoinAs[Out](ctx, tasks...)
}

// sampleFanOutFanIn runs 50 activities in parallel, each finishing after a
// different delay, and aggregates their results in scheduling order.
func sampleFanOutFanIn(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	runtime.RegisterActivity(e.Reg, "Square", func(ctx context.Context, n int) (int, error) {
		// Later items finish first, so completions arrive out of order.
		select {
		case <-time.After(time.Duration(50-n%50) * 100 * time.Microsecond):
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
		return n * n, nil
	})
	type summary struct {
		Squares []int `json:"squares"`
		Sum     int   `json:"sum"`
	}
	runtime.RegisterOrchestration(e.Reg, "SumOfSquares", func(ctx *runtime.OrchestrationContext, n int) (summary, error) {
		inputs := make([]int, n)
		for i := range inputs {
			inputs[i] = i + 1
		}
		squares, err := fanOut[int, int](ctx, "Square", inputs)
		if err != nil {
			return summary{}, err
		}
		s := summary{Squares: squares}
		for _, v := range squares {
			s.Sum += v
		}
		return s, nil
	})
	e.StartDefault()
	const n = 50
	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "fan-in", "SumOfSquares", n))
	var out summary
	e.RequireCompleted("fan-in", &out)
	require.Len(t, out.Squares, n)
	for i, v := range out.Squares {
		require.Equal(t, (i+1)*(i+1), v, "result %d in scheduling order", i)
	}
	require.Equal(t, n*(n+1)*(2*n+1)/6, out.Sum)
	events, err := e.Client.ReadHistory(e.Ctx(), "fan-in")
	require.NoError(t, err)
	k := CountKinds(events)
	require.Equal(t, n, k["ActivityScheduled"])
	require.Equal(t, n, k["ActivityCompleted"])
}

// approvalRequest is the input of the approval workflow.
type approvalRequest struct {
	ID      string        `json:"id"`
	Amount  int           `json:"amount"`
	Timeout time.Duration `json:"timeout"`
}

// approvalDecision is the external event a human raises.
type approvalDecision struct {
	Approved bool   `json:"approved"`
	By       string `json:"by"`
}

// sampleHumanApproval races an external approval event against a durable
// timeout: approved, rejected and timed-out requests, and a decision that
// arrives after the timeout is dropped.
func sampleHumanApproval(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	var mu sync.Mutex
	notified := map[string]bool{}
	runtime.RegisterActivity(e.Reg, "NotifyApprover", func(_ context.Context, r approvalRequest) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		notified[r.ID] = true
		return "sent", nil
	})
	runtime.RegisterActivity(e.Reg, "ProcessPayment", func(_ context.Context, r approvalRequest) (string, error) {
		return fmt.Sprintf("paid %d", r.Amount), nil
	})
	runtime.RegisterActivity(e.Reg, "Escalate", func(_ context.Context, r approvalRequest) (string, error) {
		return "escalated " + r.ID, nil
	})
	runtime.RegisterOrchestration(e.Reg, "Approval", func(ctx *runtime.OrchestrationContext, r approvalRequest) (string, error) {
		if _, err := ctx.CallActivity("NotifyApprover", r).AwaitRaw(); err != nil {
			return "", err
		}
		ctx.SetCustomStatus("waiting for approval")
		decision := ctx.WaitForEvent("ApprovalDecision")
		timeout := ctx.CreateTimer(r.Timeout)
		winner, err := ctx.Select(decision, timeout)
		if err != nil {
			return "", err
		}
		if winner == 1 {
			ctx.SetCustomStatus("timed out")
			return runtime.AwaitAs[string](ctx.CallActivity("Escalate", r))
		}
		d, err := runtime.AwaitAs[approvalDecision](decision)
		if err != nil {
			return "", err
		}
		if !d.Approved {
			ctx.SetCustomStatus("rejected")
			return "rejected by " + d.By, nil
		}
		ctx.SetCustomStatus("approved")
		paid, err := runtime.AwaitAs[string](ctx.CallActivity("ProcessPayment", r))
		if err != nil {
			return "", err
		}
		return "approved by " + d.By + ": " + paid, nil
	})
	e.StartDefault()
	ctx := e.Ctx()
	requests := []approvalRequest{
		{ID: "appr-yes", Amount: 120, Timeout: time.Minute},
		{ID: "appr-no", Amount: 80, Timeout: time.Minute},
		{ID: "appr-timeout", Amount: 50, Timeout: 300 * time.Millisecond},
	}
	for _, r := range requests {
		require.NoError(t, e.Client.StartOrchestration(ctx, r.ID, "Approval", r))
	}
	e.WaitForSubscription("appr-yes", "ApprovalDecision", 1)
	require.NoError(t, e.Client.RaiseEvent(ctx, "appr-yes", "ApprovalDecision", approvalDecision{Approved: true, By: "alice"}))
	e.WaitForSubscription("appr-no", "ApprovalDecision", 1)
	require.NoError(t, e.Client.RaiseEvent(ctx, "appr-no", "ApprovalDecision", approvalDecision{Approved: false, By: "bob"}))

	var out string
	e.RequireCompleted("appr-yes", &out)
	require.Equal(t, "approved by alice: paid 120", out)
	e.RequireCompleted("appr-no", &out)
	require.Equal(t, "rejected by bob", out)
	e.RequireCompleted("appr-timeout", &out)
	require.Equal(t, "escalated appr-timeout", out)

	// The event won: the timer is left to fire unobserved.
	events, err := e.Client.ReadHistory(ctx, "appr-yes")
	require.NoError(t, err)
	k := CountKinds(events)
	require.Equal(t, 1, k["ExternalEvent"])
	require.Zero(t, k["TimerFired"])
	require.Zero(t, k["ExternalSubscribedCancelled"])
	// The timer won: the subscription is withdrawn, and a late decision
	// changes nothing.
	events, err = e.Client.ReadHistory(ctx, "appr-timeout")
	require.NoError(t, err)
	k = CountKinds(events)
	require.Equal(t, 1, k["TimerFired"])
	require.Equal(t, 1, k["ExternalSubscribedCancelled"])
	require.NoError(t, e.Client.RaiseEvent(ctx, "appr-timeout", "ApprovalDecision", approvalDecision{Approved: true, By: "late"}))
	e.waitQueueDrained("appr-timeout")
	after, err := e.Client.ReadHistory(ctx, "appr-timeout")
	require.NoError(t, err)
	require.Equal(t, events, after, "the late decision left no trace")
	st, err := e.Client.GetStatus(ctx, "appr-timeout")
	require.NoError(t, err)
	require.Equal(t, runtime.StateCompleted, st.State)
	require.Equal(t, `"escalated appr-timeout"`, st.Output)
	cs, err := e.Client.GetCustomStatus(ctx, "appr-timeout", 0)
	require.NoError(t, err)
	require.NotNil(t, cs)
	require.Equal(t, "timed out", *cs.Status)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, notified, 3)
}

// activityLog records which node ran each activity, and how often.
type activityLog struct {
	mu   sync.Mutex
	runs map[string][]string // "<instance>/<activity id>" → nodes, one per run
}

func newActivityLog() *activityLog { return &activityLog{runs: map[string][]string{}} }

func (l *activityLog) record(ctx context.Context) {
	info, _ := runtime.ActivityInfoFrom(ctx)
	key := fmt.Sprintf("%s/%d", info.Instance, info.ActivityID)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[key] = append(l.runs[key], info.WorkerNodeID)
}

// snapshot returns a copy of the runs.
func (l *activityLog) snapshot() map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string][]string, len(l.runs))
	for k, v := range l.runs {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// sampleTagsTwoRuntimes runs one orchestration that needs two runtimes:
// runtime A has only the "gpu"-tagged activities and fetches only gpu work,
// runtime B has only the untagged ones; both run orchestrations.
func sampleTagsTwoRuntimes(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	log := newActivityLog()
	pipeline := func(ctx *runtime.OrchestrationContext, image string) ([]string, error) {
		// Untagged → gpu → (gpu ‖ untagged) → untagged.
		prepared, err := runtime.AwaitAs[string](ctx.CallActivity("Prepare", image))
		if err != nil {
			return nil, err
		}
		embedded, err := runtime.AwaitAs[string](ctx.CallActivity("Embed", prepared, runtime.WithTag("gpu")))
		if err != nil {
			return nil, err
		}
		classify := ctx.CallActivity("Classify", embedded, runtime.WithTag("gpu"))
		thumb := ctx.CallActivity("Thumbnail", prepared)
		if err := ctx.Join(classify, thumb); err != nil {
			return nil, err
		}
		label, _ := runtime.AwaitAs[string](classify)
		th, _ := runtime.AwaitAs[string](thumb)
		stored, err := runtime.AwaitAs[string](ctx.CallActivity("Store", label+"+"+th))
		return []string{embedded, label, th, stored}, err
	}
	step := func(reg *runtime.Registry, name, prefix string) {
		runtime.RegisterActivity(reg, name, func(ctx context.Context, s string) (string, error) {
			log.record(ctx)
			return prefix + "(" + s + ")", nil
		})
	}
	regA, regB := runtime.NewRegistry(), runtime.NewRegistry()
	step(regA, "Embed", "embed")
	step(regA, "Classify", "classify")
	step(regB, "Prepare", "prep")
	step(regB, "Thumbnail", "thumb")
	step(regB, "Store", "store")
	runtime.RegisterOrchestration(regA, "ImagePipeline", pipeline)
	runtime.RegisterOrchestration(regB, "ImagePipeline", pipeline)

	gpuOnly, err := durable.OnlyTags("gpu")
	require.NoError(t, err)
	optsA, optsB := FastOptions(t), FastOptions(t)
	optsA.WorkerNodeID, optsA.TagFilter = "runtime-a-gpu", gpuOnly
	optsB.WorkerNodeID = "runtime-b-default"
	e.Start(regA, optsA)
	e.Start(regB, optsB)

	ctx := e.Ctx()
	const n = 6
	for i := 0; i < n; i++ {
		require.NoError(t, e.Client.StartOrchestration(ctx, fmt.Sprint("img-", i), "ImagePipeline", fmt.Sprint("img", i)))
	}
	for i := 0; i < n; i++ {
		var out []string
		e.RequireCompleted(fmt.Sprint("img-", i), &out)
		p := fmt.Sprintf("prep(img%d)", i)
		require.Equal(t, []string{
			"embed(" + p + ")",
			"classify(embed(" + p + "))",
			"thumb(" + p + ")",
			"store(classify(embed(" + p + "))+thumb(" + p + "))",
		}, out)
	}

	runs := log.snapshot()
	require.Len(t, runs, 5*n)
	for i := 0; i < n; i++ {
		events, err := e.Client.ReadHistory(ctx, fmt.Sprint("img-", i))
		require.NoError(t, err)
		for _, ev := range events {
			s, ok := ev.Kind.(history.ActivityScheduled)
			if !ok {
				continue
			}
			nodes := runs[fmt.Sprintf("img-%d/%d", i, ev.EventID)]
			want := "runtime-b-default"
			if s.Tag == "gpu" {
				want = "runtime-a-gpu"
			}
			require.Equal(t, []string{want}, nodes, "%s (tag %q) of img-%d", s.Name, s.Tag, i)
		}
	}
}

// shardRange is the input of one shard of the large fan-out.
type shardRange struct {
	From int `json:"from"`
	To   int `json:"to"` // exclusive
}

// sampleLargeFanOutTwoRuntimes fans 200 activities out over two runtimes
// and checks that every activity ran exactly once. The root orchestration
// splits the work into 4 shard sub-orchestrations of 50 activities each:
// the way to scale a large fan-out, because a queue item is dispatched by
// its instance's slot, so the activities of several instances are fetched
// in parallel where those of one instance queue behind each other, and
// each shard's history stays small.
func sampleLargeFanOutTwoRuntimes(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	log := newActivityLog()
	const n, shards = 200, 4
	// An activity waits (a bounded time) until the other runtime has run
	// one too, so that one runtime cannot drain the queue before the
	// other's first fetch: both must take part, and a provider that serves
	// only one of them fails the check below.
	first := map[string]chan struct{}{"fan-a": make(chan struct{}), "fan-b": make(chan struct{})}
	var once [2]sync.Once
	other := map[string]string{"fan-a": "fan-b", "fan-b": "fan-a"}
	reg := func() *runtime.Registry {
		r := runtime.NewRegistry()
		runtime.RegisterActivity(r, "Checksum", func(ctx context.Context, v int) (int, error) {
			log.record(ctx)
			info, _ := runtime.ActivityInfoFrom(ctx)
			if i := slices.Index([]string{"fan-a", "fan-b"}, info.WorkerNodeID); i >= 0 {
				once[i].Do(func() { close(first[info.WorkerNodeID]) })
				select {
				case <-first[other[info.WorkerNodeID]]:
				case <-ctx.Done():
				case <-time.After(10 * time.Second):
				}
			}
			return v*7 + 3, nil
		})
		runtime.RegisterOrchestration(r, "FanOutShard", func(ctx *runtime.OrchestrationContext, rg shardRange) ([]int, error) {
			inputs := make([]int, 0, rg.To-rg.From)
			for v := rg.From; v < rg.To; v++ {
				inputs = append(inputs, v)
			}
			return fanOut[int, int](ctx, "Checksum", inputs)
		})
		runtime.RegisterOrchestration(r, "BigFanOut", func(ctx *runtime.OrchestrationContext, total int) ([]int, error) {
			tasks := make([]*runtime.Task, shards)
			for i := range tasks {
				rg := shardRange{From: i * total / shards, To: (i + 1) * total / shards}
				tasks[i] = ctx.CallSubOrchestration("FanOutShard", rg, runtime.WithInstanceID(fmt.Sprintf("%s-shard-%d", ctx.InstanceID(), i)))
			}
			parts, err := runtime.JoinAs[[]int](ctx, tasks...)
			if err != nil {
				return nil, err
			}
			out := make([]int, 0, total)
			for _, part := range parts {
				out = append(out, part...)
			}
			return out, nil
		})
		return r
	}
	optsA, optsB := FastOptions(t), FastOptions(t)
	optsA.WorkerNodeID, optsB.WorkerNodeID = "fan-a", "fan-b"
	e.Start(reg(), optsA)
	e.Start(reg(), optsB)

	require.NoError(t, e.Client.StartOrchestration(e.Ctx(), "big-fan", "BigFanOut", n))
	var out []int
	e.RequireCompleted("big-fan", &out)
	require.Len(t, out, n)
	for i, v := range out {
		require.Equal(t, i*7+3, v, "result %d in order", i)
	}

	runs := log.snapshot()
	require.Len(t, runs, n, "every activity ran")
	perNode := map[string]int{}
	for key, nodes := range runs {
		require.Len(t, nodes, 1, "activity %s ran exactly once", key)
		perNode[nodes[0]]++
	}
	t.Logf("activities per runtime: %v", perNode)
	require.Len(t, perNode, 2, "both runtimes executed activities")
	for i := 0; i < shards; i++ {
		events, err := e.Client.ReadHistory(e.Ctx(), fmt.Sprintf("big-fan-shard-%d", i))
		require.NoError(t, err)
		k := CountKinds(events)
		require.Equal(t, n/shards, k["ActivityScheduled"])
		require.Equal(t, n/shards, k["ActivityCompleted"], "no completion recorded twice")
	}
}

// sampleLateChildAfterContinueAsNew: a child scheduled by the parent's
// first execution completes after the parent continued as new and
// scheduled another child under the same event id; the late completion is
// routed to the execution that scheduled it (ParentExecutionID) and
// dropped there, so the new execution gets its own child's result.
func sampleLateChildAfterContinueAsNew(t *testing.T, f Factory) {
	e := NewEnv(t, f)
	runtime.RegisterOrchestration(e.Reg, "WaitingEcho", func(ctx *runtime.OrchestrationContext, s string) (string, error) {
		if _, err := ctx.WaitForEvent("finish").AwaitRaw(); err != nil {
			return "", err
		}
		return s, nil
	})
	runtime.RegisterOrchestration(e.Reg, "Restarter", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		child := ctx.CallSubOrchestration("WaitingEcho", fmt.Sprint("exec-", ctx.ExecutionID()))
		if ctx.ExecutionID() == 1 {
			if _, err := ctx.WaitForEvent("restart").AwaitRaw(); err != nil {
				return "", err
			}
			return "", ctx.ContinueAsNew("")
		}
		return runtime.AwaitAs[string](child)
	})
	e.StartDefault()
	ctx := e.Ctx()
	require.NoError(t, e.Client.StartOrchestration(ctx, "late", "Restarter", ""))
	first, second := "late::sub::2", "late::exec2::sub::2"
	e.WaitForSubscription(first, "finish", 1)
	e.WaitForSubscription("late", "restart", 1)
	require.NoError(t, e.Client.RaiseEvent(ctx, "late", "restart", ""))
	e.WaitForSubscription(second, "finish", 1)

	// Execution 1's child finishes while execution 2 waits for its own.
	require.NoError(t, e.Client.RaiseEvent(ctx, first, "finish", ""))
	e.RequireCompleted(first, nil)
	e.waitQueueDrained("late")
	st, err := e.Client.GetStatus(ctx, "late")
	require.NoError(t, err)
	require.Equal(t, runtime.StateRunning, st.State, "the late completion did not complete execution 2")
	require.Equal(t, uint64(2), st.ExecutionID)

	require.NoError(t, e.Client.RaiseEvent(ctx, second, "finish", ""))
	var out string
	e.RequireCompleted("late", &out)
	require.Equal(t, "exec-2", out)
	events, err := e.Client.ReadHistory(ctx, "late")
	require.NoError(t, err)
	var results []string
	for _, ev := range events {
		if c, ok := ev.Kind.(history.SubOrchestrationCompleted); ok {
			results = append(results, c.Result)
		}
	}
	require.Equal(t, []string{`"exec-2"`}, results)
	info, err := e.Client.GetInstanceInfo(ctx, second)
	require.NoError(t, err)
	require.Equal(t, "late", info.ParentInstanceID)
}

// waitQueueDrained waits until instance has had no pending orchestrator
// message for several consecutive polls (messages delivered through an
// outbox may land shortly after their sender's commit).
func (e *Env) waitQueueDrained(instance string) {
	e.T.Helper()
	ctx := e.Ctx()
	quiet := 0
	for quiet < 5 {
		st, err := e.Client.Provider().GetInstanceStats(ctx, instance)
		require.NoError(e.T, err)
		if st != nil && st.PendingMessageCount == 0 {
			quiet++
		} else {
			quiet = 0
		}
		select {
		case <-ctx.Done():
			e.T.Fatalf("queue of %s did not drain", instance)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
