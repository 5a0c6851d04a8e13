package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/durafeed/durafeed/internal/account"
	"github.com/durafeed/durafeed/internal/clock"
)

// EnvOptions configures an Env.
type EnvOptions struct {
	// PartitionCount is the number of physical partitions of every
	// container (default 4).
	PartitionCount int
	// Latency is the delay injected into every request (the knobs' latency
	// knob, constant unless Jitter is set): an in-region round trip is about
	// 2 ms.
	Latency time.Duration
	// Jitter is the uniform half-width around Latency (default none).
	Jitter time.Duration
	// ProbeSamples is the number of requests of each of the start-up
	// probe's measurements (default 60; see Probe).
	ProbeSamples int
	// PeerWake turns the peer wake channel on in every event-driven
	// provider of the environment (replicas and clients; engine.PeerWake
	// with its defaults, on this machine's loopback).
	PeerWake bool
	// FeedBudget is engine.FeedOptions.EmptyReadBudget of every
	// event-driven provider (RU per second; zero: the engine's default,
	// negative: the back-off without a budget).
	FeedBudget float64
	// FeedReadsPerChange is engine.FeedOptions.ReadsPerChange (zero: the
	// engine's default, negative: none).
	FeedReadsPerChange float64
	// SiblingWait is engine.Options.SiblingWait (zero or negative: off,
	// the engine's default).
	SiblingWait time.Duration
	// NoEager is engine.Options.DisableEager.
	NoEager bool
	// Account, when set, runs the Env on an Azure Cosmos DB account (or an
	// emulator over its endpoint) instead of an embedded emulator: no
	// latency is injected (Latency and Jitter must be zero), PartitionCount
	// is the service's, and the figures are the account's own charges.
	Account *account.Options
	// MaxRU, when positive, stops the Env's clients' work once they have
	// spent this many RU (Env.OverCap reports it; account.Meter.SetCap).
	MaxRU float64
}

const defaultProbeSamples = 60

// Probe is what StartEnv measures before any scenario runs, on a container
// of its own, through the SDK: the unit of the p99 target, and what a
// feed-woken wake costs here without the engine.
//
// Every request on a feed-woken path is issued by a process that has been
// quiet since its last one: the reader's timer fires after a pause, the
// feed read's answer wakes the fetch, and the fetch's lock batch follows.
// On small machines a request issued after such a pause takes about
// twice what one issued right after another takes, or more (threads
// parked, cores idle): the two are measured apart, and the first is the round trip
// the p99 target counts.
type Probe struct {
	// RoundTrip is the median of isolated point reads of a 1 KB document,
	// each issued after a pause drawn uniformly from a quarter to one
	// active feed delay, injected latency included. The p99 target's unit.
	RoundTrip time.Duration
	// BackToBack is the median of the same reads issued one right after
	// another.
	BackToBack time.Duration
	// BareWakeP99 is the 99th percentile of twice ProbeSamples wakes from
	// another process's client that do no more than any feed-woken wake
	// must: a bare reader reads the change feed of one physical partition
	// every active feed delay and, seeing the written document, commits a
	// two-document transactional batch at once (measureBareWakes).
	BareWakeP99 time.Duration
}

// Env is where scenarios run: an embedded cosmosemu with the knobs'
// middleware (latency, the simulated charge model
// knobs.DefaultChargeModel), or an account over its endpoint
// (EnvOptions.Account). Either way every client of the Env is metered on
// the client side, from the answers' own headers (account.Meter): the
// reports' request and RU figures are what the client saw charged.
// Scenarios run in containers of their own in the run's throwaway
// database, so one Env serves many scenarios at once.
type Env struct {
	// Server is the embedded emulator (nil on an account).
	Server *cosmosemu.Server
	// Knobs are its knobs (nil on an account).
	Knobs *knobs.Knobs

	acct  *account.Account
	opts  EnvOptions
	probe Probe
	seq   atomic.Int64
	// scans counts what the embedded emulator's queries examined (nil on
	// an account).
	scans *queryScans
	// stop cancels the Env's work when the RU cap is passed.
	stop context.CancelFunc
}

