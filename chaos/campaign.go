package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/internal/account"
	"github.com/durafeed/durafeed/internal/clock"
	"github.com/durafeed/durafeed/polling"
	"github.com/durafeed/durafeed/provider"
	"github.com/durafeed/durafeed/runtime"
	"github.com/durafeed/durafeed/store"
)

// FaultRates are the probabilities, per request to the campaign's
// database, of each injected fault. Each is the share of all requests
// that get that fault (the campaign compensates for the knobs trying
// rules in order).
type FaultRates struct {
	// Throttle answers 429 with x-ms-retry-after-ms ThrottleRetryAfter.
	Throttle           float64
	ThrottleRetryAfter time.Duration
	// Unavailable answers 503 before the request runs.
	Unavailable float64
	// Drop closes the connection without an answer: half before the
	// request runs, half after it ran (a write that committed unseen).
	Drop float64
	// TimeoutAfter runs the request, then answers 408 (a lost answer).
	TimeoutAfter float64
	// Gone answers 410 with sub-status 1002 (partition key range gone).
	Gone float64
}

// DefaultFaultRates are the rates: 429 5% (retry after 10 ms),
// 503 1%, dropped connections 1% (half after the write committed), 408
// after the handler 0.3%, 410 0.2%.
func DefaultFaultRates() FaultRates {
	return FaultRates{Throttle: 0.05, ThrottleRetryAfter: 10 * time.Millisecond, Unavailable: 0.01,
		Drop: 0.01, TimeoutAfter: 0.003, Gone: 0.002}
}

func (f FaultRates) validate() error {
	total := 0.0
	for _, p := range []float64{f.Throttle, f.Unavailable, f.Drop, f.TimeoutAfter, f.Gone} {
		if p < 0 || p > 1 {
			return fmt.Errorf("chaos: fault rate %v outside [0, 1]", p)
		}
		total += p
	}
	if total >= 1 {
		return fmt.Errorf("chaos: fault rates sum to %v, at least 1", total)
	}
	if f.ThrottleRetryAfter < 0 {
		return errors.New("chaos: negative ThrottleRetryAfter")
	}
	return nil
}

// ruleThrottle is the id of the 429 rule.
const ruleThrottle = "throttle-429"

// rules turns the rates into knobs rules, in order, each probability
// divided by what the earlier rules leave so that its share of all
// requests is its rate.
func (f FaultRates) rules(database string) []knobs.FaultRule {
	type r struct {
		p    float64
		rule knobs.FaultRule
	}
	specs := []r{
		{f.Throttle, knobs.FaultRule{ID: ruleThrottle, Kind: knobs.FaultThrottle, RetryAfter: f.ThrottleRetryAfter}},
		{f.Unavailable, knobs.FaultRule{ID: "unavailable-503", Kind: knobs.FaultUnavailable}},
		{f.Drop / 2, knobs.FaultRule{ID: "drop-before", Kind: knobs.FaultDrop}},
		{f.Drop / 2, knobs.FaultRule{ID: "drop-after", Kind: knobs.FaultDrop, AfterHandler: true}},
		{f.TimeoutAfter, knobs.FaultRule{ID: "timeout-408-after", Kind: knobs.FaultTimeout, AfterHandler: true}},
		{f.Gone, knobs.FaultRule{ID: "gone-410", Kind: knobs.FaultGone}},
	}
	var out []knobs.FaultRule
	left := 1.0
	for _, s := range specs {
		if s.p <= 0 {
			continue
		}
		s.rule.Database = database
		s.rule.Probability = min(s.p/left, 1)
		left -= s.p
		out = append(out, s.rule)
	}
	return out
}

