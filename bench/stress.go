package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/polling"
	"github.com/durafeed/durafeed/provider"
	"github.com/durafeed/durafeed/runtime"
)

// The stress workload's registered names: duroxide's
// parallel_orchestrations stress test.
const (
	// StressOrchestration fans out StressConfig.TasksPerInstance
	// StressActivity calls in parallel, joins them and returns a string.
	StressOrchestration = "FanoutOrchestration"
	// StressActivity sleeps StressConfig.ActivityDelay and returns
	// "processed: " + its input.
	StressActivity = "ProcessTask"
)

// stressShutdownTimeout bounds the shutdown of a stress scenario's
// runtimes: in-flight turns and activities still running after it are
// cancelled (their items abandoned), so a scenario always ends.
const stressShutdownTimeout = 30 * time.Second

// StressConfig configures the stress phase (RunStress): duroxide's stress
// test parallel_orchestrations on durafeed's runtime. A pump keeps
// MaxInFlight instances of StressOrchestration in flight, each started
// and then waited for by a client in another provider instance, until
// Orchestrations instances have been started (or MaxDuration has passed),
// and then waits for those in flight. Zero fields take the documented
// defaults (DefaultStressConfig).
type StressConfig struct {
	// Replicas are the replica counts of the phase (default 1 and 3): each
	// replica is one provider and one runtime on the scenario's container.
	// RunStress ignores it (StressScenario.Replicas says).
	Replicas []int
	// Orchestrations is how many instances a scenario starts (default
	// 1,000).
	Orchestrations int
	// MaxInFlight is how many instances are started and not yet waited for
	// at once (default 20).
	MaxInFlight int
	// TasksPerInstance is the fan-out of each instance: its input's
	// task_count (default 5).
	TasksPerInstance int
	// ActivityDelay is how long each StressActivity sleeps, honouring its
	// context (default 10 ms).
	ActivityDelay time.Duration
	// PollInterval is the polling replicas' polling.Options.PollInterval
	// (default 100 ms). duroxide's own stress configuration sets
	// dispatcher_min_poll_interval to 100 ms, so polling is measured here
	// against that stronger baseline rather than the seeds' 1 s, which the
	// other phases use.
	PollInterval time.Duration
	// MaxDuration ends the starts: no instance is started once it has
	// passed since the first start (default 3 min; negative: none). The
	// instances in flight are still waited for.
	MaxDuration time.Duration
	// WaitTimeout bounds the wait for one instance after its start call
	// (default 60 s); an instance not terminal by then counts as failed.
	WaitTimeout time.Duration
	// OrchestrationConcurrency and WorkerConcurrency are each replica's
	// runtime.Options of the same names (default 2 and 2, duroxide's stress
	// configuration); every other runtime option keeps its default.
	OrchestrationConcurrency, WorkerConcurrency int
	// Client says where the client that starts and waits runs (default
	// StressClientSeparate).
	Client StressClient
}

// StressClient is where a stress scenario's client runs.
type StressClient string

const (
	// StressClientSeparate is a provider of its own, which never fetches:
	// a client in another process.
	StressClientSeparate StressClient = "separate"
	// StressClientReplica is the first replica's provider, as in
	// duroxide's stress test, or a service that serves start-and-wait
	// requests beside its runtime: the provider tells the client of the
	// turns that replica commits (durable.InstanceWatcher).
	StressClientReplica StressClient = "replica"
)

// ParseStressClient parses a StressClient name.
func ParseStressClient(s string) (StressClient, error) {
	switch c := StressClient(s); c {
	case StressClientSeparate, StressClientReplica:
		return c, nil
	}
	return "", fmt.Errorf("bench: unknown stress client %q (want %q or %q)", s, StressClientSeparate, StressClientReplica)
}

// DefaultStressConfig returns the stress phase of `durafeed-bench
// -stress` without other flags.
func DefaultStressConfig() StressConfig {
	return StressConfig{
		Replicas:                 []int{1, 3},
		Orchestrations:           1000,
		MaxInFlight:              20,
		TasksPerInstance:         5,
		ActivityDelay:            10 * time.Millisecond,
		PollInterval:             100 * time.Millisecond,
		MaxDuration:              3 * time.Minute,
		WaitTimeout:              60 * time.Second,
		OrchestrationConcurrency: 2,
		WorkerConcurrency:        2,
		Client:                   StressClientSeparate,
	}
}

