package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/durafeed/durafeed/runtime"
)

// The workload mixes five orchestration kinds, started round-robin. Each
// job knows its expected output, so the demo can tell a completion with a
// wrong result from a correct one.
const (
	kindHello    = "hello"
	kindFanOut   = "fanout"
	kindTimer    = "timer"
	kindEvent    = "event"
	kindSubOrchs = "suborch"
)

// workloadKinds lists the workload's orchestration kinds in start order.
func workloadKinds() []string {
	return []string{kindHello, kindFanOut, kindTimer, kindEvent, kindSubOrchs}
}

// Orchestration names.
const (
	orchHello    = "HelloWorld"
	orchFanOut   = "SumOfSquares"
	orchTimer    = "Reminder"
	orchApproval = "Approval"
	orchParent   = "GreetTeam"
)

// approvalEvent is the external event the demo raises; awaitingApproval is
// the custom status the approval orchestration sets when it listens.
const (
	approvalEvent    = "Approval"
	awaitingApproval = "awaiting approval"
)

// workloadOptions shapes the orchestrations.
type workloadOptions struct {
	// FanOut is the number of activities of a fan-out/fan-in job.
	FanOut int
	// TimerDelay is the durable timer of a timer job.
	TimerDelay time.Duration
	// ApprovalTimeout bounds the wait of an event job for the demo's event;
	// reaching it fails the job (the event was lost).
	ApprovalTimeout time.Duration
}

// reminder is the input of the timer job.
type reminder struct {
	Name  string        `json:"name"`
	Delay time.Duration `json:"delay"`
}

// approvalRequest is the input of the event job; approval its event.
type approvalRequest struct {
	Order   string        `json:"order"`
	Timeout time.Duration `json:"timeout"`
}

type approval struct {
	By string `json:"by"`
}

// registerWorkload registers the workload's orchestrations and activities.
// Every replica calls it on its own registry, as separate processes would.
func registerWorkload(reg *runtime.Registry) {
	runtime.RegisterActivity(reg, "Greet", func(_ context.Context, name string) (string, error) {
		return "Hello, " + name + "!", nil
	})
	runtime.RegisterActivity(reg, "Square", func(_ context.Context, n int) (int, error) {
		return n * n, nil
	})

	// Hello world: one activity.
	runtime.RegisterOrchestration(reg, orchHello, func(ctx *runtime.OrchestrationContext, name string) (string, error) {
		return runtime.AwaitAs[string](ctx.CallActivity("Greet", name))
	})

	// Fan-out/fan-in: n activities in parallel, results summed.
	runtime.RegisterOrchestration(reg, orchFanOut, func(ctx *runtime.OrchestrationContext, n int) (int, error) {
		tasks := make([]*runtime.Task, n)
		for i := range tasks {
			tasks[i] = ctx.CallActivity("Square", i+1)
		}
		squares, err := runtime.JoinAs[int](ctx, tasks...)
		if err != nil {
			return 0, err
		}
		sum := 0
		for _, v := range squares {
			sum += v
		}
		return sum, nil
	})

	// A durable timer, then an activity.
	runtime.RegisterOrchestration(reg, orchTimer, func(ctx *runtime.OrchestrationContext, r reminder) (string, error) {
		if _, err := ctx.CreateTimer(r.Delay).AwaitRaw(); err != nil {
			return "", err
		}
		return runtime.AwaitAs[string](ctx.CallActivity("Greet", r.Name))
	})

	// An external event raised by the demo, raced against a timeout.
	runtime.RegisterOrchestration(reg, orchApproval, func(ctx *runtime.OrchestrationContext, r approvalRequest) (string, error) {
		ctx.SetCustomStatus(awaitingApproval)
		ev := ctx.WaitForEvent(approvalEvent)
		winner, err := ctx.Select(ev, ctx.CreateTimer(r.Timeout))
		if err != nil {
			return "", err
		}
		if winner == 1 {
			return "", errors.New("no approval within " + r.Timeout.String())
		}
		a, err := runtime.AwaitAs[approval](ev)
		if err != nil {
			return "", err
		}
		ctx.SetCustomStatus("approved")
		return r.Order + " approved by " + a.By, nil
	})

	// Sub-orchestrations: two children in parallel.
	runtime.RegisterOrchestration(reg, orchParent, func(ctx *runtime.OrchestrationContext, team []string) (string, error) {
		tasks := make([]*runtime.Task, len(team))
		for i, member := range team {
			tasks[i] = ctx.CallSubOrchestration(orchHello, member)
		}
		greetings, err := runtime.JoinAs[string](ctx, tasks...)
		if err != nil {
			return "", err
		}
		return strings.Join(greetings, " "), nil
	})
}

// job is one orchestration of the workload.
type job struct {
	ID    string
	Kind  string
	Name  string
	Input any
	// Expect is the expected output, JSON-encoded as the runtime stores it.
	Expect string
}

// newJobs builds n jobs, kinds round-robin, with ids unique to runID.
func newJobs(runID string, n int, o workloadOptions) []job {
	kinds := workloadKinds()
	jobs := make([]job, n)
	for i := range jobs {
		kind := kinds[i%len(kinds)]
		j := job{ID: fmt.Sprintf("%s-%04d-%s", runID, i, kind), Kind: kind}
		var expect any
		switch kind {
		case kindHello:
			name := fmt.Sprint("user-", i)
			j.Name, j.Input, expect = orchHello, name, "Hello, "+name+"!"
		case kindFanOut:
			k := o.FanOut
			j.Name, j.Input, expect = orchFanOut, k, k*(k+1)*(2*k+1)/6
		case kindTimer:
			name := fmt.Sprint("sleeper-", i)
			j.Name, j.Input, expect = orchTimer, reminder{Name: name, Delay: o.TimerDelay}, "Hello, "+name+"!"
		case kindEvent:
			order := fmt.Sprint("order-", i)
			j.Name, j.Input, expect = orchApproval, approvalRequest{Order: order, Timeout: o.ApprovalTimeout}, order+" approved by durafeed-demo"
		case kindSubOrchs:
			a, b := fmt.Sprint("ada-", i), fmt.Sprint("bob-", i)
			j.Name, j.Input, expect = orchParent, []string{a, b}, "Hello, "+a+"! Hello, "+b+"!"
		}
		raw, _ := json.Marshal(expect)
		j.Expect = string(raw)
		jobs[i] = j
	}
	return jobs
}