// Campaign configures one chaos run: an embedded cosmosemu with latency
// and faults, Replicas runtime replicas (each with its own provider and
// SDK client, as separate processes), a client with its own provider, a
// mixed workload of Orchestrations root orchestrations, partition splits
// and the kill of one replica (and a replacement joining) while it runs,
// then the history checker (Check) over everything read back. Zero fields
// take the documented defaults.
//
// With Account set the campaign runs on that account (or an emulator over
// its endpoint) instead: the latency and the faults are injected client
// side, in every SDK client's pipeline (see the package documentation),
// the partition splits are skipped, and MaxRU caps what it may spend.
type Campaign struct {
	// Mode is the providers' dispatch mode (default event-driven).
	Mode provider.Mode
	// Account, when set, runs the campaign on that account: it is opened
	// (account.Open; Prefix "durafeed-chaos" unless set), the campaign's
	// container is created in the run's throwaway database, every
	// replica's and the client's provider is a client of its own of it
	// (Account.StoreOptions), and the database is deleted at the end
	// unless Options.Keep. The campaign adds its client-side fault policy
	// to Options.PerRetryPolicies (the caller's copy is not changed).
	// Nil: the embedded emulator.
	Account *account.Options
	// MaxRU caps the request charge of a campaign on an account (0: none;
	// ignored on the embedded emulator). A campaign whose estimate
	// (EstimateRU) is above it is refused before anything is created; one
	// whose clients spend past it is stopped. Either way Run returns an
	// error wrapping account.ErrOverCap.
	MaxRU float64
	// Orchestrations is the number of root orchestrations (default 1000).
	Orchestrations int
	// Replicas is the number of runtime replicas at the start (default 3).
	Replicas int
	// Partitions is the emulator's physical partitions (default 4;
	// ignored on an account, whose partitions are the service's).
	Partitions int
	// Latency is the latency the emulator adds to every request
	// (default 2 ms; negative: none); on an account every client waits it
	// before each attempt, on top of the network's.
	Latency time.Duration
	// Faults are the fault rates for the whole run (nil: the defaults,
	// DefaultFaultRates; a zero FaultRates injects none).
	Faults *FaultRates
	// Seed seeds the fault and latency draws (default 1); equal seeds give
	// equal draw sequences (not equal runs: scheduling differs).
	Seed uint64
	// Rate paces the client's starts, in roots per second (default 5;
	// negative: as fast as StartConcurrency allows), so that the splits
	// and the kill, which follow the starts, fall in the middle of the
	// work.
	Rate float64
	// Splits is the number of partition splits during the run (default 1;
	// negative: none), the first once SplitAt of the roots were started
	// (default 0.2), further ones 0.2 apart. A real account cannot be told
	// to split a partition: on an account there are none (the campaign
	// says so in its events).
	Splits  int
	SplitAt float64
	// KillAt is the share of started roots at which a replica is killed
	// and a replacement joins (default 0.4; negative: no kill).
	KillAt float64

	// FanOut is the width of a fan-out job (default 6); TimerDelay the
	// durable timer of a timer job (default 500 ms); MailboxItems the
	// persistent events, and executions, of a mailbox job (default 3).
	FanOut       int
	TimerDelay   time.Duration
	MailboxItems int

	// LockTimeout is the runtimes' orchestration and work-item lock
	// timeout (default 5 s).
	LockTimeout time.Duration
	// OrchestrationConcurrency and WorkerConcurrency are each runtime's
	// dispatchers (default 4 each); IdleBackoff their pause after an
	// empty fetch (default: the seeds' 1 s in polling mode, the
	// runtime's 100 ms in event-driven mode, whose fetch already waits
	// up to its poll timeout).
	OrchestrationConcurrency int
	WorkerConcurrency        int
	IdleBackoff              time.Duration
	// StartConcurrency is how many client starts run at once (default 8).
	StartConcurrency int

	// Timeout bounds the workload, from the first start until every root
	// finished (default 20 min): a hang catcher, not a speed target.
	// SettleTimeout bounds the wait for empty queues and no running
	// instance afterwards (default 2 min).
	Timeout       time.Duration
	SettleTimeout time.Duration

	// Progress receives one line per campaign event (split, kill, join)
	// and a progress line every ProgressInterval (default 5 s); nil: none.
	Progress         io.Writer
	ProgressInterval time.Duration
	// Logger receives the campaign's and every component's logs (default
	// none).
	Logger *zap.Logger
}

// Defaults of Campaign.
const (
	DefaultOrchestrations = 1000
	DefaultReplicas       = 3
	DefaultPartitions     = 4
	DefaultLatency        = 2 * time.Millisecond
	DefaultSeed           = 1
	DefaultRate           = 5
	DefaultSplits         = 1
	DefaultSplitAt        = 0.2
	DefaultKillAt         = 0.4
	DefaultFanOut         = 6
	DefaultTimerDelay     = 500 * time.Millisecond
	DefaultMailboxItems   = 3
	DefaultLockTimeout    = 5 * time.Second
	DefaultConcurrency    = 4
	DefaultIdleBackoff    = 100 * time.Millisecond
	DefaultPollingBackoff = time.Second
	DefaultStarts         = 8
	DefaultTimeout        = 20 * time.Minute
	DefaultSettleTimeout  = 2 * time.Minute
	DefaultProgress       = 5 * time.Second
)

const (
	database  = "durafeed"
	container = "chaos"
	// clientReplica is the replica number of the client's provider in
	// logs and records; runtime replicas are numbered from 1.
	clientReplica = 0
	// clientPollMax bounds the client's custom-status polling interval.
	clientPollMax = time.Second
	// maxCallAttempts bounds the client's retries of one call.
	maxCallAttempts = 20
	// shutdownTimeout bounds a graceful runtime shutdown at the end.
	shutdownTimeout = 10 * time.Second
)