func (c StressConfig) withDefaults() StressConfig {
	d := DefaultStressConfig()
	if c.Replicas == nil {
		c.Replicas = d.Replicas
	}
	if c.Orchestrations <= 0 {
		c.Orchestrations = d.Orchestrations
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = d.MaxInFlight
	}
	if c.TasksPerInstance <= 0 {
		c.TasksPerInstance = d.TasksPerInstance
	}
	if c.ActivityDelay <= 0 {
		c.ActivityDelay = d.ActivityDelay
	}
	if c.PollInterval <= 0 {
		c.PollInterval = d.PollInterval
	}
	if c.MaxDuration == 0 {
		c.MaxDuration = d.MaxDuration
	}
	if c.WaitTimeout <= 0 {
		c.WaitTimeout = d.WaitTimeout
	}
	if c.OrchestrationConcurrency <= 0 {
		c.OrchestrationConcurrency = d.OrchestrationConcurrency
	}
	if c.Client == "" {
		c.Client = StressClientSeparate
	}
	if c.WorkerConcurrency <= 0 {
		c.WorkerConcurrency = d.WorkerConcurrency
	}
	return c
}

// StressScenario is the stress workload in one mode on one replica count.
type StressScenario struct {
	// Mode is the replicas' and the client's mode.
	Mode Mode
	// Replicas is the number of runtimes (default 1).
	Replicas int
	// Workload is the workload (its zero fields take the defaults; its
	// Replicas field is ignored).
	Workload StressConfig
}

// StressResult is what one StressScenario measured. The throughput window
// runs from the first start call to the last completion (the return of
// the wait that saw it); the cost counts every request on the scenario's
// container from the replicas' opening to their close.
type StressResult struct {
	Mode              Mode    `json:"mode"`
	Replicas          int     `json:"replicas"`
	InjectedLatencyMS float64 `json:"injected_latency_ms"`
	// The workload: MaxInFlight, TasksPerInstance, ActivityDelayMS and, in
	// polling mode, the replicas' PollIntervalMS.
	MaxInFlight      int     `json:"max_in_flight"`
	TasksPerInstance int     `json:"tasks_per_instance"`
	ActivityDelayMS  float64 `json:"activity_delay_ms"`
	PollIntervalMS   float64 `json:"poll_interval_ms,omitempty"`
	// Client is where the client ran.
	Client StressClient `json:"client"`
	// JoinS is how long the event-driven replicas took to join and
	// settle their leases before the first start (0 when polling).
	JoinS float64 `json:"join_s,omitempty"`

	// Launched counts the instances whose start was called; Completed
	// those that ended in runtime.StateCompleted; Failed the rest:
	// StartErrors (the start call failed), Timeouts (not terminal within
	// the wait timeout, or the wait failed) and FailedStates (ended in
	// runtime.StateFailed). FirstError describes the first failure.
	Launched     int    `json:"launched"`
	Completed    int    `json:"completed"`
	Failed       int    `json:"failed"`
	StartErrors  int    `json:"start_errors"`
	Timeouts     int    `json:"timeouts"`
	FailedStates int    `json:"failed_states"`
	FirstError   string `json:"first_error,omitempty"`
	// SuccessPct is 100 × Completed / Launched.
	SuccessPct float64 `json:"success_pct"`

	// WindowS is the throughput window; OrchPerSec is Completed and
	// ActivitiesPerSec is Activities over it.
	WindowS          float64 `json:"window_s"`
	OrchPerSec       float64 `json:"orch_per_s"`
	ActivitiesPerSec float64 `json:"activities_per_s"`
	// Latency summarises the completed instances' start call → wait
	// return. The client's wait polls the status with its default back-off
	// (5 ms doubling to 500 ms), which is part of it, as it is of what a
	// caller sees.
	Latency Summary `json:"latency"`

	// Turns counts the turns the replicas committed (successful
	// AckOrchestrationItem calls) and Activities the activities they
	// completed (successful AckWorkItem calls); TurnsPerOrch is Turns per
	// completed instance. TurnAckErrors and ActivityAckErrors count failed
	// calls (a retried call counts each failure).
	Turns             int64   `json:"turns"`
	Activities        int64   `json:"activities"`
	TurnsPerOrch      float64 `json:"turns_per_orch"`
	TurnAckErrors     int64   `json:"turn_ack_errors"`
	ActivityAckErrors int64   `json:"activity_ack_errors"`
	// PerReplica splits Turns and Activities by replica, in the order the
	// replicas were opened; MinTurnShare and MinActivityShare are the
	// smallest shares (1 with one replica).
	PerReplica       []StressReplica `json:"per_replica"`
	MinTurnShare     float64         `json:"min_turn_share"`
	MinActivityShare float64         `json:"min_activity_share"`

	// Requests and RequestCharge (simulated RU) are the container's totals;
	// RequestsPerOrch and RUPerOrch divide them by Completed, and
	// ByOperation splits them by operation, per completed instance.
	Requests        int64                `json:"requests"`
	RequestCharge   float64              `json:"request_charge"`
	RequestsPerOrch float64              `json:"requests_per_orch"`
	RUPerOrch       float64              `json:"ru_per_orch"`
	ByOperation     map[string]OpPerOrch `json:"by_operation_per_orch,omitempty"`
	// WriteFloor is what a completed orchestration's documents and
	// messages cost to write once each (sampled); FloorRatio is RUPerOrch
	// over it.
	WriteFloor WriteFloor `json:"write_floor"`
	FloorRatio float64    `json:"floor_ratio,omitempty"`
	// ElapsedS is the whole scenario: from opening the first provider to
	// closing the last.
	ElapsedS float64 `json:"elapsed_s"`
}

