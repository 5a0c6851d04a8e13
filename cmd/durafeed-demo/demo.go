package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/polling"
	"github.com/durafeed/durafeed/provider"
	"github.com/durafeed/durafeed/runtime"
	"github.com/durafeed/durafeed/store"
)

// config is the demo's configuration (see the flags in main.go).
type config struct {
	Orchestrations int
	Replicas       int
	// Azure runs against provider.ConfigFromEnv instead of an embedded
	// emulator; Partitions, Latency and Jitter then do not apply.
	Azure      bool
	Partitions int
	Latency    time.Duration
	Jitter     time.Duration

	FanOut          int
	TimerDelay      time.Duration
	ApprovalTimeout time.Duration
	// Rate paces the starts (orchestrations per second); 0 starts them all
	// at once.
	Rate    float64
	Timeout time.Duration

	OrchestrationConcurrency int
	WorkerConcurrency        int
	IdleBackoff              time.Duration
}

func (c config) validate() error {
	switch {
	case c.Orchestrations < 1:
		return errors.New("-n must be at least 1")
	case c.Replicas < 1:
		return errors.New("-replicas must be at least 1")
	case c.Partitions < 1:
		return errors.New("-partitions must be at least 1")
	case c.Latency < 0 || c.Jitter < 0:
		return errors.New("-latency and -jitter must not be negative")
	case c.FanOut < 1:
		return errors.New("-fanout must be at least 1")
	case c.Rate < 0:
		return errors.New("-rate must not be negative")
	case c.Timeout <= 0:
		return errors.New("-timeout must be positive")
	case c.OrchestrationConcurrency < 1 || c.WorkerConcurrency < 1:
		return errors.New("-orch-concurrency and -worker-concurrency must be at least 1")
	}
	return nil
}

// backend opens providers on one container: an embedded cosmosemu or Azure.
type backend struct {
	describe    string
	newProvider func(ctx context.Context, replica int) (*provider.Provider, error)
	// knobs is the embedded emulator's middleware (nil on Azure).
	knobs *knobs.Knobs
	close func() error
}

// openBackend starts the embedded emulator, or prepares the Azure
// configuration from the environment.
func openBackend(ctx context.Context, cfg config, log *zap.Logger) (*backend, error) {
	if cfg.Azure {
		base, err := provider.ConfigFromEnv()
		if err != nil {
			return nil, err
		}
		base.Polling = &polling.Options{OrchestrationDispatchers: cfg.OrchestrationConcurrency, WorkerDispatchers: cfg.WorkerConcurrency}
		auth := "account key"
		if base.Store.Key == "" {
			auth = "Entra ID (DefaultAzureCredential)"
		}
		return &backend{
			describe: fmt.Sprintf("Azure Cosmos DB %s, %s", base.Store.Endpoint, auth),
			newProvider: func(ctx context.Context, replica int) (*provider.Provider, error) {
				c := base
				c.Logger = log.Named("provider").With(zap.Int("replica", replica))
				return provider.New(ctx, c)
			},
			close: func() error { return nil },
		}, nil
	}

	k, err := knobs.New(knobs.Config{
		Latency: knobs.LatencyConfig{Default: knobs.LatencySpec{Base: cfg.Latency, Jitter: cfg.Jitter}},
		Charges: knobs.DefaultChargeModel(),
	})
	if err != nil {
		return nil, err
	}
	emu, err := cosmosemu.Start(ctx, cosmosemu.Options{
		PartitionCount: cfg.Partitions, Middleware: k.Middleware(), Logger: log.Named("cosmosemu"),
	})
	if err != nil {
		return nil, err
	}
	latency := "no injected latency"
	if cfg.Latency > 0 || cfg.Jitter > 0 {
		latency = fmt.Sprintf("injected latency %s (jitter %s)", cfg.Latency, cfg.Jitter)
	}
	return &backend{
		describe: fmt.Sprintf("embedded cosmosemu at %s, %d partitions, %s", emu.Endpoint(), cfg.Partitions, latency),
		newProvider: func(ctx context.Context, replica int) (*provider.Provider, error) {
			// Every replica has its own SDK client and connections.
			return provider.New(ctx, provider.Config{
				Store: store.Options{Endpoint: emu.Endpoint(), Key: emu.Key(), ClientOptions: emu.ClientOptions(),
					Database: "durafeed", Container: "demo"},
				Polling: &polling.Options{OrchestrationDispatchers: cfg.OrchestrationConcurrency, WorkerDispatchers: cfg.WorkerConcurrency},
				Logger:  log.Named("provider").With(zap.Int("replica", replica)),
			})
		},
		knobs: k,
		close: emu.Close,
	}, nil
}

// replica is one runtime with its own provider and client.
type replica struct {
	p      *provider.Provider
	rt     *runtime.Runtime
	client *runtime.Client
}