func (c Campaign) withDefaults() Campaign {
	defInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	defInt(&c.Orchestrations, DefaultOrchestrations)
	defInt(&c.Replicas, DefaultReplicas)
	defInt(&c.Partitions, DefaultPartitions)
	defDur(&c.Latency, DefaultLatency)
	if c.Latency < 0 {
		c.Latency = 0
	}
	if c.Faults == nil {
		f := DefaultFaultRates()
		c.Faults = &f
	}
	if c.Seed == 0 {
		c.Seed = DefaultSeed
	}
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	defInt(&c.Splits, DefaultSplits)
	c.Splits = max(c.Splits, 0)
	if c.SplitAt == 0 {
		c.SplitAt = DefaultSplitAt
	}
	if c.KillAt == 0 {
		c.KillAt = DefaultKillAt
	}
	defInt(&c.FanOut, DefaultFanOut)
	defDur(&c.TimerDelay, DefaultTimerDelay)
	defInt(&c.MailboxItems, DefaultMailboxItems)
	defDur(&c.LockTimeout, DefaultLockTimeout)
	defInt(&c.OrchestrationConcurrency, DefaultConcurrency)
	defInt(&c.WorkerConcurrency, DefaultConcurrency)
	if c.Mode == provider.ModePolling {
		defDur(&c.IdleBackoff, DefaultPollingBackoff)
	}
	defDur(&c.IdleBackoff, DefaultIdleBackoff)
	defInt(&c.StartConcurrency, DefaultStarts)
	defDur(&c.Timeout, DefaultTimeout)
	defDur(&c.SettleTimeout, DefaultSettleTimeout)
	defDur(&c.ProgressInterval, DefaultProgress)
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

func (c Campaign) validate() error {
	switch {
	case c.Mode != provider.ModeEventDriven && c.Mode != provider.ModePolling:
		return fmt.Errorf("chaos: unknown mode %v", c.Mode)
	case c.Orchestrations < 1:
		return errors.New("chaos: Orchestrations must be at least 1")
	case c.Replicas < 1:
		return errors.New("chaos: Replicas must be at least 1")
	case c.Partitions < 1:
		return errors.New("chaos: Partitions must be at least 1")
	case c.SplitAt < 0 || c.SplitAt >= 1 || c.KillAt >= 1:
		return errors.New("chaos: SplitAt must be in [0, 1) and KillAt below 1")
	case c.FanOut < 1 || c.MailboxItems < 1:
		return errors.New("chaos: FanOut and MailboxItems must be at least 1")
	case c.TimerDelay < 0 || c.LockTimeout < 0 || c.IdleBackoff < 0 || c.Timeout < 0 || c.SettleTimeout < 0:
		return errors.New("chaos: durations must not be negative")
	case c.OrchestrationConcurrency < 1 || c.WorkerConcurrency < 1 || c.StartConcurrency < 1:
		return errors.New("chaos: concurrencies must be at least 1")
	case c.MaxRU < 0:
		return errors.New("chaos: MaxRU must not be negative")
	}
	return c.Faults.validate()
}

// Result is what a campaign observed and the checker's verdict.
type Result struct {
	// Campaign is the configuration that ran, defaults applied.
	Campaign Campaign
	// Report is the history checker's verdict.
	Report Report
	// Faults counts injected faults; FaultsByRule per rule id (the ids of
	// FaultRates' rules, server side and client side alike).
	Faults       int64
	FaultsByRule map[string]int64
	// Requests counts the requests while the faults were on: the
	// emulator's, or on an account every client attempt the client-side
	// injector saw.
	Requests int64
	// Account describes the account the campaign ran on (nil: the
	// embedded emulator; the faults were then injected server side).
	Account *account.Info
	// EstimateRU is the estimate checked against MaxRU (EstimateRU; on an
	// account only).
	EstimateRU float64
	// Spent is what the campaign's clients were charged on the account,
	// from the answers' headers (account.Meter), setup and read-back
	// included: every attempt the clients saw, the injected answers
	// included (an injected 429 counts in Throttled, with no charge; an
	// injected 408 with the charge of the answer it replaced). Zero on the
	// embedded emulator.
	Spent account.Usage
	// UnseenRU is the charge of the answers the injected drop-after faults
	// discarded: spent on the account but seen by no client, so not in
	// Spent (nor counted against MaxRU).
	UnseenRU float64
	// Splits counts partition splits done; Killed replicas killed; Joined
	// replacement replicas that joined.
	Splits, Killed, Joined int
	// Events lists the campaign's events (splits, kill, join) with times.
	Events []string
	// LockStalls are the stalls attributed to lost answers; KillStalls
	// those attributed to the killed replica.
	LockStalls, KillStalls []LockStall
	// ReadBacks are the provider's lost-answer log lines.
	ReadBacks []ReadBack
	// Calls are the client calls that needed more than one attempt or
	// failed, with their errors.
	Calls []CallRecord
	// Latencies are the roots' times from the first start attempt to
	// completion (of the last execution), sorted.
	Latencies []time.Duration
	// KindLatencies are the latencies by workload kind, sorted.
	KindLatencies map[string][]time.Duration
	// Elapsed is the workload's duration, first start to last root done.
	Elapsed time.Duration
}

// OK reports whether every correctness check passed.
func (r *Result) OK() bool { return r.Report.OK() }

// CallRecord is one client call (a start, a raise, an enqueue) with every
// attempt's error.
type CallRecord struct {
	// Instance is the target; What the call ("start", "raise-e1",
	// "enqueue-q1", ...).
	Instance string
	What     string
	// Attempts counts the calls made; Errors holds each failed attempt's
	// error; OK whether an attempt succeeded.
	Attempts int
	Errors   []string
	OK       bool
}

// String formats the call on one line.
func (c CallRecord) String() string {
	return fmt.Sprintf("%s %s: %d attempts, ok=%t, errors: %v", c.What, c.Instance, c.Attempts, c.OK, c.Errors)
}

// replica is one runtime with its own provider, SDK client and network.
type replica struct {
	n   int
	net *killableTransport
	p   *provider.Provider
	rt  *runtime.Runtime
}

// run is one campaign in progress.
type run struct {
	c   Campaign
	log *zap.Logger
	// emu is the embedded emulator (nil on an account); acct the account
	// and cf its client-side fault injector (nil on the emulator); faults
	// is whichever injects the faults; database the campaign's database.
	emu      *cosmosemu.Server
	acct     *account.Account
	cf       *clientFaults
	faults   faultInjector
	database string
	obs      *observer
	ex       *executions
	jobs     []job
	client   *runtime.Client
	admin    durable.ProviderAdmin
	started  time.Time

	mu        sync.Mutex
	replicas  []*replica
	nextN     int
	startedAt map[string]time.Time
	calls     []CallRecord
	events    []string
	splits    int
	killed    int
	joined    int
	begun     atomic.Int64 // roots started
	finished  atomic.Int64 // roots finished

	// bg owns the goroutines a kill leaves behind (the killed runtime's
	// stop); they are waited for before Run returns.
	bg sync.WaitGroup
}

// Run runs the campaign and checks it. The error reports a campaign that
// could not run (the emulator, the account or a provider did not start)
// or, wrapping account.ErrOverCap, one on an account whose estimate is
// above MaxRU (nothing was created) or whose clients spent past it (it was
// stopped and cleaned up); correctness failures are in the Result
// (Result.OK). Everything Run starts is stopped, and an account's
// throwaway database deleted (unless kept), before it returns.
func (c Campaign) Run(ctx context.Context) (out *Result, err error) {
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	r := &run{c: c, log: c.Logger.Named("chaos"), obs: newObserver(), ex: newExecutions(),
		startedAt: map[string]time.Time{}, nextN: 1}
	// The campaign's own context: the RU cap cancels it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if c.Account != nil {
		estimate := c.EstimateRU()
		if err := account.CheckEstimate(estimate, c.MaxRU); err != nil {
			return nil, fmt.Errorf("chaos: %w", err)
		}
		if err := r.openAccount(ctx, cancel); err != nil {
			return nil, err
		}
		defer func() {
			// The faults are off before the database is deleted (its
			// deletion addresses the database).
			r.cf.stop()
			if cerr := r.acct.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("chaos: %w", cerr)
			}
			if r.acct.Meter().Exceeded() {
				out, err = nil, fmt.Errorf("chaos: the campaign's clients spent %.0f RU, past the cap of %.0f RU, and were stopped: %w",
					r.acct.Meter().Total().RequestCharge, c.MaxRU, account.ErrOverCap)
			}
		}()
		r.note("%s", r.acct.Info())
		r.note("estimated at %.0f RU (cap %s)", estimate, capString(c.MaxRU))
		r.note("latency and faults injected client side, in every SDK client's pipeline: the service cannot be told to fail")
		if c.Splits > 0 {
			r.note("skipped %d partition split(s): the service cannot be told to split a partition", c.Splits)
		}
	} else {
		if err := r.startEmulator(ctx); err != nil {
			return nil, err
		}
		defer func() {
			if cerr := r.emu.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}()
	}

	// The client: a provider of its own (its process never dies).
	cp, _, err := r.newProvider(ctx, clientReplica)
	if err != nil {
		return nil, fmt.Errorf("chaos: client provider: %w", err)
	}
	defer func() { _ = cp.Close() }()
	r.client = runtime.NewClientWithOptions(&observedProvider{Provider: cp, obs: r.obs, replica: clientReplica},
		runtime.ClientOptions{PollMax: clientPollMax})
	r.admin, _ = cp.Admin()

	defer r.stopReplicas()
	for range c.Replicas {
		if _, err := r.addReplica(ctx); err != nil {
			return nil, err
		}
	}
	// Counted from here: the faults start with the runtimes.
	if err := r.faults.start(r.database); err != nil {
		return nil, err
	}
	for _, rp := range r.snapshotReplicas() {
		if err := rp.rt.Start(); err != nil {
			return nil, err
		}
	}

	r.jobs = newJobs("chaos", c.Orchestrations, workloadShape{fanOut: c.FanOut, timerDelay: c.TimerDelay, mailboxItems: c.MailboxItems})
	partitions := fmt.Sprintf("%d partitions", c.Partitions)
	if r.acct != nil {
		partitions = "the account's partitions"
	}
	r.note("%d root orchestrations (%s), %d replicas, mode %s, %s, latency %s, seed %d",
		len(r.jobs), kindList(), c.Replicas, c.Mode, partitions, c.Latency, c.Seed)
	r.drive(ctx)
	r.settle(ctx)
	// The replicas stop (still under faults) before anything is read: the
	// verdict is on a state that no longer changes, and what a replica
	// did not finish counts as stuck.
	r.stopReplicas()
	stopped := time.Now()

	// The verdict is read without faults: the checker is not under test.
	res := &Result{Campaign: c, FaultsByRule: r.faults.firedByRule(), Faults: r.faults.fired(), Requests: r.faults.requests()}
	r.faults.stop()
	// Locks left when the replicas stopped (an abandon that failed) have
	// expired before the queues are counted, so their messages count.
	if !clock.Sleep(ctx, time.Until(stopped.Add(c.LockTimeout+time.Second))) {
		return nil, ctx.Err()
	}
	ev, err := r.evidence(ctx)
	if err != nil {
		return nil, fmt.Errorf("chaos: read back: %w", err)
	}
	res.Report = Check(ev)
	if r.acct != nil {
		info := r.acct.Info()
		res.Account, res.EstimateRU = &info, c.EstimateRU()
		res.Spent, res.UnseenRU = r.acct.Meter().Total(), r.cf.unseenRU()
		r.note("spent %.1f RU in %d requests (%d answered 429, %d of them injected); %.1f RU more in answers the injected drops discarded",
			res.Spent.RequestCharge, res.Spent.Requests, res.Spent.Throttled, res.FaultsByRule[ruleThrottle], res.UnseenRU)
	}

	_, stalls, readBacks := r.obs.results()
	for _, s := range stalls {
		if s.Kill {
			res.KillStalls = append(res.KillStalls, s)
		} else {
			res.LockStalls = append(res.LockStalls, s)
		}
	}
	res.ReadBacks = readBacks
	r.mu.Lock()
	res.Splits, res.Killed, res.Joined = r.splits, r.killed, r.joined
	res.Events = append(res.Events, r.events...)
	for _, cr := range r.calls {
		if cr.Attempts > 1 || !cr.OK {
			res.Calls = append(res.Calls, cr)
		}
	}
	completed := map[string]time.Time{}
	for _, in := range ev.Instances {
		if !in.CompletedAt.IsZero() {
			completed[in.Instance] = in.CompletedAt
		}
	}
	res.KindLatencies = map[string][]time.Duration{}
	last := r.started
	for _, j := range r.jobs {
		at, done := completed[j.Instance]
		s, started := r.startedAt[j.Instance]
		if done && started {
			res.Latencies = append(res.Latencies, max(at.Sub(s), 0))
			res.KindLatencies[j.Kind] = append(res.KindLatencies[j.Kind], max(at.Sub(s), 0))
			if at.After(last) {
				last = at
			}
		}
	}
	res.Elapsed = last.Sub(r.started)
	r.mu.Unlock()
	sortDurations(res.Latencies)
	for _, l := range res.KindLatencies {
		sortDurations(l)
	}
	return res, nil
}