// StressReplica is one replica's part of a stress scenario's work.
type StressReplica struct {
	Turns      int64 `json:"turns"`
	Activities int64 `json:"activities"`
	// TurnShare and ActivityShare are fractions of the scenario's totals.
	TurnShare     float64 `json:"turn_share"`
	ActivityShare float64 `json:"activity_share"`
}

// OpPerOrch is the cost of one kind of operation per completed
// orchestration.
type OpPerOrch struct {
	Requests float64 `json:"requests"`
	RU       float64 `json:"ru"`
}

// stressInput is StressOrchestration's input.
type stressInput struct {
	TaskCount int `json:"task_count"`
}

// stressRegistry registers the workload: StressOrchestration and
// StressActivity sleeping delay.
func stressRegistry(delay time.Duration) *runtime.Registry {
	reg := runtime.NewRegistry()
	runtime.RegisterActivity(reg, StressActivity, func(ctx context.Context, input string) (string, error) {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return "", context.Cause(ctx)
		}
		return "processed: " + input, nil
	})
	runtime.RegisterOrchestration(reg, StressOrchestration, func(ctx *runtime.OrchestrationContext, in stressInput) (string, error) {
		tasks := make([]*runtime.Task, in.TaskCount)
		for i := range tasks {
			tasks[i] = ctx.CallActivity(StressActivity, fmt.Sprintf("task-%d", i))
		}
		if _, err := runtime.JoinAs[string](ctx, tasks...); err != nil {
			return "", err
		}
		return fmt.Sprintf("completed %d tasks", in.TaskCount), nil
	})
	return reg
}

// ackCounter is a replica's provider as its runtime sees it: it counts
// the turns and activities committed through it. Every other method,
// Admin included, is the wrapped provider's. The optional capabilities
// the runtime itself looks for on its provider are forwarded, so the
// runtime behaves as on the wrapped provider: the poll interval a polling
// provider states (PollInterval, which sets the runtime's pause after an
// empty fetch) and Crash (runtime.Crasher). The instance watches a
// runtime's own client would use are not: the scenario's client has a
// provider of its own.
type ackCounter struct {
	durable.Provider
	turns, activities      atomic.Int64
	turnErrs, activityErrs atomic.Int64
	// terminal, when set, is called after each committed turn that ends
	// its execution (durable.Status.IsTerminal), with that status: the
	// backlog phase counts completions without asking the store.
	terminal func(durable.Status)
}