// StartEnv starts an emulator, or opens the account, and probes it (see
// Probe). The returned context is cancelled when the Env's RU cap is
// passed (EnvOptions.MaxRU); scenarios should run under it.
func StartEnv(ctx context.Context, opts EnvOptions) (*Env, context.Context, error) {
	if opts.ProbeSamples <= 0 {
		opts.ProbeSamples = defaultProbeSamples
	}
	e := &Env{opts: opts}
	var ao account.Options
	if opts.Account != nil {
		if opts.Latency != 0 || opts.Jitter != 0 {
			return nil, nil, errors.New("bench: no latency can be injected on an account")
		}
		ao = *opts.Account
		if ao.Prefix == "" {
			ao.Prefix = "durafeed-bench"
		}
	} else {
		if opts.PartitionCount <= 0 {
			opts.PartitionCount = cosmosemu.DefaultPartitionCount
			e.opts.PartitionCount = opts.PartitionCount
		}
		k, err := knobs.New(knobs.Config{
			Latency: knobs.LatencyConfig{Default: knobs.LatencySpec{Base: opts.Latency, Jitter: opts.Jitter}},
			Charges: knobs.DefaultChargeModel(),
		})
		if err != nil {
			return nil, nil, err
		}
		// The query counter goes innermost, under the knobs' charge model,
		// so that it sees the emulator's own charge (queryScans).
		e.scans = newQueryScans()
		srv, err := cosmosemu.Start(ctx, cosmosemu.Options{PartitionCount: opts.PartitionCount,
			Middleware: append(k.Middleware(), e.scans.middleware())})
		if err != nil {
			return nil, nil, err
		}
		e.Server, e.Knobs = srv, k
		ao = account.Options{Endpoint: srv.Endpoint(), Key: srv.Key(), ClientOptions: srv.ClientOptions, Prefix: "bench"}
	}
	acct, err := account.Open(ctx, ao)
	if err != nil {
		_ = e.closeServer()
		return nil, nil, err
	}
	e.acct = acct
	runCtx, stop := context.WithCancel(ctx)
	e.stop = stop
	if opts.MaxRU > 0 {
		acct.Meter().SetCap(opts.MaxRU, stop)
	}
	if e.probe, err = e.runProbe(runCtx, opts.ProbeSamples); err != nil {
		_ = e.Close()
		return nil, nil, fmt.Errorf("bench: probing the round trip: %w", e.capErr(err))
	}
	return e, runCtx, nil
}

// OverCap reports whether the Env's clients spent past EnvOptions.MaxRU
// (the Env's context is cancelled then).
func (e *Env) OverCap() bool { return e.acct.Meter().Exceeded() }

// capErr returns err, or an error wrapping account.ErrOverCap when the
// cap stopped the work.
func (e *Env) capErr(err error) error {
	if err != nil && e.OverCap() {
		return fmt.Errorf("bench: stopped after %.0f RU: %w", e.acct.Meter().Total().RequestCharge, account.ErrOverCap)
	}
	return err
}

// Account describes the account or emulator the Env runs on.
func (e *Env) Account() account.Info { return e.acct.Info() }

// Spent is what every client of the Env spent so far.
func (e *Env) Spent() account.Usage { return e.acct.Meter().Total() }

func (e *Env) closeServer() error {
	if e.Server == nil {
		return nil
	}
	return e.Server.Close()
}

// Close deletes the run's database (unless the account options keep it)
// and stops the emulator.
func (e *Env) Close() error {
	if e.stop != nil {
		e.stop()
	}
	var err error
	if e.acct != nil {
		err = e.acct.Close()
	}
	return errors.Join(err, e.closeServer())
}

// Latency is the injected per-request latency.
func (e *Env) Latency() time.Duration { return e.opts.Latency }

// RoundTrip is the probe's median isolated point-read round trip, the p99
// target's unit.
func (e *Env) RoundTrip() time.Duration { return e.probe.RoundTrip }

// Probe returns what StartEnv measured.
func (e *Env) Probe() Probe { return e.probe }

// PartitionCount is the number of physical partitions per container.
func (e *Env) PartitionCount() int { return e.opts.PartitionCount }

// newContainer creates a fresh container for a scenario and returns its
// name; drop deletes it (call it once the scenario is measured and its
// providers are closed: on an account, containers sharing a database's
// throughput are limited to 25).
func (e *Env) newContainer(ctx context.Context, label string) (name string, drop func(), err error) {
	name = fmt.Sprintf("%s-%d", label, e.seq.Add(1))
	if err := e.acct.CreateContainer(ctx, name); err != nil {
		return "", nil, e.capErr(err)
	}
	return name, func() { _ = e.acct.DeleteContainer(context.WithoutCancel(ctx), name) }, nil
}

// database is the run's throwaway database.
func (e *Env) database() string { return e.acct.Database() }