// capString formats an RU cap ("none" for zero).
func capString(ru float64) string {
	if ru <= 0 {
		return "none"
	}
	return fmt.Sprintf("%.0f RU", ru)
}

// startEmulator starts the embedded emulator with the latency, the charge
// model and (from start on) the faults in its knobs.
func (r *run) startEmulator(ctx context.Context) error {
	c := r.c
	k, err := knobs.New(knobs.Config{
		Latency:   knobs.LatencyConfig{Default: knobs.LatencySpec{Base: c.Latency}, Seed: c.Seed},
		FaultSeed: c.Seed,
		Charges:   knobs.DefaultChargeModel(),
	})
	if err != nil {
		return err
	}
	r.emu, err = cosmosemu.Start(ctx, cosmosemu.Options{PartitionCount: c.Partitions, Middleware: k.Middleware(),
		Logger: c.Logger.Named("cosmosemu")})
	if err != nil {
		return err
	}
	r.faults, r.database = serverFaults{k: k, rates: *c.Faults}, database
	return nil
}

// openAccount opens the account with the client-side fault injector in
// every client, caps the meter (cancel stops the campaign) and creates the
// campaign's container. A failure after the database was created deletes
// it.
func (r *run) openAccount(ctx context.Context, cancel context.CancelFunc) error {
	c := r.c
	r.cf = newClientFaults(*c.Faults, c.Seed, c.Latency)
	o := *c.Account
	if o.Prefix == "" {
		o.Prefix = "durafeed-chaos"
	}
	o.PerRetryPolicies = append(append([]policy.Policy{}, o.PerRetryPolicies...), r.cf)
	acct, err := account.Open(ctx, o)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	if c.MaxRU > 0 {
		acct.Meter().SetCap(c.MaxRU, cancel)
	}
	if err := acct.CreateContainer(ctx, container); err != nil {
		_ = acct.Close()
		if acct.Meter().Exceeded() {
			return fmt.Errorf("chaos: the campaign's clients spent %.0f RU while it was set up, past the cap of %.0f RU: %w",
				acct.Meter().Total().RequestCharge, c.MaxRU, account.ErrOverCap)
		}
		return fmt.Errorf("chaos: %w", err)
	}
	r.acct, r.faults, r.database = acct, r.cf, acct.Database()
	return nil
}

