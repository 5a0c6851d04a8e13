package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/durafeed/durafeed/internal/clock"
)

// Database is the database every benchmark container is created in.
const Database = "bench"

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

// Env is an embedded cosmosemu with the knobs' middleware (counters,
// latency, the simulated charge model knobs.DefaultChargeModel) and the
// benchmark's own per-container, per-operation counter. Scenarios run in
// containers of their own, so one Env serves many scenarios at once.
type Env struct {
	// Server is the emulator.
	Server *cosmosemu.Server
	// Knobs are its knobs: latency, faults and the simulated charge model.
	// The reports' request and RU figures come from the Env's own
	// per-operation counters, which apply the knobs' charges.
	Knobs *knobs.Knobs

	opts  EnvOptions
	ops   *opCounters
	probe Probe
	seq   atomic.Int64
}

// StartEnv starts an emulator and probes it (see Probe).
func StartEnv(ctx context.Context, opts EnvOptions) (*Env, error) {
	if opts.PartitionCount <= 0 {
		opts.PartitionCount = cosmosemu.DefaultPartitionCount
	}
	if opts.ProbeSamples <= 0 {
		opts.ProbeSamples = defaultProbeSamples
	}
	k, err := knobs.New(knobs.Config{
		Latency: knobs.LatencyConfig{Default: knobs.LatencySpec{Base: opts.Latency, Jitter: opts.Jitter}},
		Charges: knobs.DefaultChargeModel(),
	})
	if err != nil {
		return nil, err
	}
	oc := &opCounters{m: map[string]map[string]*opCell{}}
	// Ours is outermost, so it sees the charge the knobs' model set.
	mw := append([]cosmosemu.Middleware{oc.middleware}, k.Middleware()...)
	srv, err := cosmosemu.Start(ctx, cosmosemu.Options{PartitionCount: opts.PartitionCount, Middleware: mw})
	if err != nil {
		return nil, err
	}
	e := &Env{Server: srv, Knobs: k, opts: opts, ops: oc}
	if e.probe, err = e.runProbe(ctx, opts.ProbeSamples); err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("bench: probing the round trip: %w", err)
	}
	return e, nil
}

// Close stops the emulator.
func (e *Env) Close() error { return e.Server.Close() }

// Latency is the injected per-request latency.
func (e *Env) Latency() time.Duration { return e.opts.Latency }

// RoundTrip is the probe's median isolated point-read round trip, the p99
// target's unit.
func (e *Env) RoundTrip() time.Duration { return e.probe.RoundTrip }

// Probe returns what StartEnv measured.
func (e *Env) Probe() Probe { return e.probe }

// PartitionCount is the number of physical partitions per container.
func (e *Env) PartitionCount() int { return e.opts.PartitionCount }

// newContainer returns a fresh container name for a scenario.
func (e *Env) newContainer(label string) string {
	return fmt.Sprintf("%s-%d", label, e.seq.Add(1))
}

func (e *Env) runProbe(ctx context.Context, n int) (Probe, error) {
	var pr Probe
	c, err := e.Server.NewClient()
	if err != nil {
		return pr, err
	}
	if _, err := c.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: Database}, nil); err != nil && !isConflict(err) {
		return pr, err
	}
	db, err := c.NewDatabase(Database)
	if err != nil {
		return pr, err
	}
	name := e.newContainer("roundtrip")
	if _, err := db.CreateContainer(ctx, azcosmos.ContainerProperties{ID: name,
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}, Version: 2}}, nil); err != nil {
		return pr, err
	}
	cc, err := db.NewContainer(name)
	if err != nil {
		return pr, err
	}
	pk := azcosmos.NewPartitionKeyString("probe")
	body := fmt.Sprintf(`{"id":"probe","pk":"probe","pad":%q}`, strings.Repeat("x", 900))
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
	w, err := e.Server.NewClient() // the writer: another process's client
	if err != nil {
		return pr, err
	}
	wdb, err := w.NewDatabase(Database)
	if err != nil {
		return pr, err
	}
	wc, err := wdb.NewContainer(name)
	if err != nil {
		return pr, err
	}
	bare, err := measureBareWakes(ctx, wc, cc, d, 2*n, rng)
	if err != nil {
		return pr, fmt.Errorf("bare wakes: %w", err)
	}
	return Probe{RoundTrip: Percentile(isolated, 50), BackToBack: Percentile(hot, 50), BareWakeP99: Percentile(bare, 99)}, nil
}

