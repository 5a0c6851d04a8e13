package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/polling"
	"github.com/durafeed/durafeed/provider"
	"github.com/durafeed/durafeed/runtime"
)

// BacklogConfig configures the backlog phase (RunBacklog): a backlog of
// StressOrchestration starts enqueued with no replica running, then
// drained by Replicas replicas, at each of Depths; the cost and pace of a
// deep backlog against a shallow one. Zero fields take the documented
// defaults (DefaultBacklogConfig). The modes are Config.Modes.
type BacklogConfig struct {
	// Depths are the backlog depths (default 100 and 100,000): each runs
	// in every mode, and the targets compare a mode's deepest with its
	// shallowest.
	Depths []int
	// PollingDepths, when set, replaces Depths in polling mode: a polling
	// fetch reads every visible queued message of its share, so its drain
	// grows with the square of the depth (1,000 queued took 3 to 5
	// minutes on 2 cores) and a deep polling backlog may not fit in a
	// run.
	PollingDepths []int
	// Replicas is how many replicas drain the backlog (default 3).
	Replicas int
	// TasksPerInstance is each instance's fan-out (default 5), and
	// ActivityDelay how long each activity sleeps (default 1 ms: small,
	// so that dispatch, not the activities, sets the pace).
	TasksPerInstance int
	ActivityDelay    time.Duration
	// PollInterval is the polling replicas' polling.Options.PollInterval
	// (default 100 ms, as the stress phase).
	PollInterval time.Duration
	// OrchestrationConcurrency and WorkerConcurrency are each replica's
	// runtime.Options of the same names (default 2 and 2, as the stress
	// phase).
	OrchestrationConcurrency, WorkerConcurrency int
	// EnqueueConcurrency is how many starts the client has in flight at
	// once while it enqueues the backlog (default 32).
	EnqueueConcurrency int
	// MaxDrain bounds a drain (default 60 min; negative: none): a backlog
	// not drained by then is reported with what completed (TimedOut).
	MaxDrain time.Duration
	// PollingMaxDrain, when not zero, replaces MaxDrain in polling mode,
	// whose deep drains may not fit in a run (see PollingDepths): its row
	// then shows what completed in that time, for contrast.
	PollingMaxDrain time.Duration
	// MemoryInterval is how often the heap is read during a drain
	// (default 1 s).
	MemoryInterval time.Duration
}

// DefaultBacklogConfig returns the backlog phase of `durafeed-bench
// -backlog` without other flags.
func DefaultBacklogConfig() BacklogConfig {
	return BacklogConfig{
		Depths:                   []int{100, 100_000},
		Replicas:                 3,
		TasksPerInstance:         5,
		ActivityDelay:            time.Millisecond,
		PollInterval:             100 * time.Millisecond,
		OrchestrationConcurrency: 2,
		WorkerConcurrency:        2,
		EnqueueConcurrency:       32,
		MaxDrain:                 time.Hour,
		MemoryInterval:           time.Second,
	}
}

// MaxDrainOf returns the drain bound of mode m (PollingMaxDrain or
// MaxDrain).
func (c BacklogConfig) MaxDrainOf(m Mode) time.Duration {
	if m == ModePolling && c.PollingMaxDrain != 0 {
		return c.PollingMaxDrain
	}
	return c.MaxDrain
}

// DepthsOf returns the depths mode m runs at (PollingDepths or Depths).
func (c BacklogConfig) DepthsOf(m Mode) []int {
	if m == ModePolling && c.PollingDepths != nil {
		return c.PollingDepths
	}
	return c.Depths
}