func kindList() string {
	b := ""
	for i, k := range Kinds() {
		if i > 0 {
			b += ", "
		}
		b += k
	}
	return b
}

// note records a campaign event and writes it to Progress.
func (r *run) note(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	at := time.Duration(0)
	if !r.started.IsZero() {
		at = time.Since(r.started).Round(10 * time.Millisecond)
	}
	r.mu.Lock()
	r.events = append(r.events, fmt.Sprintf("+%v %s", at, line))
	r.mu.Unlock()
	r.log.Info(line)
	if r.c.Progress != nil {
		fmt.Fprintf(r.c.Progress, "chaos[%s] +%v %s\n", r.c.Mode, at, line)
	}
}

// newProvider opens a provider on the campaign's container with its own
// SDK client and network, which it returns too: on an account a client of
// its own (Account.StoreOptions: metered, with the client-side faults).
func (r *run) newProvider(ctx context.Context, n int) (*provider.Provider, *killableTransport, error) {
	var so store.Options
	if r.acct != nil {
		so = r.acct.StoreOptions(container)
	} else {
		so = store.Options{Endpoint: r.emu.Endpoint(), Key: r.emu.Key(), ClientOptions: r.emu.ClientOptions(),
			Database: database, Container: container}
	}
	net := &killableTransport{inner: so.ClientOptions.Transport}
	so.ClientOptions.Transport = net
	p, err := provider.New(ctx, provider.Config{
		Store:   so,
		Mode:    r.c.Mode,
		Polling: &polling.Options{OrchestrationDispatchers: r.c.OrchestrationConcurrency, WorkerDispatchers: r.c.WorkerConcurrency},
		Logger:  r.obs.providerLogger(r.c.Logger, n),
	})
	return p, net, err
}