// PollInterval returns the wrapped provider's poll interval, or 0 (the
// runtime's default pause) when it states none, as a provider without
// the capability.
func (c *ackCounter) PollInterval() time.Duration {
	if pp, ok := c.Provider.(durable.PollPacer); ok {
		return pp.PollInterval()
	}
	return 0
}

// AckOrchestrationItem implements durable.Provider, counting successes
// and failures.
func (c *ackCounter) AckOrchestrationItem(ctx context.Context, lockToken string, turn durable.OrchestrationTurn) error {
	err := c.Provider.AckOrchestrationItem(ctx, lockToken, turn)
	if err == nil {
		c.turns.Add(1)
		if st := turn.Metadata.Status; c.terminal != nil && st.IsTerminal() {
			c.terminal(st)
		}
	} else {
		c.turnErrs.Add(1)
	}
	return err
}

// AckWorkItem implements durable.Provider, counting successes and
// failures.
func (c *ackCounter) AckWorkItem(ctx context.Context, lockToken string, completion durable.WorkItem) error {
	err := c.Provider.AckWorkItem(ctx, lockToken, completion)
	if err == nil {
		c.activities.Add(1)
	} else {
		c.activityErrs.Add(1)
	}
	return err
}

// Crash implements runtime.Crasher when the wrapped provider does.
func (c *ackCounter) Crash() {
	if cr, ok := c.Provider.(runtime.Crasher); ok {
		cr.Crash()
	}
}

// stressOutcome is one instance's fate.
type stressOutcome struct {
	inst       string
	start, end time.Time
	state      runtime.State
	err        error
	startErr   bool
}

// stressTopology is what a stress scenario opened: replicas (a provider
// and a runtime each) and the client's provider.
type stressTopology struct {
	providers []*provider.Provider // replicas' and the client's, closed in order
	counters  []*ackCounter
	runtimes  []*runtime.Runtime
	stopOnce  sync.Once
	stopErr   error
}

// stop shuts the runtimes down (in-flight work finishes, or is cancelled
// after stressShutdownTimeout), then closes every provider. It returns
// the runtimes' shutdown errors, joined; later calls return the same.
func (t *stressTopology) stop(ctx context.Context) error {
	t.stopOnce.Do(func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stressShutdownTimeout)
		defer cancel()
		var errs []error
		for _, rt := range t.runtimes {
			if err := rt.Shutdown(sctx); err != nil {
				errs = append(errs, fmt.Errorf("bench: stopping a stress replica: %w", err))
			}
		}
		for _, p := range t.providers {
			_ = p.Close()
		}
		t.stopErr = errors.Join(errs...)
	})
	return t.stopErr
}

