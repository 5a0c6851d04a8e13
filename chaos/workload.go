package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/durafeed/durafeed/runtime"
)

// The campaign's workload: six orchestration kinds, started round-robin,
// each with an output computable in advance, so a completion with a wrong
// output (a lost, repeated or reordered event) is told from a correct one.
//
//	chain    three activities in sequence, each doubling its input plus one
//	fanout   FanOut activities in parallel, results summed
//	suborch  two sub-orchestrations (each a chain), results summed
//	timer    a durable timer, then one activity
//	event    waits for two external events the campaign raises, one at a
//	         time, each with a unique payload (instance#e1, instance#e2)
//	mailbox  dequeues one persistent event per execution and continues as
//	         new until it has MailboxItems of them (instance#q1, ...); the
//	         campaign enqueues them all at once, so the ones not yet
//	         dequeued are carried across continue-as-new
const (
	KindChain   = "chain"
	KindFanOut  = "fanout"
	KindSubOrch = "suborch"
	KindTimer   = "timer"
	KindEvent   = "event"
	KindMailbox = "mailbox"
)

// Kinds lists the workload's orchestration kinds in start order.
func Kinds() []string {
	return []string{KindChain, KindFanOut, KindSubOrch, KindTimer, KindEvent, KindMailbox}
}

// Orchestration, activity, event and custom-status names of the workload.
const (
	orchChain   = "chaos.Chain"
	orchFanOut  = "chaos.FanOut"
	orchSubOrch = "chaos.Parent"
	orchTimer   = "chaos.Timer"
	orchEvent   = "chaos.Event"
	orchMailbox = "chaos.Mailbox"

	activityStep = "chaos.Step"

	eventSignal  = "chaos.signal"
	queueItem    = "chaos.item"
	statusAwait  = "await:" // + the number of the event awaited (1-based)
	statusReady  = "mailbox:ready"
	eventsPerJob = 2
	chainSteps   = 3
)

// step is the activity's function: what every expected output is built from.
func step(n int) int { return 2*n + 1 }

// chainOf applies step k times.
func chainOf(n, k int) int {
	for range k {
		n = step(n)
	}
	return n
}

// ActivityRef identifies one scheduled activity: its instance, execution
// and ActivityScheduled event id.
type ActivityRef struct {
	Instance    string
	ExecutionID uint64
	ID          uint64
}

// String formats the reference as instance/execution/id.
func (r ActivityRef) String() string {
	return r.Instance + "/" + strconv.FormatUint(r.ExecutionID, 10) + "/" + strconv.FormatUint(r.ID, 10)
}

// executions counts activity executions by ActivityRef: every call of the
// activity function, whether or not its completion is committed. It is
// safe for concurrent use.
type executions struct {
	mu sync.Mutex
	n  map[ActivityRef]int
}

func newExecutions() *executions { return &executions{n: map[ActivityRef]int{}} }

func (e *executions) add(r ActivityRef) {
	e.mu.Lock()
	e.n[r]++
	e.mu.Unlock()
}

// snapshot returns a copy of the counts.
func (e *executions) snapshot() map[ActivityRef]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[ActivityRef]int, len(e.n))
	for k, v := range e.n {
		out[k] = v
	}
	return out
}

// chainIn is the input of a chain (also a sub-orchestration's).
type chainIn struct {
	Seed  int `json:"seed"`
	Steps int `json:"steps"`
}

// timerIn is the input of a timer job.
type timerIn struct {
	Seed  int           `json:"seed"`
	Delay time.Duration `json:"delay"`
}

// mailboxIn is the input of each execution of a mailbox job.
type mailboxIn struct {
	Round int      `json:"round"`
	Of    int      `json:"of"`
	Got   []string `json:"got,omitempty"`
}