// addReplica opens a replica (not started).
func (r *run) addReplica(ctx context.Context) (*replica, error) {
	r.mu.Lock()
	n := r.nextN
	r.nextN++
	r.mu.Unlock()
	p, net, err := r.newProvider(ctx, n)
	if err != nil {
		return nil, fmt.Errorf("chaos: replica %d: %w", n, err)
	}
	reg := runtime.NewRegistry()
	register(reg, r.ex)
	rt := runtime.New(&observedProvider{Provider: p, obs: r.obs, replica: n}, reg, runtime.Options{
		OrchestrationConcurrency: r.c.OrchestrationConcurrency,
		WorkerConcurrency:        r.c.WorkerConcurrency,
		OrchestratorLockTimeout:  r.c.LockTimeout,
		WorkerLockTimeout:        r.c.LockTimeout,
		IdleBackoff:              r.c.IdleBackoff,
		WorkerNodeID:             fmt.Sprintf("replica-%d", n),
		Logger:                   r.c.Logger.Named("runtime").With(zap.Int("node", n)),
	})
	rp := &replica{n: n, net: net, p: p, rt: rt}
	r.mu.Lock()
	r.replicas = append(r.replicas, rp)
	r.mu.Unlock()
	return rp, nil
}

func (r *run) snapshotReplicas() []*replica {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*replica(nil), r.replicas...)
}

// stopReplicas stops the live replicas gracefully and waits for the
// killed ones' stops; a second call has nothing left to stop.
func (r *run) stopReplicas() {
	r.mu.Lock()
	live := r.replicas
	r.replicas = nil
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, rp := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
			defer cancel()
			if err := rp.rt.Shutdown(ctx); err != nil && !errors.Is(err, runtime.ErrNotRunning) {
				r.log.Warn("runtime shutdown incomplete", zap.Int("node", rp.n), zap.Error(err))
			}
			_ = rp.p.Close()
		}()
	}
	wg.Wait()
	r.bg.Wait()
}

// kill stops replica rp as a killed process: its network is cut first
// (nothing it does afterwards reaches Cosmos DB, and answers in flight are
// lost), its provider crashes (no lease released, no hint removed) and
// its runtime is stopped with an expired context (in-flight work is
// cancelled; its acks and abandons fail on the cut network, so every
// lock it held expires or is freed by a take-over). The runtime's stop is
// waited for at the end.
func (r *run) kill(rp *replica) {
	inflight := rp.net.kill()
	r.obs.killedWith(inflight)
	r.mu.Lock()
	for i, x := range r.replicas {
		if x == rp {
			r.replicas = append(r.replicas[:i], r.replicas[i+1:]...)
			break
		}
	}
	r.killed++
	r.mu.Unlock()
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = rp.rt.Shutdown(ctx)
	}()
	rp.p.Crash()
	r.note("killed replica %d with %d roots started, %d finished; write requests in flight lost their answers: %d %q",
		rp.n, r.begun.Load(), r.finished.Load(), len(inflight), inflight)
}

// drive runs the workload until every root finished or Timeout.
func (r *run) drive(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.c.Timeout)
	defer cancel()
	r.started = time.Now()

	var helpers sync.WaitGroup
	jobsCh := make(chan job)
	for range r.c.StartConcurrency {
		helpers.Add(1)
		go func() {
			defer helpers.Done()
			for j := range jobsCh {
				r.start(ctx, j, &helpers)
			}
		}()
	}
	helpers.Add(1)
	go func() {
		defer helpers.Done()
		defer close(jobsCh)
		var pace <-chan time.Time
		if r.c.Rate > 0 {
			t := time.NewTicker(time.Duration(float64(time.Second) / r.c.Rate))
			defer t.Stop()
			pace = t.C
		}
		for i, j := range r.jobs {
			if pace != nil && i > 0 {
				select {
				case <-pace:
				case <-ctx.Done():
					return
				}
			}
			select {
			case jobsCh <- j:
			case <-ctx.Done():
				return
			}
		}
	}()
	directed := make(chan struct{})
	helpers.Add(1)
	go func() {
		defer helpers.Done()
		defer close(directed)
		r.direct(ctx)
	}()

	r.track(ctx)
	// The splits and the kill are part of the campaign, even when the
	// roots finished before direct saw its thresholds (a starved
	// goroutine on a loaded machine): every root has begun, so its
	// schedule ends at its next tick.
	select {
	case <-directed:
	case <-ctx.Done():
	}
	cancel()
	helpers.Wait()
}

// start starts one job and, for event and mailbox jobs, starts its
// responder (owned by helpers).
func (r *run) start(ctx context.Context, j job, helpers *sync.WaitGroup) {
	at := time.Now()
	if !r.call(ctx, j.Instance, "start", func(ctx context.Context, id runtime.CallOption) error {
		return r.client.StartOrchestration(ctx, j.Instance, j.name, j.input, id)
	}) {
		return
	}
	r.mu.Lock()
	r.startedAt[j.Instance] = at
	r.mu.Unlock()
	r.begun.Add(1)
	if len(j.Raised) == 0 && len(j.Enqueued) == 0 {
		return
	}
	helpers.Add(1)
	go func() {
		defer helpers.Done()
		r.respond(ctx, j)
	}()
}