// shutdownTimeout bounds the graceful shutdown of each runtime.
const shutdownTimeout = 10 * time.Second

// run runs the demo: backend, replicas, workload, summary. It writes the
// progress and the summary to out and stops everything it started before
// returning. An error means the demo could not run; failed orchestrations
// are reported in the summary.
func run(ctx context.Context, cfg config, out io.Writer, tty bool, log *zap.Logger) (_ summary, err error) {
	if err := cfg.validate(); err != nil {
		return summary{}, err
	}
	be, err := openBackend(ctx, cfg, log)
	if err != nil {
		return summary{}, err
	}
	defer func() {
		if cerr := be.close(); cerr != nil && err == nil {
			err = fmt.Errorf("stop emulator: %w", cerr)
		}
	}()

	var replicas []replica
	defer func() {
		// Runtimes first (they finish in-flight turns), then providers.
		for i, r := range replicas {
			sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
			if serr := r.rt.Shutdown(sctx); serr != nil {
				log.Warn("runtime shutdown incomplete", zap.Int("replica", i+1), zap.Error(serr))
			}
			cancel()
		}
		for _, r := range replicas {
			if cerr := r.p.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("close provider: %w", cerr)
			}
		}
	}()
	for i := 0; i < cfg.Replicas; i++ {
		p, err := be.newProvider(ctx, i+1)
		if err != nil {
			return summary{}, fmt.Errorf("replica %d: %w", i+1, err)
		}
		reg := runtime.NewRegistry()
		registerWorkload(reg)
		rt := runtime.New(p, reg, runtime.Options{
			OrchestrationConcurrency: cfg.OrchestrationConcurrency,
			WorkerConcurrency:        cfg.WorkerConcurrency,
			IdleBackoff:              cfg.IdleBackoff,
			WorkerNodeID:             fmt.Sprintf("replica-%d", i+1),
			Logger:                   log.Named("runtime").With(zap.Int("replica", i+1)),
		})
		replicas = append(replicas, replica{p: p, rt: rt, client: runtime.NewClientWithOptions(p, runtime.ClientOptions{PollMax: 50 * time.Millisecond})})
		if err := rt.Start(); err != nil {
			replicas = replicas[:len(replicas)-1]
			_ = p.Close()
			return summary{}, fmt.Errorf("replica %d: %w", i+1, err)
		}
	}
	admin, ok := replicas[0].p.Admin()
	if !ok {
		return summary{}, errors.New("the provider has no management capability")
	}

	runID, err := newRunID()
	if err != nil {
		return summary{}, err
	}
	jobs := newJobs(runID, cfg.Orchestrations, workloadOptions{FanOut: cfg.FanOut, TimerDelay: cfg.TimerDelay, ApprovalTimeout: cfg.ApprovalTimeout})
	fmt.Fprintf(out, "durafeed demo: %d orchestrations (hello, fan-out of %d, timer of %s, external event, sub-orchestrations) on %d replicas\n",
		len(jobs), cfg.FanOut, cfg.TimerDelay, cfg.Replicas)
	fmt.Fprintf(out, "backend: %s; run %s\n", be.describe, runID)
	if be.knobs != nil {
		be.knobs.Counters().Reset() // count the workload, not the setup
	}

	workCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	clients := make([]*runtime.Client, len(replicas))
	for i, r := range replicas {
		clients[i] = r.client
	}
	d := &driver{jobs: jobs, clients: clients, admin: admin, rate: cfg.Rate, log: log}
	results, start := d.run(workCtx, out, tty)

	s := summarize(results, len(jobs), start)
	s.Backend, s.Replicas, s.Interrupted = be.describe, cfg.Replicas, ctx.Err() != nil
	if be.knobs != nil {
		snap := be.knobs.Counters().Snapshot()
		s.Embedded, s.Requests, s.RU = true, snap.Total.Requests, snap.Total.RequestCharge
	}
	s.print(out)
	return s, nil
}

func newRunID() (string, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "demo-" + hex.EncodeToString(b), nil
}

// driver starts the jobs, raises their events and tracks their outcome.
type driver struct {
	jobs    []job
	clients []*runtime.Client
	admin   durable.ProviderAdmin
	rate    float64
	log     *zap.Logger

	mu      sync.Mutex
	started map[string]time.Time
	results map[string]result
}

// trackInterval is how often the driver lists finished instances.
const trackInterval = 50 * time.Millisecond