func (e *Env) runProbe(ctx context.Context, n int) (Probe, error) {
	var pr Probe
	c, err := e.acct.NewClient()
	if err != nil {
		return pr, err
	}
	name, drop, err := e.newContainer(ctx, "roundtrip")
	if err != nil {
		return pr, err
	}
	defer drop()
	cc, err := c.NewContainer(e.database(), name)
	if err != nil {
		return pr, err
	}
	// The store's containers are partitioned by /instanceId.
	pk := azcosmos.NewPartitionKeyString("probe")
	body := fmt.Sprintf(`{"id":"probe","instanceId":"probe","pad":%q}`, strings.Repeat("x", 900))
	if _, err := cc.CreateItem(ctx, pk, []byte(body), nil); err != nil {
		return pr, err
	}
	read := func() (time.Duration, error) {
		t0 := time.Now()
		_, err := cc.ReadItem(ctx, pk, "probe", nil)
		return time.Since(t0), err
	}
	rng := rand.New(rand.NewPCG(uint64(n), uint64(e.opts.Latency)))
	d := activeFeedDelay()
	pause := func() bool { return clock.Sleep(ctx, d/4+time.Duration(rng.Int64N(int64(d-d/4)+1))) }

	// reads returns n read times, each read after a pause if isolated.
	reads := func(isolated bool) ([]time.Duration, error) {
		out := make([]time.Duration, 0, n)
		for range n {
			if isolated && !pause() {
				return nil, ctx.Err()
			}
			rt, err := read()
			if err != nil {
				return nil, err
			}
			out = append(out, rt)
		}
		return out, nil
	}
	if _, err := read(); err != nil { // the first read may open the connection
		return pr, err
	}
	hot, err := reads(false)
	if err != nil {
		return pr, err
	}
	isolated, err := reads(true)
	if err != nil {
		return pr, err
	}
	w, err := e.acct.NewClient() // the writer: another process's client
	if err != nil {
		return pr, err
	}
	wc, err := w.NewContainer(e.database(), name)
	if err != nil {
		return pr, err
	}
	bare, err := measureBareWakes(ctx, wc, cc, d, 2*n, rng)
	if err != nil {
		return pr, fmt.Errorf("bare wakes: %w", err)
	}
	return Probe{RoundTrip: Percentile(isolated, 50), BackToBack: Percentile(hot, 50), BareWakeP99: Percentile(bare, 99)}, nil
}

// Usage is what the requests addressing one container cost.
type Usage struct {
	// Requests and RequestCharge are the meter's figures for the
	// container (simulated RU on the embedded emulator, the account's on
	// an account).
	Requests      int64   `json:"requests"`
	RequestCharge float64 `json:"request_charge"`
	// ByOperation splits them by operation (account.Label: the resource
	// type when not a document, "[$leases]" for the lease partition).
	ByOperation map[string]OpUsage `json:"by_operation"`
}

// OpUsage is the cost of one kind of operation.
type OpUsage struct {
	Requests      int64   `json:"requests"`
	RequestCharge float64 `json:"request_charge"`
}

// usage reads what the requests on a container cost, from the meter's
// snapshot: the total is the sum of the per-operation figures.
func (e *Env) usage(container string) Usage {
	u := Usage{ByOperation: map[string]OpUsage{}}
	var milliRU float64
	for label, o := range e.acct.Meter().Container(e.database(), container) {
		u.ByOperation[label] = OpUsage{Requests: o.Requests, RequestCharge: o.RequestCharge}
		u.Requests += o.Requests
		milliRU += math.Round(o.RequestCharge * 1000)
	}
	u.RequestCharge = milliRU / 1000
	return u
}

// sub returns u - v.
func (u Usage) sub(v Usage) Usage {
	out := Usage{Requests: u.Requests - v.Requests, RequestCharge: round2(u.RequestCharge - v.RequestCharge),
		ByOperation: map[string]OpUsage{}}
	for k, a := range u.ByOperation {
		b := v.ByOperation[k]
		if d := (OpUsage{Requests: a.Requests - b.Requests, RequestCharge: round2(a.RequestCharge - b.RequestCharge)}); d.Requests != 0 {
			out.ByOperation[k] = d
		}
	}
	return out
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// sortedLabels returns the labels of m by descending charge.
func sortedLabels(m map[string]OpUsage) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a].RequestCharge != m[b].RequestCharge {
			if m[a].RequestCharge > m[b].RequestCharge {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return keys
}