// respond plays the client's part of an event or mailbox job: each
// external event is raised once the orchestration announces that it
// waits for it; the persistent events are enqueued, in order, once the
// mailbox is ready.
func (r *run) respond(ctx context.Context, j job) {
	var seen uint64
	await := func(want string) bool {
		for {
			cs, err := r.client.WaitForCustomStatus(ctx, j.Instance, seen)
			if err != nil {
				if ctx.Err() != nil {
					return false
				}
				r.log.Warn("custom status not read; retrying", zap.String("instance", j.Instance), zap.Error(err))
				if !clock.Sleep(ctx, 100*time.Millisecond) {
					return false
				}
				continue
			}
			seen = cs.Version
			if cs.Status != nil && *cs.Status == want {
				return true
			}
		}
	}
	for i, p := range j.Raised {
		if !await(fmt.Sprintf("%s%d", statusAwait, i+1)) {
			return
		}
		if !r.call(ctx, j.Instance, fmt.Sprintf("raise-e%d", i+1), func(ctx context.Context, id runtime.CallOption) error {
			return r.client.RaiseEventRaw(ctx, j.Instance, eventSignal, p, id)
		}) {
			return
		}
	}
	if len(j.Enqueued) > 0 && !await(statusReady) {
		return
	}
	for i, p := range j.Enqueued {
		if !r.call(ctx, j.Instance, fmt.Sprintf("enqueue-q%d", i+1), func(ctx context.Context, id runtime.CallOption) error {
			return r.client.EnqueueEventRaw(ctx, j.Instance, queueItem, p, id)
		}) {
			return
		}
	}
}

// call runs one client call as a careful client would: under one request
// id (runtime.WithRequestID, "chaos/<instance>/<what>"), so that the call
// takes effect once however often it is sent, retryable errors are
// retried with backoff (the same arguments, up to maxCallAttempts) and
// permanent ones end it. It records the call and reports success.
func (r *run) call(ctx context.Context, instance, what string, f func(context.Context, runtime.CallOption) error) bool {
	id := runtime.WithRequestID("chaos/" + instance + "/" + what)
	rec := CallRecord{Instance: instance, What: what}
	defer func() {
		r.mu.Lock()
		r.calls = append(r.calls, rec)
		r.mu.Unlock()
	}()
	delay := 50 * time.Millisecond
	for rec.Attempts < maxCallAttempts {
		rec.Attempts++
		err := f(ctx, id)
		if err == nil {
			rec.OK = true
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		rec.Errors = append(rec.Errors, err.Error())
		if !durable.IsRetryable(err) {
			r.log.Warn("client call failed", zap.String("instance", instance), zap.String("call", what), zap.Error(err))
			return false
		}
		if !clock.Sleep(ctx, delay) {
			return false
		}
		delay = min(2*delay, time.Second)
	}
	return false
}

// trackInterval is how often the campaign lists finished instances.
const trackInterval = 500 * time.Millisecond

// track records finished roots until all finished or ctx ends.
func (r *run) track(ctx context.Context) {
	roots := make(map[string]bool, len(r.jobs))
	for _, j := range r.jobs {
		roots[j.Instance] = true
	}
	tick := time.NewTicker(trackInterval)
	defer tick.Stop()
	next := time.Now().Add(r.c.ProgressInterval)
	for {
		r.poll(ctx, roots)
		done := int(r.finished.Load())
		if time.Now().After(next) {
			next = time.Now().Add(r.c.ProgressInterval)
			if r.c.Progress != nil {
				spent := ""
				if r.acct != nil {
					spent = fmt.Sprintf(", %.0f RU spent", r.acct.Meter().Total().RequestCharge)
				}
				fmt.Fprintf(r.c.Progress, "chaos[%s] +%v %d/%d roots finished, %d faults injected%s\n",
					r.c.Mode, time.Since(r.started).Round(time.Second), done, len(r.jobs), r.faults.fired(), spent)
			}
		}
		if done == len(r.jobs) {
			return
		}
		select {
		case <-ctx.Done():
			r.note("gave up: %d of %d roots finished when the workload's time (%v) ran out", done, len(r.jobs), r.c.Timeout)
			return
		case <-tick.C:
		}
	}
}

// poll counts the roots that reached a terminal status (their
// completion times are read back at the end).
func (r *run) poll(ctx context.Context, roots map[string]bool) {
	n := 0
	for _, st := range []durable.Status{durable.StatusCompleted, durable.StatusFailed} {
		ids, err := r.admin.ListInstancesByStatus(ctx, st)
		if err != nil {
			return // faults happen; next tick
		}
		for _, id := range ids {
			if roots[id] {
				n++
			}
		}
	}
	r.finished.Store(int64(n))
}

// direct splits partitions (not on an account) and kills a replica as the
// roots are started.
func (r *run) direct(ctx context.Context) {
	n := float64(len(r.jobs))
	var splitAt []float64
	for i := range r.c.Splits {
		if r.acct != nil {
			break
		}
		splitAt = append(splitAt, min(r.c.SplitAt+0.2*float64(i), 0.95))
	}
	killAt := r.c.KillAt
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for len(splitAt) > 0 || killAt >= 0 {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		begun := float64(r.begun.Load())
		if len(splitAt) > 0 && begun >= splitAt[0]*n {
			splitAt = splitAt[1:]
			if err := r.split(ctx); err != nil {
				r.note("split failed: %v", err)
			}
		}
		if killAt >= 0 && begun >= killAt*n {
			killAt = -1
			live := r.snapshotReplicas()
			victim := live[min(1, len(live)-1)]
			r.kill(victim)
			rp, err := r.join(ctx)
			if err != nil {
				r.note("replacement did not join: %v", err)
				continue
			}
			r.note("replica %d joined as the replacement", rp.n)
		}
	}
}

// join adds and starts a replacement replica; opening it runs under the
// faults, so it is retried a few times.
func (r *run) join(ctx context.Context) (*replica, error) {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		var rp *replica
		if rp, err = r.addReplica(ctx); err == nil {
			if err = rp.rt.Start(); err == nil {
				r.mu.Lock()
				r.joined++
				r.mu.Unlock()
				return rp, nil
			}
		}
		if !clock.Sleep(ctx, time.Second) {
			break
		}
	}
	return nil, err
}