func (c BacklogConfig) withDefaults() BacklogConfig {
	d := DefaultBacklogConfig()
	if c.Depths == nil {
		c.Depths = d.Depths
	}
	if c.Replicas <= 0 {
		c.Replicas = d.Replicas
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
	if c.OrchestrationConcurrency == 0 {
		c.OrchestrationConcurrency = d.OrchestrationConcurrency
	}
	if c.WorkerConcurrency == 0 {
		c.WorkerConcurrency = d.WorkerConcurrency
	}
	if c.EnqueueConcurrency <= 0 {
		c.EnqueueConcurrency = d.EnqueueConcurrency
	}
	if c.MaxDrain == 0 {
		c.MaxDrain = d.MaxDrain
	}
	if c.MemoryInterval <= 0 {
		c.MemoryInterval = d.MemoryInterval
	}
	return c
}

// BacklogScenario is one drain: Depth starts in Mode.
type BacklogScenario struct {
	Mode  Mode
	Depth int
	// Workload is the phase's configuration (its depths are ignored).
	Workload BacklogConfig
	// Progress, when set, receives a line every 30 s of the drain.
	Progress func(string)
}

// BacklogResult is what one backlog scenario measured. Unless said
// otherwise, the cost figures cover the drain window: from the replicas'
// start (their join, in event-driven mode, which reads the backlog of
// the slots each acquires) to the last completion, every request on the
// container in it (the client's included: it is idle then).
type BacklogResult struct {
	Mode              Mode    `json:"mode"`
	Depth             int     `json:"depth"`
	Replicas          int     `json:"replicas"`
	InjectedLatencyMS float64 `json:"injected_latency_ms"`
	TasksPerInstance  int     `json:"tasks_per_instance"`
	ActivityDelayMS   float64 `json:"activity_delay_ms"`
	// PollIntervalMS is the polling replicas' poll interval (0 in
	// event-driven mode).
	PollIntervalMS float64 `json:"poll_interval_ms,omitempty"`

	// EnqueueS is how long the client took to enqueue the backlog (not
	// part of the drain), EnqueuePerSec its pace, EnqueueRUPerStart the
	// charge per start.
	EnqueueS          float64 `json:"enqueue_s"`
	EnqueuePerSec     float64 `json:"enqueue_per_s"`
	EnqueueRUPerStart float64 `json:"enqueue_ru_per_start"`
	// EmulatorMB is what the process's live heap grew by while the
	// backlog was enqueued, read after a garbage collection before and
	// after: the emulator's documents for the backlog and their index
	// entries (nothing else runs then but the idle client).
	// EmulatorBytesPerStart is EmulatorMB per queued start, and
	// EmulatorProfiledMB the same growth in the heap profile's part
	// allocated through the emulator's code (sampled, so less exact).
	EmulatorMB            float64 `json:"emulator_mb"`
	EmulatorBytesPerStart float64 `json:"emulator_bytes_per_start"`
	EmulatorProfiledMB    float64 `json:"emulator_profiled_mb"`

	// JoinS is how long the event-driven replicas took to join (lease
	// acquisition and the catch-up of each acquired slot's backlog; 0 in
	// polling mode); DrainS is from the replicas' start to the last
	// completion (the join included).
	JoinS  float64 `json:"join_s"`
	DrainS float64 `json:"drain_s"`
	// Completed and Failed count the instances whose final turn the
	// replicas committed (Completed includes none of Failed); TimedOut is
	// set when MaxDrain ended the drain first (the join included: a join
	// still running then starts no runtime). StoreCompleted and
	// StoreFailed are the store's own counts after the drain
	// (durable.SystemMetrics), read outside the window.
	Completed      int  `json:"completed"`
	Failed         int  `json:"failed"`
	TimedOut       bool `json:"timed_out,omitempty"`
	StoreCompleted int  `json:"store_completed"`
	StoreFailed    int  `json:"store_failed"`
	// OrchPerSec is Completed over DrainS; DispatchOrchPerSec over the
	// drain without the join (from the runtimes' start), the pace the
	// targets compare, since a shallow drain is short enough for the
	// join to weigh on it. Drain shows when a tenth, half and nine tenths
	// of the backlog had completed.
	OrchPerSec         float64    `json:"orch_per_s"`
	DispatchOrchPerSec float64    `json:"dispatch_orch_per_s"`
	Drain              DrainShape `json:"drain_shape"`

	// Turns, Activities, TurnsPerOrch, the ack errors and the replicas'
	// shares as in StressResult.
	Turns             int64           `json:"turns"`
	Activities        int64           `json:"activities"`
	TurnsPerOrch      float64         `json:"turns_per_orch"`
	TurnAckErrors     int64           `json:"turn_ack_errors"`
	ActivityAckErrors int64           `json:"activity_ack_errors"`
	PerReplica        []StressReplica `json:"per_replica"`

	// Requests and RequestCharge are the drain window's totals;
	// RequestsPerOrch and RUPerOrch divide them by Completed, ByOperation
	// splits them by operation per completed orchestration. JoinRU is the
	// part of RequestCharge spent while the replicas joined, and
	// OpenRU what opening the replicas' providers cost before the window.
	Requests        int64                `json:"requests"`
	RequestCharge   float64              `json:"request_charge"`
	RequestsPerOrch float64              `json:"requests_per_orch"`
	RUPerOrch       float64              `json:"ru_per_orch"`
	ByOperation     map[string]OpPerOrch `json:"by_operation_per_orch,omitempty"`
	JoinRU          float64              `json:"join_ru"`
	OpenRU          float64              `json:"open_ru"`
	// WriteFloor and FloorRatio as in StressResult.
	WriteFloor WriteFloor `json:"write_floor"`
	FloorRatio float64    `json:"floor_ratio,omitempty"`

	// Queries is what the drain window's document queries examined on
	// the embedded emulator, by operation (absent on an account).
	// ExaminedPerOrch is every query's examined documents per completed
	// orchestration; MaxQueryExamined the most one query examined, and
	// MaxQueryLabel its operation: a fetch that scanned the backlog would
	// examine about Depth documents in one query, and its examined
	// documents per orchestration would grow with Depth.
	Queries          map[string]QueryScan `json:"queries,omitempty"`
	ExaminedPerOrch  float64              `json:"examined_per_orch"`
	MaxQueryExamined int64                `json:"max_query_examined"`
	MaxQueryLabel    string               `json:"max_query_label,omitempty"`

	// Engine sums the event-driven replicas' engine counters over the
	// scenario (absent in polling mode): the cross-partition queries
	// that read a slot's whole queue are its catch-ups, safety sweeps and
	// hint scans.
	Engine *BacklogEngine `json:"engine,omitempty"`

	// Memory is the bench process's heap during the drain, and Host how
	// busy the machine was then.
	Memory BacklogMemory `json:"memory"`
	Host   BacklogHost   `json:"host"`

	// FirstError is the first error a replica's ack met, if any.
	FirstError string `json:"first_error,omitempty"`
	// ElapsedS is the whole scenario: the container's creation to the
	// replicas' close.
	ElapsedS float64 `json:"elapsed_s"`
}

// BacklogEngine is what the event-driven replicas' engines counted
// (engine.Stats), summed.
type BacklogEngine struct {
	// Catchups are the catch-up queries (a newly owned slot's whole
	// queue), Sweeps the safety sweeps (every owned slot's visible,
	// unlocked queue documents), HintScans the scans run for another
	// replica's backlog hint and HintsWritten the hints written.
	Catchups     int64 `json:"catchups"`
	Sweeps       int64 `json:"sweeps"`
	HintScans    int64 `json:"hint_scans"`
	HintsWritten int64 `json:"hints_written"`
	// Scans are the slot scans run (a collapsed or newly owned slot, a
	// hint, a scan's continuation).
	Scans int64 `json:"scans"`
	// PendingPeak is the most wakeups one replica's hubs held at a
	// sample (every MemoryInterval): what bounds the replicas' memory for
	// the backlog (engine.Stats.PendingOrch and PendingWork).
	PendingPeak int `json:"pending_peak"`
}

// engineCounts sums the replicas' engine counters (nil in polling mode).
func engineCounts(replicas []*provider.Provider) *BacklogEngine {
	var out *BacklogEngine
	for _, p := range replicas {
		st, ok := p.EngineStats()
		if !ok {
			continue
		}
		if out == nil {
			out = &BacklogEngine{}
		}
		out.Catchups += st.Catchups
		out.Sweeps += st.Sweeps
		out.HintScans += st.HintScans
		out.HintsWritten += st.HintsWritten
		out.Scans += st.Scans
	}
	return out
}

// pendingPeak samples the replicas' hubs every interval until stop is
// closed, and returns the most wakeups one replica held at a sample.
func pendingPeak(replicas []*provider.Provider, interval time.Duration, stop <-chan struct{}) <-chan int {
	out := make(chan int, 1)
	go func() {
		peak := 0
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			for _, p := range replicas {
				if st, ok := p.EngineStats(); ok {
					peak = max(peak, st.PendingOrch+st.PendingWork)
				}
			}
			select {
			case <-stop:
				out <- peak
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// DrainShape is when fractions of a backlog had completed, in seconds
// from the replicas' start (0: not reached).
type DrainShape struct {
	P10S float64 `json:"p10_s"`
	P50S float64 `json:"p50_s"`
	P90S float64 `json:"p90_s"`
}

// drainTracker counts the final turns the replicas commit and notes when
// the drain reached its marks.
type drainTracker struct {
	start   time.Time
	target  int64
	n, fail atomic.Int64
	// last is the latest final turn, since start (ns).
	last  atomic.Int64
	marks [3]atomic.Int64 // 10%, 50%, 90%, since start (ns)
	done  chan struct{}
	once  sync.Once
}

func newDrainTracker(target int) *drainTracker {
	return &drainTracker{target: int64(target), done: make(chan struct{})}
}

// terminal is an ackCounter's terminal hook.
func (d *drainTracker) terminal(st durable.Status) {
	at := int64(time.Since(d.start))
	for {
		prev := d.last.Load()
		if at <= prev || d.last.CompareAndSwap(prev, at) {
			break
		}
	}
	if st == durable.StatusFailed {
		d.fail.Add(1)
	}
	n := d.n.Add(1)
	for i, q := range []int64{10, 50, 90} {
		if n == (d.target*q+99)/100 {
			d.marks[i].Store(at)
		}
	}
	if n >= d.target {
		d.once.Do(func() { close(d.done) })
	}
}

// secs renders ns as seconds rounded to 1 ms.
func secs(ns int64) float64 { return round3(time.Duration(ns).Seconds()) }

// RunBacklog runs one backlog scenario in a container of its own. A
// client (a provider of the scenario's mode that never fetches) enqueues
// Depth starts of StressOrchestration, EnqueueConcurrency at once, while
// no replica runs. Then Replicas replicas open (a provider and a runtime
// each, as in RunStress: the stress phase's workload and runtime
// options); the drain starts as they start (event-driven ones join
// first) and ends at the last final turn committed, or at MaxDrain. The
// heap is read before and after the enqueue (after a garbage
// collection) and during the drain (BacklogMemory); the scenario's
// figures need it to run alone in the process. It returns once every
// provider is closed; when ctx ends, the result holds what was measured
// and the error is ctx's.
func (e *Env) RunBacklog(ctx context.Context, s BacklogScenario) (res BacklogResult, err error) {
	w := s.Workload.withDefaults()
	res = BacklogResult{Mode: s.Mode, Depth: s.Depth, Replicas: w.Replicas, InjectedLatencyMS: ms(e.Latency()),
		TasksPerInstance: w.TasksPerInstance, ActivityDelayMS: ms(w.ActivityDelay)}
	if s.Depth <= 0 {
		return res, fmt.Errorf("bench: backlog depth %d is not positive", s.Depth)
	}
	var po *polling.Options
	if s.Mode == ModePolling {
		po = &polling.Options{PollInterval: w.PollInterval}
		res.PollIntervalMS = ms(w.PollInterval)
	}
	began := time.Now()
	container, drop, err := e.newContainer(ctx, fmt.Sprintf("backlog-%s-%d", s.Mode, s.Depth))
	if err != nil {
		return res, err
	}
	defer drop()
	top := &stressTopology{}
	defer func() {
		if serr := top.stop(ctx); err == nil {
			err = serr
		}
	}()
	cp, err := e.openProviderWith(ctx, container, clientMode(s.Mode), po)
	if err != nil {
		return res, err
	}
	top.providers = append(top.providers, cp)
	client := runtime.NewClient(cp)

	// The backlog, with no replica running.
	before := heapAfterGC()
	u0 := e.usage(container)
	t0 := time.Now()
	if err := enqueueBacklog(ctx, client, container, s.Depth, w); err != nil {
		return res, err
	}
	enq := time.Since(t0)
	u1 := e.usage(container)
	after := heapAfterGC()
	res.EnqueueS, res.EnqueuePerSec = roundS(enq), round2(float64(s.Depth)/enq.Seconds())
	res.EnqueueRUPerStart = round2((u1.RequestCharge - u0.RequestCharge) / float64(s.Depth))
	grew := float64(after.live) - float64(before.live)
	res.EmulatorMB, res.EmulatorBytesPerStart = round2(grew/mib), round2(grew/float64(s.Depth))
	res.EmulatorProfiledMB = round2((float64(after.emulator) - float64(before.emulator)) / mib)

	// The replicas.
	var replicas []*provider.Provider
	for range w.Replicas {
		p, err := e.openProviderWith(ctx, container, s.Mode, po)
		if err != nil {
			return res, err
		}
		top.providers = append(top.providers, p)
		replicas = append(replicas, p)
	}
	uOpen := e.usage(container)
	res.OpenRU = round2(uOpen.RequestCharge - u1.RequestCharge)
	e.scans.reset(container)
	d := newDrainTracker(s.Depth)
	mem := startHeapSampler(w.MemoryInterval)
	memStopped := false
	defer func() {
		if !memStopped {
			_, _ = mem.stop()
		}
	}()
	d.start = time.Now()
	// The join is part of the drain: MaxDrain bounds it, and a join cut
	// short by it ends the drain as any drain past its limit.
	var joined time.Duration // polling replicas have nothing to join
	joinCut := false
	if s.Mode == ModeEventDriven {
		err := joinAll(ctx, replicas, w.MaxDrainOf(s.Mode))
		joined = time.Since(d.start)
		joinCut = err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded)
		if err != nil && !joinCut {
			return res, err
		}
	}
	res.JoinS = round3(joined.Seconds())
	res.JoinRU = round2(e.usage(container).RequestCharge - uOpen.RequestCharge)
	reg := stressRegistry(w.ActivityDelay)
	for _, p := range replicas {
		if joinCut {
			break
		}
		c := &ackCounter{Provider: p, terminal: d.terminal}
		top.counters = append(top.counters, c)
		rt := runtime.New(c, reg, runtime.Options{OrchestrationConcurrency: w.OrchestrationConcurrency,
			WorkerConcurrency: w.WorkerConcurrency})
		if err := rt.Start(); err != nil {
			return res, fmt.Errorf("bench: starting a backlog replica: %w", err)
		}
		top.runtimes = append(top.runtimes, rt)
	}

	progress := func() {
		if s.Progress == nil {
			return
		}
		m := mem.current()
		var turns, acts int64
		for _, c := range top.counters {
			turns, acts = turns+c.turns.Load(), acts+c.activities.Load()
		}
		s.Progress(fmt.Sprintf("backlog %s %d at %v: %d done after %.0f s (%d turns, %d activities), heap in use at most %.0f MB (replicas' part %.0f MB)",
			s.Mode, s.Depth, e.Latency(), d.n.Load(), time.Since(d.start).Seconds(), turns, acts, m.HeapInusePeakMB, m.ReplicasPeakMB))
	}
	stopPeak := make(chan struct{})
	peak := pendingPeak(replicas, w.MemoryInterval, stopPeak)
	waitErr := error(errDrainTimeout)
	if !joinCut {
		waitErr = d.wait(ctx, w.MaxDrainOf(s.Mode), progress)
	}
	close(stopPeak)
	uEnd := e.usage(container)
	scans := e.scans.snapshot(container)
	res.Engine = engineCounts(replicas)
	if held := <-peak; res.Engine != nil {
		res.Engine.PendingPeak = held
	}
	res.Memory, res.Host = mem.stop()
	memStopped = true
	res.TimedOut = errors.Is(waitErr, errDrainTimeout)
	end := time.Duration(d.last.Load())
	if res.TimedOut || d.n.Load() == 0 {
		end = time.Since(d.start)
	}
	res.summarize(d, top.counters, uEnd.sub(uOpen), scans, end, joined)

	// What the store says, and the write floor, outside the window.
	if waitErr == nil || res.TimedOut {
		sm, err := client.GetSystemMetrics(ctx)
		if err != nil {
			return res, fmt.Errorf("bench: counting the backlog's completed instances: %w", err)
		}
		res.StoreCompleted, res.StoreFailed = int(sm.CompletedInstances), int(sm.FailedInstances)
	}
	done := completedSample(ctx, client, container, s.Depth)
	if err := top.stop(ctx); err != nil {
		return res, err
	}
	res.ElapsedS = round2(time.Since(began).Seconds())
	if res.WriteFloor, err = e.writeFloor(ctx, container, done); err != nil {
		return res, err
	}
	if res.WriteFloor.RU > 0 {
		res.FloorRatio = round2(res.RUPerOrch / res.WriteFloor.RU)
	}
	if waitErr != nil && !res.TimedOut {
		return res, waitErr
	}
	return res, ctx.Err()
}

// errDrainTimeout is wait's error when MaxDrain passed first.
var errDrainTimeout = errors.New("bench: the backlog was not drained within its time limit")

// backlogProgressEvery is how often a drain reports its progress.
const backlogProgressEvery = 30 * time.Second

// wait returns once every instance has completed (nil), maxDrain has
// passed since the start (errDrainTimeout; negative: no limit) or ctx has
// ended (its error), calling progress every backlogProgressEvery.
func (d *drainTracker) wait(ctx context.Context, maxDrain time.Duration, progress func()) error {
	var limit <-chan time.Time
	if maxDrain > 0 {
		t := time.NewTimer(maxDrain - time.Since(d.start))
		defer t.Stop()
		limit = t.C
	}
	tick := time.NewTicker(backlogProgressEvery)
	defer tick.Stop()
	for {
		select {
		case <-d.done:
			return nil
		case <-limit:
			return errDrainTimeout
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			progress()
		}
	}
}

// instanceName is the i-th instance of a backlog in container.
func instanceName(container string, i int) string { return fmt.Sprintf("%s-%06d", container, i) }

// enqueueBacklog starts depth instances of StressOrchestration through
// client, w.EnqueueConcurrency calls at once.
func enqueueBacklog(ctx context.Context, client *runtime.Client, container string, depth int, w BacklogConfig) error {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs = make([]error, w.EnqueueConcurrency)
	)
	input := stressInput{TaskCount: w.TasksPerInstance}
	for k := range w.EnqueueConcurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= depth || ctx.Err() != nil {
					return
				}
				inst := instanceName(container, i)
				if err := client.StartOrchestration(ctx, inst, StressOrchestration, input); err != nil {
					errs[k] = fmt.Errorf("bench: enqueueing the backlog's start of %s: %w", inst, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctx.Err()
}

// completedSample returns up to floorSample completed instances of the
// backlog, looking at no more than five times that many.
func completedSample(ctx context.Context, client *runtime.Client, container string, depth int) []string {
	var out []string
	for i := 0; i < depth && i < 5*floorSample && len(out) < floorSample; i++ {
		inst := instanceName(container, i)
		if st, err := client.GetStatus(ctx, inst); err == nil && st.State == runtime.StateCompleted {
			out = append(out, inst)
		}
	}
	return out
}

// roundS is d in seconds to the microsecond: a short enqueue or a drain
// cut at once still reads as the positive time it took.
func roundS(d time.Duration) float64 { return float64(d.Microseconds()) / 1e6 }

// summarize fills the drain's figures: d's counts, the replicas'
// counters, the window's usage u and query scans, the drain's length
// (from the replicas' start) and the join's.
func (r *BacklogResult) summarize(d *drainTracker, counters []*ackCounter, u Usage, scans map[string]QueryScan, drain, join time.Duration) {
	r.Failed = int(d.fail.Load())
	r.Completed = int(d.n.Load()) - r.Failed
	r.DrainS = roundS(drain)
	r.Drain = DrainShape{P10S: secs(d.marks[0].Load()), P50S: secs(d.marks[1].Load()), P90S: secs(d.marks[2].Load())}
	if drain > 0 {
		r.OrchPerSec = round2(float64(r.Completed) / drain.Seconds())
	}
	if dispatch := drain - join; dispatch > 0 {
		r.DispatchOrchPerSec = round2(float64(r.Completed) / dispatch.Seconds())
	}
	for _, c := range counters {
		rep := StressReplica{Turns: c.turns.Load(), Activities: c.activities.Load()}
		r.Turns += rep.Turns
		r.Activities += rep.Activities
		r.TurnAckErrors += c.turnErrs.Load()
		r.ActivityAckErrors += c.activityErrs.Load()
		r.PerReplica = append(r.PerReplica, rep)
	}
	for i := range r.PerReplica {
		p := &r.PerReplica[i]
		p.TurnShare, p.ActivityShare = share(p.Turns, r.Turns), share(p.Activities, r.Activities)
	}
	r.Requests, r.RequestCharge = u.Requests, round2(u.RequestCharge)
	r.Queries = scans
	total := sumScans(scans)
	r.MaxQueryExamined = total.MaxExamined
	for label, s := range scans {
		if s.MaxExamined == total.MaxExamined && (r.MaxQueryLabel == "" || label < r.MaxQueryLabel) {
			r.MaxQueryLabel = label
		}
	}
	if r.Completed > 0 {
		n := float64(r.Completed)
		r.TurnsPerOrch = round2(float64(r.Turns) / n)
		r.RequestsPerOrch = round2(float64(u.Requests) / n)
		r.RUPerOrch = round2(u.RequestCharge / n)
		r.ByOperation = perOrch(u, r.Completed)
		r.ExaminedPerOrch = round2(float64(total.Examined) / n)
	}
}