// register registers the workload on reg; every replica calls it on its
// own registry, as separate processes would. Each activity execution is
// counted in ex.
func register(reg *runtime.Registry, ex *executions) {
	runtime.RegisterActivity(reg, activityStep, func(ctx context.Context, n int) (int, error) {
		if info, ok := runtime.ActivityInfoFrom(ctx); ok {
			ex.add(ActivityRef{Instance: info.Instance, ExecutionID: info.ExecutionID, ID: info.ActivityID})
		}
		return step(n), nil
	})

	runtime.RegisterOrchestration(reg, orchChain, func(ctx *runtime.OrchestrationContext, in chainIn) (int, error) {
		n := in.Seed
		for range in.Steps {
			var err error
			if n, err = runtime.AwaitAs[int](ctx.CallActivity(activityStep, n)); err != nil {
				return 0, err
			}
		}
		return n, nil
	})

	runtime.RegisterOrchestration(reg, orchFanOut, func(ctx *runtime.OrchestrationContext, width int) (int, error) {
		tasks := make([]*runtime.Task, width)
		for i := range tasks {
			tasks[i] = ctx.CallActivity(activityStep, i+1)
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

	runtime.RegisterOrchestration(reg, orchSubOrch, func(ctx *runtime.OrchestrationContext, seed int) (int, error) {
		a := ctx.CallSubOrchestration(orchChain, chainIn{Seed: seed, Steps: 2})
		b := ctx.CallSubOrchestration(orchChain, chainIn{Seed: seed + 1, Steps: 2})
		if err := ctx.Join(a, b); err != nil {
			return 0, err
		}
		x, err := runtime.AwaitAs[int](a)
		if err != nil {
			return 0, err
		}
		y, err := runtime.AwaitAs[int](b)
		if err != nil {
			return 0, err
		}
		return x + y, nil
	})

	runtime.RegisterOrchestration(reg, orchTimer, func(ctx *runtime.OrchestrationContext, in timerIn) (int, error) {
		if _, err := ctx.CreateTimer(in.Delay).AwaitRaw(); err != nil {
			return 0, err
		}
		return runtime.AwaitAs[int](ctx.CallActivity(activityStep, in.Seed))
	})

	// The status announces each wait; it is committed with the
	// subscription, so an event raised after the client saw it is never
	// dropped for want of a subscriber.
	runtime.RegisterOrchestration(reg, orchEvent, func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		got := make([]string, 0, eventsPerJob)
		for i := 1; i <= eventsPerJob; i++ {
			ctx.SetCustomStatus(statusAwait + strconv.Itoa(i))
			v, err := runtime.AwaitAs[string](ctx.WaitForEvent(eventSignal))
			if err != nil {
				return "", err
			}
			got = append(got, v)
		}
		return strings.Join(got, ","), nil
	})

	runtime.RegisterOrchestration(reg, orchMailbox, func(ctx *runtime.OrchestrationContext, in mailboxIn) (string, error) {
		if in.Round == 1 {
			ctx.SetCustomStatus(statusReady)
		}
		v, err := runtime.AwaitAs[string](ctx.DequeueEvent(queueItem))
		if err != nil {
			return "", err
		}
		in.Got = append(in.Got, v)
		if in.Round < in.Of {
			return "", ctx.ContinueAsNew(mailboxIn{Round: in.Round + 1, Of: in.Of, Got: in.Got})
		}
		return strings.Join(in.Got, ","), nil
	})
}

// job is one root orchestration of the workload and what it must produce.
type job struct {
	Expectation
	name  string
	input any
}

// workloadShape sizes the jobs.
type workloadShape struct {
	fanOut       int
	timerDelay   time.Duration
	mailboxItems int
}

// newJobs builds n jobs, kinds round-robin, with ids unique to runID.
func newJobs(runID string, n int, w workloadShape) []job {
	kinds := Kinds()
	jobs := make([]job, n)
	for i := range jobs {
		kind := kinds[i%len(kinds)]
		j := job{Expectation: Expectation{Instance: fmt.Sprintf("%s-%05d-%s", runID, i, kind), Kind: kind}}
		var expect any
		switch kind {
		case KindChain:
			j.name, j.input, expect = orchChain, chainIn{Seed: i, Steps: chainSteps}, chainOf(i, chainSteps)
		case KindFanOut:
			sum := 0
			for k := 1; k <= w.fanOut; k++ {
				sum += step(k)
			}
			j.name, j.input, expect = orchFanOut, w.fanOut, sum
		case KindSubOrch:
			j.name, j.input, expect = orchSubOrch, i, chainOf(i, 2)+chainOf(i+1, 2)
		case KindTimer:
			j.name, j.input, expect = orchTimer, timerIn{Seed: i, Delay: w.timerDelay}, step(i)
		case KindEvent:
			for e := 1; e <= eventsPerJob; e++ {
				j.Raised = append(j.Raised, fmt.Sprintf("%s#e%d", j.Instance, e))
			}
			j.name, j.input, expect = orchEvent, "", strings.Join(j.Raised, ",")
		case KindMailbox:
			for q := 1; q <= w.mailboxItems; q++ {
				j.Enqueued = append(j.Enqueued, fmt.Sprintf("%s#q%d", j.Instance, q))
			}
			j.name, j.input, expect = orchMailbox, mailboxIn{Round: 1, Of: w.mailboxItems}, strings.Join(j.Enqueued, ",")
		}
		raw, _ := json.Marshal(expect)
		j.Output = string(raw)
		for k, p := range j.Raised {
			j.Raised[k] = jsonString(p)
		}
		for k, p := range j.Enqueued {
			j.Enqueued[k] = jsonString(p)
		}
		jobs[i] = j
	}
	return jobs
}

// jsonString is s encoded as a JSON string: a payload as the client sends
// it and the history records it.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