// split splits one partition key range of the container through the
// emulator's admin endpoint (POST /_emulator/split).
func (r *run) split(ctx context.Context) error {
	hc := r.emu.HTTPClient()
	defer hc.CloseIdleConnections()
	base := r.emu.Endpoint() + "_emulator/"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"ranges?database="+database+"&container="+container, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	var ranges []cosmosemu.PartitionKeyRange
	err = json.NewDecoder(resp.Body).Decode(&ranges)
	_ = resp.Body.Close()
	if err != nil {
		return fmt.Errorf("ranges: %w", err)
	}
	for _, pk := range ranges {
		body, _ := json.Marshal(map[string]string{"database": database, "container": container, "range": pk.ID})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"split", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			r.mu.Lock()
			r.splits++
			r.mu.Unlock()
			r.note("split partition key range %s with %d roots started, %d finished: %s",
				pk.ID, r.begun.Load(), r.finished.Load(), bytes.TrimSpace(b))
			return nil
		case http.StatusConflict:
			continue // too narrow; try the next
		default:
			return fmt.Errorf("split %s: %d %s", pk.ID, resp.StatusCode, bytes.TrimSpace(b))
		}
	}
	return errors.New("no range could be split")
}

// settle waits, still under faults, until no instance runs and the
// queues are empty, or SettleTimeout.
func (r *run) settle(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.c.SettleTimeout)
	defer cancel()
	for {
		running, err := r.admin.ListInstancesByStatus(ctx, durable.StatusRunning)
		if err == nil && len(running) == 0 {
			d, err := r.admin.GetQueueDepths(ctx)
			if err == nil && d.OrchestratorQueue == 0 && d.WorkerQueue == 0 && d.TimerQueue == 0 {
				return
			}
		}
		if !clock.Sleep(ctx, 500*time.Millisecond) {
			r.note("did not settle within %v", r.c.SettleTimeout)
			return
		}
	}
}

// evidence reads back every instance, its executions and histories, the
// queue depths and what the observer recorded.
func (r *run) evidence(ctx context.Context) (Evidence, error) {
	ev := Evidence{ActivityExecutions: r.ex.snapshot()}
	for _, j := range r.jobs {
		ev.Expectations = append(ev.Expectations, j.Expectation)
	}
	ev.Consumed, _, _ = r.obs.results()
	var err error
	if ev.QueueDepths, err = r.admin.GetQueueDepths(ctx); err != nil {
		return ev, err
	}
	ids, err := r.admin.ListInstances(ctx)
	if err != nil {
		return ev, err
	}
	sort.Strings(ids)
	ev.Instances = make([]InstanceRecord, len(ids))
	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	sem := make(chan struct{}, 8)
	for i, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ev.Instances[i], errs[i] = r.readInstance(ctx, id)
		}()
	}
	wg.Wait()
	return ev, errors.Join(errs...)
}

// readInstance reads one instance's status and every execution's history.
func (r *run) readInstance(ctx context.Context, id string) (InstanceRecord, error) {
	rec := InstanceRecord{Instance: id}
	info, err := r.admin.GetInstanceInfo(ctx, id)
	if err != nil {
		return rec, fmt.Errorf("%s: %w", id, err)
	}
	rec.Status = info.Status
	if info.Output != nil {
		rec.Output = *info.Output
	}
	if rec.Status == durable.StatusCompleted || rec.Status == durable.StatusFailed {
		ex, err := r.admin.GetExecutionInfo(ctx, id, info.CurrentExecutionID)
		if err != nil {
			return rec, fmt.Errorf("%s: %w", id, err)
		}
		rec.CompletedAt = ex.CompletedAt
		if rec.CompletedAt.IsZero() {
			rec.CompletedAt = info.UpdatedAt
		}
	}
	execs, err := r.admin.ListExecutions(ctx, id)
	if err != nil {
		return rec, fmt.Errorf("%s: %w", id, err)
	}
	p := r.client.Provider()
	for _, x := range execs {
		events, err := p.ReadWithExecution(ctx, id, x)
		if err != nil {
			return rec, fmt.Errorf("%s execution %d: %w", id, x, err)
		}
		rec.Executions = append(rec.Executions, events)
	}
	return rec, nil
}