// RunStress runs one stress scenario in a container of its own: Replicas
// replicas (one provider and one runtime each, in s.Mode; in polling mode
// the dispatcher polls every Workload.PollInterval) and a client: in a
// separate provider of the same mode, which never fetches (a client in
// another process), or the first replica's (Workload.Client). The
// event-driven replicas join dispatch (engine.Engine.Join) before the
// first start, as a service does before it reports ready. It returns once every goroutine it started has
// stopped and every provider is closed. An instance that fails is
// counted, not returned as an error; when ctx ends, the result holds what
// was measured and the error is ctx's.
func (e *Env) RunStress(ctx context.Context, s StressScenario) (res StressResult, err error) {
	w := s.Workload.withDefaults()
	if s.Replicas <= 0 {
		s.Replicas = 1
	}
	res = StressResult{Mode: s.Mode, Replicas: s.Replicas, InjectedLatencyMS: ms(e.Latency()), MaxInFlight: w.MaxInFlight,
		TasksPerInstance: w.TasksPerInstance, ActivityDelayMS: ms(w.ActivityDelay), Client: w.Client}
	var po *polling.Options
	if s.Mode == ModePolling {
		po = &polling.Options{PollInterval: w.PollInterval}
		res.PollIntervalMS = ms(w.PollInterval)
	}
	container, drop, err := e.newContainer(ctx, fmt.Sprintf("stress-%s-%d", s.Mode, s.Replicas))
	if err != nil {
		return res, err
	}
	defer drop()
	opened := time.Now()
	top := &stressTopology{}
	defer func() {
		if serr := top.stop(ctx); err == nil {
			err = serr
		}
	}()

	reg := stressRegistry(w.ActivityDelay)
	for range s.Replicas {
		p, err := e.openProviderWith(ctx, container, s.Mode, po)
		if err != nil {
			return res, err
		}
		top.providers = append(top.providers, p)
	}
	// Event-driven replicas join dispatch and settle their leases first,
	// as a service does before it reports ready (engine.Engine.Join):
	// the table is the steady state, not the replicas' start.
	joined := time.Now()
	if err := joinAll(ctx, top.providers, joinTimeout); err != nil {
		return res, err
	}
	res.JoinS = round2(time.Since(joined).Seconds())
	for _, p := range top.providers {
		c := &ackCounter{Provider: p}
		top.counters = append(top.counters, c)
		rt := runtime.New(c, reg, runtime.Options{OrchestrationConcurrency: w.OrchestrationConcurrency,
			WorkerConcurrency: w.WorkerConcurrency})
		if err := rt.Start(); err != nil {
			return res, fmt.Errorf("bench: starting a stress replica: %w", err)
		}
		top.runtimes = append(top.runtimes, rt)
	}
	var client *runtime.Client
	if w.Client == StressClientReplica {
		client = runtime.NewClient(top.providers[0])
	} else {
		cp, err := e.openProviderWith(ctx, container, clientMode(s.Mode), po)
		if err != nil {
			return res, err
		}
		top.providers = append(top.providers, cp)
		client = runtime.NewClient(cp)
	}

	outcomes := pumpStress(ctx, client, container, w)
	if err := top.stop(ctx); err != nil {
		return res, err
	}
	res.ElapsedS = round2(time.Since(opened).Seconds())
	res.summarize(outcomes, top.counters, e.usage(container))
	var done []string
	for _, o := range outcomes {
		if o.err == nil && len(done) < floorSample {
			done = append(done, o.inst)
		}
	}
	if res.WriteFloor, err = e.writeFloor(ctx, container, done); err != nil {
		return res, err
	}
	if res.WriteFloor.RU > 0 {
		res.FloorRatio = round2(res.RUPerOrch / res.WriteFloor.RU)
	}
	return res, ctx.Err() // what was measured before ctx ended, and why it ended
}

// joinTimeout bounds the replicas' join before a stress scenario.
const joinTimeout = time.Minute

// joinAll has every event-driven replica join dispatch at once and waits
// until each holds its share of the leases (a polling provider has
// nothing to join), for at most timeout (none when not positive).
func joinAll(ctx context.Context, ps []*provider.Provider, timeout time.Duration) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { errs[i] = p.Join(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bench: stress replicas joining: %w", err)
	}
	return nil
}

// pumpStress starts w.Orchestrations instances with at most w.MaxInFlight
// in flight, each waited for by its own goroutine, and returns once every
// one has returned.
func pumpStress(ctx context.Context, client *runtime.Client, container string, w StressConfig) []stressOutcome {
	var (
		mu       sync.Mutex
		outcomes = make([]stressOutcome, 0, w.Orchestrations)
		sem      = make(chan struct{}, w.MaxInFlight)
		wg       sync.WaitGroup
	)
	input := stressInput{TaskCount: w.TasksPerInstance}
	began := time.Now()
	expired := func() bool { return w.MaxDuration > 0 && time.Since(began) >= w.MaxDuration }
starts:
	for i := range w.Orchestrations {
		if expired() {
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break starts
		}
		if expired() {
			break // the slot is never used
		}
		inst := fmt.Sprintf("%s-%05d", container, i)
		wg.Go(func() {
			defer func() { <-sem }()
			o := runStressInstance(ctx, client, inst, input, w.WaitTimeout)
			mu.Lock()
			outcomes = append(outcomes, o)
			mu.Unlock()
		})
	}
	wg.Wait()
	return outcomes
}

