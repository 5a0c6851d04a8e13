// Package sample is the code durafeed-service runs: a few orchestrations
// and activities registered on a runtime.Registry, to drive the service
// over its HTTP API. A service of one's own registers its code the same
// way.
//
//	Greet     {"name": "World"}            → "Hello, World!"
//	FanOut    {"count": 5}                 → 55 (the sum of Square(1..count), in parallel)
//	Approval  {"item": "laptop"}           → waits for the event "decision"
//	                                         ({"approved": true}), or for the
//	                                         timeout (default 1 h, "timeout": "30s")
package sample

import (
	"context"
	"fmt"
	"time"

	"github.com/durafeed/durafeed/runtime"
)

// MaxFanOut bounds FanOut's count.
const MaxFanOut = 1000

// GreetInput is Greet's input.
type GreetInput struct {
	Name string `json:"name"`
}

// FanOutInput is FanOut's input.
type FanOutInput struct {
	Count int `json:"count"`
}

// ApprovalInput is Approval's input.
type ApprovalInput struct {
	Item string `json:"item"`
	// Timeout is how long to wait for the decision (a Go duration;
	// default 1h).
	Timeout string `json:"timeout,omitempty"`
}

// Decision is the data of Approval's "decision" event.
type Decision struct {
	Approved bool   `json:"approved"`
	By       string `json:"by,omitempty"`
}

// ApprovalResult is Approval's output.
type ApprovalResult struct {
	Item     string `json:"item"`
	Approved bool   `json:"approved"`
	By       string `json:"by,omitempty"`
	TimedOut bool   `json:"timedOut,omitempty"`
}

// Register adds the sample's orchestrations and activities to reg.
func Register(reg *runtime.Registry) {
	runtime.RegisterActivity(reg, "SayHello", func(_ context.Context, name string) (string, error) {
		return "Hello, " + name + "!", nil
	})
	runtime.RegisterActivity(reg, "Square", func(_ context.Context, n int) (int, error) { return n * n, nil })

	runtime.RegisterOrchestration(reg, "Greet", func(ctx *runtime.OrchestrationContext, in GreetInput) (string, error) {
		if in.Name == "" {
			in.Name = "World"
		}
		return runtime.AwaitAs[string](ctx.CallActivity("SayHello", in.Name))
	})
	runtime.RegisterOrchestration(reg, "FanOut", func(ctx *runtime.OrchestrationContext, in FanOutInput) (int, error) {
		if in.Count < 0 || in.Count > MaxFanOut {
			return 0, fmt.Errorf("count %d is outside 0..%d", in.Count, MaxFanOut)
		}
		tasks := make([]*runtime.Task, in.Count)
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
	runtime.RegisterOrchestration(reg, "Approval", func(ctx *runtime.OrchestrationContext, in ApprovalInput) (ApprovalResult, error) {
		timeout := time.Hour
		if in.Timeout != "" {
			d, err := time.ParseDuration(in.Timeout)
			if err != nil || d <= 0 {
				return ApprovalResult{}, fmt.Errorf("timeout %q is not a positive duration", in.Timeout)
			}
			timeout = d
		}
		ctx.SetCustomStatus("waiting for a decision")
		answer := ctx.WaitForEvent("decision")
		winner, err := ctx.Select(answer, ctx.CreateTimer(timeout))
		if err != nil {
			return ApprovalResult{}, err
		}
		if winner == 1 {
			ctx.SetCustomStatus("timed out")
			return ApprovalResult{Item: in.Item, TimedOut: true}, nil
		}
		d, err := runtime.AwaitAs[Decision](answer)
		if err != nil {
			return ApprovalResult{}, err
		}
		ctx.SetCustomStatus("decided")
		return ApprovalResult{Item: in.Item, Approved: d.Approved, By: d.By}, nil
	})
}