func isConflict(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusConflict
}

// Usage is what the requests addressing one container cost.
type Usage struct {
	// Requests and RequestCharge (simulated RU) are the knobs' counters for
	// the container.
	Requests      int64   `json:"requests"`
	RequestCharge float64 `json:"request_charge"`
	// ByOperation splits them by operation (and resource type when not a
	// document; "[$leases]" marks requests on the lease partition).
	ByOperation map[string]OpUsage `json:"by_operation"`
}

// OpUsage is the cost of one kind of operation.
type OpUsage struct {
	Requests      int64   `json:"requests"`
	RequestCharge float64 `json:"request_charge"`
}

// usage reads what the requests on a container cost. The total is the sum
// of the per-operation counters, read in one snapshot: the knobs' counters
// count the same requests (with the same charge rule) but at another
// moment of each request, so a snapshot of both could straddle a request
// still being served and the breakdown would not add up to the total.
func (e *Env) usage(container string) Usage {
	u := Usage{ByOperation: e.ops.snapshot(container)}
	var milliRU float64
	for _, o := range u.ByOperation {
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

// opCounters counts requests and charges per container and operation
// label. The knobs' counters have either dimension but not both.
type opCounters struct {
	mu sync.Mutex
	m  map[string]map[string]*opCell // container → label → cell
}

type opCell struct {
	requests atomic.Int64
	milliRU  atomic.Int64
}

func (o *opCounters) cell(container, label string) *opCell {
	o.mu.Lock()
	defer o.mu.Unlock()
	byLabel := o.m[container]
	if byLabel == nil {
		byLabel = map[string]*opCell{}
		o.m[container] = byLabel
	}
	c := byLabel[label]
	if c == nil {
		c = &opCell{}
		byLabel[label] = c
	}
	return c
}

func (o *opCounters) snapshot(container string) map[string]OpUsage {
	o.mu.Lock()
	byLabel := maps.Clone(o.m[container])
	o.mu.Unlock()
	out := make(map[string]OpUsage, len(byLabel))
	for k, c := range byLabel {
		out[k] = OpUsage{Requests: c.requests.Load(), RequestCharge: float64(c.milliRU.Load()) / 1000}
	}
	return out
}

// leasePartitionMarker identifies requests on the provider's lease
// partition by their partition-key header.
const leasePartitionMarker = "$leases"

// crossPartition marks the label of a query without a partition key.
const crossPartition = " (cross-partition)"

func opLabel(req *cosmosemu.Request) string {
	label := string(req.Operation)
	if req.ResourceType != cosmosemu.ResourceDocument {
		label += " " + string(req.ResourceType)
	}
	pk := ""
	if req.HTTP != nil {
		pk = req.HTTP.Header.Get("x-ms-documentdb-partitionkey")
	}
	if strings.Contains(pk, leasePartitionMarker) {
		label += " [$leases]"
	}
	if req.Operation == cosmosemu.OpQuery && pk == "" {
		// The engine's only steady cross-partition query is its safety
		// sweep (catch-ups run at lease acquisition); polling's fetches
		// are all of this kind.
		label += crossPartition
	}
	return label
}

func (o *opCounters) middleware(next cosmosemu.Handler) cosmosemu.Handler {
	return func(ctx context.Context, req *cosmosemu.Request) (resp *cosmosemu.Response) {
		if req.Container == "" || req.Database != Database {
			return next(ctx, req)
		}
		c := o.cell(req.Container, opLabel(req))
		defer func() {
			c.requests.Add(1)
			if resp != nil {
				// As the knobs' counters do: a success without a charge is
				// reported to the client as 1 RU.
				charge := resp.RequestCharge
				if charge == 0 && resp.Status < 300 {
					charge = 1
				}
				c.milliRU.Add(int64(math.Round(charge * 1000)))
			}
		}()
		return next(ctx, req)
	}
}

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