// runStressInstance starts one instance and waits for it for at most
// timeout.
func runStressInstance(ctx context.Context, client *runtime.Client, inst string, input stressInput, timeout time.Duration) stressOutcome {
	o := stressOutcome{inst: inst, start: time.Now()}
	if err := client.StartOrchestration(ctx, inst, StressOrchestration, input); err != nil {
		o.end, o.startErr = time.Now(), true
		o.err = fmt.Errorf("start %s: %w", inst, err)
		return o
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := client.WaitForOrchestration(wctx, inst)
	o.end, o.state = time.Now(), st.State
	switch {
	case err != nil:
		o.err = fmt.Errorf("wait for %s: %w", inst, err)
	case st.State == runtime.StateFailed && st.Failure != nil:
		o.err = fmt.Errorf("%s failed: %s", inst, st.Failure.DisplayMessage())
	case st.State != runtime.StateCompleted:
		o.err = fmt.Errorf("%s ended %s", inst, st.State)
	}
	return o
}

// summarize fills the result from the instances' outcomes, the replicas'
// counters and the container's usage.
func (r *StressResult) summarize(outcomes []stressOutcome, counters []*ackCounter, u Usage) {
	var (
		latencies   []time.Duration
		first, last time.Time
	)
	for _, o := range outcomes {
		r.Launched++
		if first.IsZero() || o.start.Before(first) {
			first = o.start
		}
		switch {
		case o.err == nil:
			r.Completed++
			latencies = append(latencies, o.end.Sub(o.start))
			if o.end.After(last) {
				last = o.end
			}
			continue
		case o.startErr:
			r.StartErrors++
		case o.state == runtime.StateFailed:
			r.FailedStates++
		default:
			r.Timeouts++
		}
		r.Failed++
		if r.FirstError == "" {
			r.FirstError = o.err.Error()
		}
	}
	if r.Launched > 0 {
		r.SuccessPct = round2(100 * float64(r.Completed) / float64(r.Launched))
	}
	r.Latency = Summarize(latencies)

	for _, c := range counters {
		rep := StressReplica{Turns: c.turns.Load(), Activities: c.activities.Load()}
		r.Turns += rep.Turns
		r.Activities += rep.Activities
		r.TurnAckErrors += c.turnErrs.Load()
		r.ActivityAckErrors += c.activityErrs.Load()
		r.PerReplica = append(r.PerReplica, rep)
	}
	r.MinTurnShare, r.MinActivityShare = 1, 1
	for i := range r.PerReplica {
		p := &r.PerReplica[i]
		p.TurnShare, p.ActivityShare = share(p.Turns, r.Turns), share(p.Activities, r.Activities)
		r.MinTurnShare, r.MinActivityShare = min(r.MinTurnShare, p.TurnShare), min(r.MinActivityShare, p.ActivityShare)
	}

	if window := last.Sub(first); r.Completed > 0 && window > 0 {
		r.WindowS = round3(window.Seconds())
		r.OrchPerSec = round2(float64(r.Completed) / window.Seconds())
		r.ActivitiesPerSec = round2(float64(r.Activities) / window.Seconds())
	}
	r.Requests, r.RequestCharge = u.Requests, round2(u.RequestCharge)
	if r.Completed > 0 {
		n := float64(r.Completed)
		r.TurnsPerOrch = round2(float64(r.Turns) / n)
		r.RequestsPerOrch = round2(float64(u.Requests) / n)
		r.RUPerOrch = round2(u.RequestCharge / n)
		r.ByOperation = perOrch(u, r.Completed)
	}
}

// perOrch splits u by operation per orchestration (n of them, positive).
func perOrch(u Usage, n int) map[string]OpPerOrch {
	out := make(map[string]OpPerOrch, len(u.ByOperation))
	for op, o := range u.ByOperation {
		out[op] = OpPerOrch{Requests: round2(float64(o.Requests) / float64(n)), RU: round2(o.RequestCharge / float64(n))}
	}
	return out
}

// share is part / total as a fraction rounded to 1e-4 (0 for no total).
func share(part, total int64) float64 {
	if total == 0 {
		return 0
	}
	return math.Round(float64(part)/float64(total)*1e4) / 1e4
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