// run drives the workload until every job finished or ctx ends; it returns
// the results and the time of the first start.
func (d *driver) run(ctx context.Context, out io.Writer, tty bool) (map[string]result, time.Time) {
	d.started = map[string]time.Time{}
	d.results = map[string]result{}
	start := time.Now()
	prog := newProgress(out, tty, len(d.jobs), start)

	// Helpers (the starter and the approvers) stop with helpCtx; they are
	// waited for before the results are handed out.
	helpCtx, stopHelpers := context.WithCancel(ctx)
	defer stopHelpers()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.startAll(helpCtx, &wg)
	}()

	byID := make(map[string]job, len(d.jobs))
	for _, j := range d.jobs {
		byID[j.ID] = j
	}
	tick := time.NewTicker(trackInterval)
	defer tick.Stop()
loop:
	for {
		d.poll(ctx, byID)
		done, failed := d.counts()
		prog.update(time.Now(), done, failed)
		if done == len(d.jobs) {
			break
		}
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
		}
	}
	prog.finish()
	stopHelpers()
	wg.Wait()
	return d.results, start
}

// startAll starts every job through the replicas' clients in turn, paced
// by rate, and starts an approver for each event job.
func (d *driver) startAll(ctx context.Context, wg *sync.WaitGroup) {
	var pace <-chan time.Time
	if d.rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / d.rate))
		defer t.Stop()
		pace = t.C
	}
	for i, j := range d.jobs {
		if pace != nil && i > 0 {
			select {
			case <-ctx.Done():
				return
			case <-pace:
			}
		}
		c := d.clients[i%len(d.clients)]
		at := time.Now()
		err := c.StartOrchestration(ctx, j.ID, j.Name, j.Input)
		d.mu.Lock()
		if err != nil {
			if ctx.Err() != nil {
				d.mu.Unlock()
				return
			}
			d.results[j.ID] = result{Kind: j.Kind, Detail: "start failed: " + err.Error()}
		} else {
			d.started[j.ID] = at
		}
		d.mu.Unlock()
		if err == nil && j.Kind == kindEvent {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d.approve(ctx, c, j.ID)
			}()
		}
	}
}

// approve waits until the approval orchestration listens for its event
// (it says so in its custom status, committed with the subscription) and
// raises the event, as a human approver would.
func (d *driver) approve(ctx context.Context, c *runtime.Client, id string) {
	var seen uint64
	for {
		cs, err := c.WaitForCustomStatus(ctx, id, seen)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("reading custom status failed", zap.String("instance", id), zap.Error(err))
			}
			return
		}
		seen = cs.Version
		if cs.Status != nil && *cs.Status == awaitingApproval {
			break
		}
	}
	for attempt := 0; ; attempt++ {
		err := c.RaiseEvent(ctx, id, approvalEvent, approval{By: "durafeed-demo"})
		if err == nil || ctx.Err() != nil {
			return
		}
		if !durable.IsRetryable(err) || attempt >= 5 {
			d.log.Warn("raising the approval failed", zap.String("instance", id), zap.Error(err))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// poll records the jobs that reached a terminal status since the last poll.
func (d *driver) poll(ctx context.Context, byID map[string]job) {
	var finished []string
	for _, status := range []durable.Status{durable.StatusCompleted, durable.StatusFailed} {
		ids, err := d.admin.ListInstancesByStatus(ctx, status)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("listing instances failed", zap.Error(err))
			}
			return
		}
		finished = append(finished, ids...)
	}
	for _, id := range finished {
		d.mu.Lock()
		at, started := d.started[id]
		_, known := d.results[id]
		d.mu.Unlock()
		if !started || known {
			continue // a child instance, a job not yet recorded as started, or done
		}
		r, err := d.outcome(ctx, byID[id], at)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("reading an outcome failed", zap.String("instance", id), zap.Error(err))
			}
			continue // next poll
		}
		d.mu.Lock()
		d.results[id] = r
		d.mu.Unlock()
	}
}

// outcome reads a finished job's status, output and completion time.
func (d *driver) outcome(ctx context.Context, j job, startedAt time.Time) (result, error) {
	info, err := d.admin.GetInstanceInfo(ctx, j.ID)
	if err != nil {
		return result{}, err
	}
	ex, err := d.admin.GetExecutionInfo(ctx, j.ID, info.CurrentExecutionID)
	if err != nil {
		return result{}, err
	}
	at := ex.CompletedAt
	if at.IsZero() {
		at = info.UpdatedAt
	}
	output := ""
	if info.Output != nil {
		output = *info.Output
	}
	r := result{Kind: j.Kind, CompletedAt: at, Latency: max(at.Sub(startedAt), 0)}
	switch {
	case info.Status != durable.StatusCompleted:
		r.Detail = fmt.Sprintf("%s: %s", info.Status, output)
	case output != j.Expect:
		r.Detail = fmt.Sprintf("completed with %s, want %s", output, j.Expect)
	default:
		r.OK = true
	}
	return r, nil
}

// counts returns how many jobs finished, and how many of them failed.
func (d *driver) counts() (done, failed int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range d.results {
		if !r.OK {
			failed++
		}
	}
	return len(d.results), failed
}
