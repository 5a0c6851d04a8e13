package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/durafeed/durafeed/bench"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/internal/account"
	"github.com/durafeed/durafeed/internal/chart"
)

// The modes of the sweep: the service's DURAFEED_MODE values, and the
// event-driven mode with the peer wake channel on.
const (
	modeEventDriven = "event-driven"
	modePolling     = "polling"
	modePeer        = "event-driven+peer"
)

// The sweep's fixed settings.
const (
	// minTicks is the least number of ticks a cell runs, whatever
	// -sweep-duration says.
	minTicks = 3
	// jitterLow and jitterHigh bound the factor each gap is drawn
	// uniformly from, times the load's mean gap.
	jitterLow, jitterHigh = 0.5, 1.5
	// sampleTimeout bounds one sample, from its POST to its end seen over
	// HTTP; a sample that takes longer is a failure.
	sampleTimeout = 2 * time.Minute
	// waitingStatus is the custom status of an Approval that waits for
	// its decision (package sample).
	waitingStatus = "waiting for a decision"
	// The Prometheus names of store.MetricRequestUnits,
	// store.MetricRequests and store.MetricThrottles as the service's
	// /metrics serves them.
	promRequestUnits = "durafeed_cosmos_request_units_total"
	promRequests     = "durafeed_cosmos_requests_total"
	promThrottles    = "durafeed_cosmos_throttles_total"
	// promSlotsOwned is engine.MetricSlotsOwned as /metrics names it.
	promSlotsOwned = "durafeed_engine_slots_owned"
)

// The judge's targets: event-driven's p50 at most a tenth of polling's,
// its p99 at most a quarter, its RU per orchestration at most polling's.
const (
	targetP50, targetP99, targetRU = 0.1, 0.25, 1.0
)

// sweepLoad is one load of the sweep: ticks Gap apart on average.
type sweepLoad struct {
	// Name is the load as -sweep-loads spelled it ("100ms", "60s").
	Name string
	Gap  time.Duration
}

// sweepMode is one way of running the services: a name and the
// environment that sets it on top of the service's defaults.
type sweepMode struct {
	Name string
	Env  []string
}

// sweepConfig is a sweep's configuration.
type sweepConfig struct {
	Loads []sweepLoad
	// Samples is the number of ticks per cell (at least minTicks); 0
	// chooses per load (ticksFor).
	Samples int
	// Settle is how long the services of a cell run after the warm-up
	// before the measured period (event-driven cells also wait until
	// their leases are spread, see settle).
	Settle time.Duration
	// Duration bounds the ticks of a cell: no tick starts after it
	// (minTicks excepted).
	Duration time.Duration
	// Peer adds the event-driven+peer mode.
	Peer bool
	// Seed seeds the gaps: the cells of one load see the same gaps.
	Seed uint64
	// Latency is injected by each emulator into every request (its
	// -latency), standing for the round trip to an account in the
	// region (default 2 ms, as the bench's).
	Latency time.Duration
	// BinDir holds the cosmosemu and durafeed-service binaries (empty:
	// build them once for every cell); Prebuilt says they came from
	// -bin-dir.
	BinDir   string
	Prebuilt bool
	Log      io.Writer
	// Env is the fleet's environment, from which the services' is made
	// (defaultEnv).
	Env []string
	// Account, when set, runs each cell on a container of the run's
	// database (containerName) instead of an emulator of its own.
	Account *accountRun
	// Spend follows the services' charges (required).
	Spend *spend
}

// ticksFor is the number of ticks of a cell of load: Samples when set,
// else a minute's worth (at least 12, at most 300), so that fast loads
// are measured over long enough to see the tail.
func (c sweepConfig) ticksFor(l sweepLoad) int {
	if c.Samples > 0 {
		return c.Samples
	}
	return max(12, min(300, int(time.Minute/l.Gap)))
}

// defaultSweepLoads is -sweep-loads' default.
const defaultSweepLoads = "100ms,1s,10s,60s"

// defaultSweepConfig is the sweep's configuration before the flags.
func defaultSweepConfig() sweepConfig {
	return sweepConfig{Duration: 10 * time.Minute, Settle: 10 * time.Second, Seed: 1, Latency: 2 * time.Millisecond, Log: io.Discard}
}

// parseLoads reads -sweep-loads: comma-separated positive, distinct
// durations.
func parseLoads(s string) ([]sweepLoad, error) {
	var loads []sweepLoad
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		d, err := time.ParseDuration(f)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("-sweep-loads: %q is not a positive duration", f)
		}
		if slices.ContainsFunc(loads, func(l sweepLoad) bool { return l.Gap == d }) {
			return nil, fmt.Errorf("-sweep-loads: %s given twice", f)
		}
		loads = append(loads, sweepLoad{Name: f, Gap: d})
	}
	return loads, nil
}

// modes returns the sweep's modes: event-driven and polling with the
// service's defaults (no peer wake channel), and with c.Peer
// event-driven with the channel on loopback.
func (c sweepConfig) modes() []sweepMode {
	m := []sweepMode{{Name: modeEventDriven, Env: []string{"DURAFEED_MODE=event-driven"}},
		{Name: modePolling, Env: []string{"DURAFEED_MODE=polling"}}}
	if c.Peer {
		m = append(m, sweepMode{Name: modePeer, Env: []string{"DURAFEED_MODE=event-driven", "DURAFEED_PEER_LISTEN=127.0.0.1:0"}})
	}
	return m
}

// timeout is the bound on a whole sweep when -timeout is not given: the
// ticks, the slowest load's last gaps, and room for start-up and the
// last samples.
func (c sweepConfig) timeout() time.Duration {
	var d time.Duration
	for _, l := range c.Loads {
		cell := min(c.Duration, time.Duration(c.ticksFor(l))*l.Gap*3/2) + 2*l.Gap + c.Settle + maxSettle + sampleTimeout + time.Minute
		if l.Gap < busyGap {
			cell *= time.Duration(len(c.modes()))
		}
		d += cell
	}
	return d + 5*time.Minute
}

// sweepReport is what a sweep measured: its JSON form (-out) and the
// source of its table and picture.
type sweepReport struct {
	Settings sweepSettings `json:"settings"`
	Cells    []sweepCell   `json:"cells"`
	Judges   []sweepJudge  `json:"judges"`
	// Spend is what a sweep on an account charged (nil on emulators).
	Spend *spendReport `json:"spend,omitempty"`
}

// sweepSettings describe how a sweep ran.
type sweepSettings struct {
	Loads      []string  `json:"loads"`
	LoadGapsMS []float64 `json:"load_gaps_ms"`
	// Samples is the ticks per cell, 0 when chosen per load (a
	// minute's worth, 12 to 300: each cell's Ticks says).
	Samples   int      `json:"samples"`
	SettleS   float64  `json:"settle_s"`
	DurationS float64  `json:"duration_s"`
	Modes     []string `json:"modes"`
	// Jitter describes the gaps: each the mean times a factor drawn
	// uniformly from [JitterLow, JitterHigh], seeded by Seed.
	Jitter     string  `json:"jitter"`
	JitterLow  float64 `json:"jitter_low"`
	JitterHigh float64 `json:"jitter_high"`
	Seed       uint64  `json:"seed"`
	// Emulator describes the cells' emulator; Account instead the
	// account the cells ran on, each on a container of the run's
	// database.
	Emulator string        `json:"emulator,omitempty"`
	Account  *account.Info `json:"account,omitempty"`
	// Costs says where the request units come from.
	Costs string `json:"costs"`
	// LatencyMS is the latency each emulator injects per request.
	LatencyMS  float64 `json:"latency_ms,omitempty"`
	GoVersion  string  `json:"go_version"`
	GOMAXPROCS int     `json:"gomaxprocs"`
	NumCPU     int     `json:"num_cpu"`
	Commit     string  `json:"commit,omitempty"`
	// Dirty says the working tree had uncommitted changes (the binaries
	// are built from it unless Prebuilt).
	Dirty bool `json:"dirty,omitempty"`
	// Prebuilt says the binaries came from -bin-dir.
	Prebuilt  bool      `json:"prebuilt,omitempty"`
	StartedAt time.Time `json:"started_at"`
}

// sweepCell is one (mode, load) cell: its raw samples and its summary.
type sweepCell struct {
	Mode      string  `json:"mode"`
	Load      string  `json:"load"`
	MeanGapMS float64 `json:"mean_gap_ms"`
	// Ticks is the number of ticks run (a Greet and an Approval each).
	Ticks int `json:"ticks"`
	// StartMS are the start → completed latencies of the Greets, in tick
	// order; EventMS the event → completed latencies of the Approvals.
	StartMS []float64 `json:"start_to_completed_ms"`
	EventMS []float64 `json:"event_to_completed_ms"`
	// Start and Event summarise StartMS and EventMS.
	Start latencySummary `json:"start_to_completed"`
	Event latencySummary `json:"event_to_completed"`
	// Failures are the samples that failed or timed out, one line each.
	Failures []string `json:"failures,omitempty"`
	// MeasuredS is the measured period: from the first /metrics scrape
	// after the warm-up to the last, once every sample has ended.
	MeasuredS float64 `json:"measured_s"`
	// Completed is the number of orchestrations completed in the period
	// (Greets and Approvals).
	Completed int `json:"completed"`
	// RU and Requests are the period's deltas of the request-unit and
	// request counters, summed over the three services: every request
	// they made to the store, the dispatch's and those serving the
	// sweep's own HTTP requests (starts, events, status reads and
	// waits), as a deployment's clients would cause.
	RU       float64 `json:"ru"`
	Requests float64 `json:"requests"`
	// Throttled is the period's delta of the services' 429 counters.
	Throttled float64 `json:"throttled"`
	RUPerMin  float64 `json:"ru_per_min"`
	// RUPerOrch and RequestsPerOrch divide RU and Requests by Completed.
	RUPerOrch       float64 `json:"ru_per_orchestration"`
	RequestsPerOrch float64 `json:"requests_per_orchestration"`
	// HTTPRetries counts requests resent after a transport error or a 5xx.
	HTTPRetries int64 `json:"http_retries"`
	// Error says why the cell did not run to its end ("" when it did).
	Error string `json:"error,omitempty"`
}

// latencySummary is the count and percentiles of a set of latencies.
type latencySummary struct {
	N     int     `json:"n"`
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
}

// summarise returns the summary of ms (nearest-rank percentiles; with
// fewer than a hundred samples p99 is the maximum).
func summarise(ms []float64) latencySummary {
	if len(ms) == 0 {
		return latencySummary{}
	}
	ds := make([]time.Duration, len(ms))
	for i, v := range ms {
		ds[i] = time.Duration(v * float64(time.Millisecond))
	}
	return latencySummary{N: len(ms), P50MS: msOf(bench.Percentile(ds, 50)), P99MS: msOf(bench.Percentile(ds, 99)), MaxMS: slices.Max(ms)}
}

// sweepJudge compares one mode with polling at one load. A ratio is nil
// when either cell is missing or has no sample of the measure.
type sweepJudge struct {
	Load    string `json:"load"`
	Mode    string `json:"mode"`
	Against string `json:"against"`
	// The ratios mode/polling.
	StartP50 *float64 `json:"start_p50_ratio"`
	StartP99 *float64 `json:"start_p99_ratio"`
	EventP50 *float64 `json:"event_p50_ratio"`
	EventP99 *float64 `json:"event_p99_ratio"`
	RUPerOrc *float64 `json:"ru_per_orchestration_ratio"`
	// P50, P99 and RU say whether the targets are met (both measures for
	// the latencies); Pass whether all three are.
	P50  bool `json:"p50_pass"`
	P99  bool `json:"p99_pass"`
	RU   bool `json:"ru_pass"`
	Pass bool `json:"pass"`
}

// judge compares mode with polling at load over cells; a missing cell or
// a measure without samples fails its targets.
func judge(cells []sweepCell, load, mode string) sweepJudge {
	find := func(m string) *sweepCell {
		for i := range cells {
			if cells[i].Mode == m && cells[i].Load == load {
				return &cells[i]
			}
		}
		return nil
	}
	j := sweepJudge{Load: load, Mode: mode, Against: modePolling}
	a, b := find(mode), find(modePolling)
	ratio := func(x, y float64, n, m int) *float64 {
		if a == nil || b == nil || n == 0 || m == 0 || y <= 0 {
			return nil
		}
		r := x / y
		return &r
	}
	if a != nil && b != nil {
		j.StartP50 = ratio(a.Start.P50MS, b.Start.P50MS, a.Start.N, b.Start.N)
		j.StartP99 = ratio(a.Start.P99MS, b.Start.P99MS, a.Start.N, b.Start.N)
		j.EventP50 = ratio(a.Event.P50MS, b.Event.P50MS, a.Event.N, b.Event.N)
		j.EventP99 = ratio(a.Event.P99MS, b.Event.P99MS, a.Event.N, b.Event.N)
		j.RUPerOrc = ratio(a.RUPerOrch, b.RUPerOrch, a.Completed, b.Completed)
		if a.RUPerOrch <= 0 {
			j.RUPerOrc = nil
		}
	}
	le := func(r *float64, bound float64) bool { return r != nil && *r <= bound }
	j.P50 = le(j.StartP50, targetP50) && le(j.EventP50, targetP50)
	j.P99 = le(j.StartP99, targetP99) && le(j.EventP99, targetP99)
	j.RU = le(j.RUPerOrc, targetRU)
	j.Pass = j.P50 && j.P99 && j.RU
	return j
}

// runSweep runs every (mode, load) cell of c at once, each on a fleet of
// its own (an emulator process and three services), and returns the
// report. The binaries are built once for all cells. The error reports a
// sweep that could not run, cells that did not run to their end, or
// failed samples; the report is returned with it whenever there is one.
func runSweep(ctx context.Context, c sweepConfig) (*sweepReport, error) {
	if len(c.Loads) == 0 || (c.Samples != 0 && c.Samples < minTicks) || c.Duration <= 0 || c.Settle < 0 {
		return nil, fmt.Errorf("a sweep needs loads, 0 (per load) or at least %d samples, a positive duration and no negative settle time", minTicks)
	}
	modes := c.modes()
	rep := &sweepReport{Settings: sweepSettings{Samples: c.Samples, DurationS: c.Duration.Seconds(), SettleS: c.Settle.Seconds(),
		Jitter:    fmt.Sprintf("each gap the mean times a factor drawn uniformly from [%g, %g]", jitterLow, jitterHigh),
		JitterLow: jitterLow, JitterHigh: jitterHigh, Seed: c.Seed,
		GoVersion: goruntime.Version(), GOMAXPROCS: goruntime.GOMAXPROCS(0), NumCPU: goruntime.NumCPU(),
		Prebuilt: c.Prebuilt, StartedAt: time.Now().UTC()}}
	if c.Account != nil {
		info := c.Account.acct.Info()
		rep.Settings.Account = &info
		rep.Settings.Costs = costsOnAccount
	} else {
		rep.Settings.Emulator = "cmd/cosmosemu -sim-charges (the bench's simulated request-charge model) -latency " + c.Latency.String()
		rep.Settings.LatencyMS = msOf(c.Latency)
		rep.Settings.Costs = costsOnEmulator
	}
	rep.Settings.Commit, rep.Settings.Dirty = gitCommit(ctx)
	for _, l := range c.Loads {
		rep.Settings.Loads = append(rep.Settings.Loads, l.Name)
		rep.Settings.LoadGapsMS = append(rep.Settings.LoadGapsMS, msOf(l.Gap))
	}
	for _, m := range modes {
		rep.Settings.Modes = append(rep.Settings.Modes, m.Name)
	}
	dir, err := os.MkdirTemp("", "durafeed-fleet-sweep-")
	if err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	defer os.RemoveAll(dir)
	emuBin, svcBin, err := binaries(ctx, c.BinDir, dir, c.Account == nil)
	if err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	rep.Cells = make([]sweepCell, len(modes)*len(c.Loads))
	var logMu sync.Mutex
	// One load after another. The modes of a quiet load run at once,
	// sharing the machine's noise; those of a busy load (a mean gap under
	// busyGap) one after another, since a busy cell's CPU (polling's most:
	// the emulator scans the container for each cross-partition query,
	// where Cosmos DB uses an index) would slow the cells beside it.
	for j, l := range c.Loads {
		var wg sync.WaitGroup
		for i, m := range modes {
			k := i*len(c.Loads) + j
			cl := cellRun{c: c, mode: m, load: l, seedStream: uint64(j), emuBin: emuBin, svcBin: svcBin,
				cert: filepath.Join(dir, fmt.Sprintf("cosmosemu-%d.pem", k)), logMu: &logMu}
			if c.Account != nil {
				cl.container = containerName(m.Name, l.Name)
			}
			wg.Go(func() { rep.Cells[k] = cl.run(ctx) })
			if l.Gap < busyGap {
				wg.Wait()
			}
		}
		wg.Wait()
		if ctx.Err() != nil {
			break
		}
	}
	for _, l := range c.Loads {
		for _, m := range modes {
			if m.Name != modePolling {
				rep.Judges = append(rep.Judges, judge(rep.Cells, l.Name, m.Name))
			}
		}
	}
	var broken, failed int
	for _, cell := range rep.Cells {
		if cell.Error != "" {
			broken++
		}
		failed += len(cell.Failures)
	}
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("sweep: %w", err)
	}
	if broken > 0 || failed > 0 {
		return rep, fmt.Errorf("sweep: %d cells did not run to their end, %d samples failed", broken, failed)
	}
	return rep, nil
}

// gitCommit returns `git rev-parse HEAD` of the working directory ("" when
// git cannot tell) and whether `git status --porcelain` lists changes.
func gitCommit(ctx context.Context) (commit string, dirty bool) {
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "", false
	}
	status, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output()
	return strings.TrimSpace(string(out)), err == nil && len(bytes.TrimSpace(status)) > 0
}

// msOf is d in milliseconds.
func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cellRun is one cell to run.
type cellRun struct {
	c              sweepConfig
	mode           sweepMode
	load           sweepLoad
	seedStream     uint64 // the PCG stream of the gaps: the load's index
	emuBin, svcBin string
	cert           string      // where the emulator writes its certificate
	logMu          *sync.Mutex // serialises the cells' writes to c.Log
	// container is the cell's container on c.Account.
	container string
}

// sweepContainers are the containers of a sweep's cells on an account.
func (c sweepConfig) containers() []string {
	var cs []string
	for _, m := range c.modes() {
		for _, l := range c.Loads {
			cs = append(cs, containerName(m.Name, l.Name))
		}
	}
	return cs
}

// sample is one measured orchestration: the client time just before the
// POST it is measured from (a start, or an event), and how it ended.
type sample struct {
	id   string
	sent time.Time
	err  error
}

// approval is an Approval started at a tick: ready is closed once it
// waits for its decision or has failed to (err, set before the close).
type approval struct {
	id    string
	ready chan struct{}
	err   error
}

// run runs the cell and returns what it measured; a cell that could not
// run to its end says why in Error. Its processes and goroutines are
// stopped when it returns.
func (r cellRun) run(ctx context.Context) (cell sweepCell) {
	cell = sweepCell{Mode: r.mode.Name, Load: r.load.Name, MeanGapMS: msOf(r.load.Gap)}
	fail := func(err error) sweepCell {
		cell.Error = err.Error()
		return cell
	}
	ps := newProcSet(ctx)
	group := r.mode.Name + " " + r.load.Name
	defer func() {
		// The services' last counters, for the run's spend, before they go.
		r.c.Spend.scrapeGroup(context.WithoutCancel(ctx), group)
		ps.stop()
	}()
	log := logWriter{mu: r.logMu, w: r.c.Log, prefix: group + " "}
	var tgt target
	if r.c.Account != nil {
		tgt = r.c.Account.target(r.container)
	} else {
		emu, err := startEmulator(ctx, ps, r.emuBin, r.cert, []string{"-sim-charges", "-latency", r.c.Latency.String()}, r.c.Env, log)
		if err != nil {
			return fail(err)
		}
		tgt = emulatorTarget(emu.address(), r.cert)
	}
	env := append(append(defaultEnv(r.c.Env), tgt.env...), "DURAFEED_LISTEN=127.0.0.1:0")
	env = append(env, r.mode.Env...)
	var svcs [3]string
	for i := range svcs {
		name := fmt.Sprintf("service-%d", i)
		p, err := ps.start(name, r.svcBin, nil, append(slices.Clone(env), "DURAFEED_REPLICA_ID="+name), log)
		if err != nil {
			return fail(err)
		}
		r.c.Spend.add(group, p)
		if err := p.await(ctx, p.ready, "readiness"); err != nil {
			return fail(err)
		}
		svcs[i] = p.address()
	}
	cl := &cellClient{svcs: svcs}
	defer func() { cell.HTTPRetries = cl.retries.Load() }()

	// The warm-up: one tick of each kind, not counted.
	wctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	var warm [2]sample
	cl.greet(wctx, 0, "warmup-greet", &warm[0])
	a := &approval{id: "warmup-approval", ready: make(chan struct{})}
	cl.startApproval(wctx, 0, a)
	cl.decide(wctx, 1, a, &warm[1])
	for _, s := range warm {
		if s.err != nil {
			return fail(fmt.Errorf("warm-up %s: %w", s.id, s.err))
		}
	}

	if err := r.settle(ctx, cl); err != nil {
		return fail(err)
	}
	before, err := cl.scrape(ctx)
	if err != nil {
		return fail(fmt.Errorf("scrape /metrics before: %w", err))
	}
	began := time.Now()
	greets, events := r.ticks(ctx, cl, began)
	cell.Ticks = len(greets)
	if err := ctx.Err(); err != nil {
		return fail(fmt.Errorf("interrupted after %d ticks: %w", cell.Ticks, err))
	}
	after, err := cl.scrape(ctx)
	if err != nil {
		return fail(fmt.Errorf("scrape /metrics after: %w", err))
	}
	ended := time.Now()

	// The completion times, from the histories.
	p, err := openStore(ctx, tgt)
	if err != nil {
		return fail(fmt.Errorf("open the store: %w", err))
	}
	defer p.Close()
	admin, _ := p.Admin()
	latencies := func(kind string, ss []*sample) []float64 {
		var ms []float64
		for _, s := range ss {
			if s.err == nil {
				var events []history.Event
				if events, s.err = admin.ReadHistory(ctx, s.id); s.err == nil {
					var done uint64
					for _, e := range events {
						if _, ok := e.Kind.(history.OrchestrationCompleted); ok {
							done = e.TimestampMS
						}
					}
					if done == 0 {
						s.err = errors.New("completed over HTTP, but no OrchestrationCompleted in its history")
					} else {
						ms = append(ms, float64(done)-float64(s.sent.UnixMicro())/1000)
						continue
					}
				}
			}
			cell.Failures = append(cell.Failures, fmt.Sprintf("%s %s: %v", kind, s.id, s.err))
		}
		return ms
	}
	cell.StartMS = latencies("start→completed", greets)
	cell.EventMS = latencies("event→completed", events)
	cell.Start, cell.Event = summarise(cell.StartMS), summarise(cell.EventMS)
	cell.Completed = cell.Start.N + cell.Event.N
	cell.MeasuredS = ended.Sub(began).Seconds()
	cell.RU, cell.Requests, cell.Throttled = after.RU-before.RU, after.Requests-before.Requests, after.Throttled-before.Throttled
	if cell.MeasuredS > 0 {
		cell.RUPerMin = cell.RU / cell.MeasuredS * 60
	}
	if cell.Completed > 0 {
		cell.RUPerOrch = cell.RU / float64(cell.Completed)
		cell.RequestsPerOrch = cell.Requests / float64(cell.Completed)
	}
	return cell
}

// busyGap is the mean gap below which a load's cells run one at a time.
const busyGap = 2 * time.Second

// maxSettle bounds the wait for an event-driven cell's leases to spread.
const maxSettle = time.Minute

// settle waits Settle, then, in an event-driven cell, until each of the
// three services owns some of the 256 dispatch slots and they own all of
// them together (the durafeed.engine.slots.owned gauges), within
// maxSettle: a cell measured while its leases still move measures the
// hand-offs, not the steady state.
func (r cellRun) settle(ctx context.Context, cl *cellClient) error {
	if !sleepUntil(ctx, time.Now().Add(r.c.Settle)) {
		return ctx.Err()
	}
	if r.mode.Name == modePolling {
		return nil
	}
	deadline := time.Now().Add(maxSettle)
	for {
		owned, err := cl.slotsOwned(ctx)
		if err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		total, each := 0, true
		for _, n := range owned {
			total += n
			each = each && n > 0
		}
		if each && total == slotCount {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("settle: the leases did not spread within %v: slots owned %v", maxSettle, owned)
		}
		if !sleepUntil(ctx, time.Now().Add(200*time.Millisecond)) {
			return ctx.Err()
		}
	}
}

// slotCount is the number of dispatch slots (package slots).
const slotCount = 256

// ticks runs the cell's ticks from began and returns, once every sample
// has ended, the Greets and the Approvals' events in tick order. At tick
// k, with r = k mod 3: a Greet starts on service r; the Approval of tick
// k-1 (started on service (k-1) mod 3) gets its decision on service
// (r+1) mod 3, another replica; an Approval starts on service r. One
// more tick after the last sends the last Approval's decision. Every
// POST is on its own goroutine, so a slow answer does not shift the
// ticks.
func (r cellRun) ticks(ctx context.Context, cl *cellClient, began time.Time) (greets, events []*sample) {
	rng := rand.New(rand.NewPCG(r.c.Seed, r.seedStream))
	var wg sync.WaitGroup
	defer wg.Wait()
	next := began
	var prev *approval
	for k := 0; ; k++ {
		if k > 0 {
			f := jitterLow + (jitterHigh-jitterLow)*rng.Float64()
			next = next.Add(time.Duration(f * float64(r.load.Gap)))
		}
		last := k >= r.c.ticksFor(r.load) || (k >= minTicks && next.Sub(began) >= r.c.Duration)
		if !sleepUntil(ctx, next) {
			return greets, events
		}
		svc := k % 3
		if !last {
			g := &sample{id: fmt.Sprintf("greet-%03d", k)}
			greets = append(greets, g)
			wg.Go(func() {
				sctx, cancel := context.WithTimeout(ctx, sampleTimeout)
				defer cancel()
				cl.greet(sctx, svc, g.id, g)
			})
		}
		if prev != nil {
			a, ev := prev, &sample{id: prev.id}
			events = append(events, ev)
			wg.Go(func() {
				sctx, cancel := context.WithTimeout(ctx, sampleTimeout)
				defer cancel()
				cl.decide(sctx, (svc+1)%3, a, ev)
			})
		}
		if last {
			return greets, events
		}
		a := &approval{id: fmt.Sprintf("approval-%03d", k), ready: make(chan struct{})}
		prev = a
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, sampleTimeout)
			defer cancel()
			cl.startApproval(sctx, svc, a)
		})
	}
}

// sleepUntil waits until t; false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// cellClient talks to a cell's three services, each addressed by its
// index.
type cellClient struct {
	svcs    [3]string
	retries atomic.Int64
}

// do sends a request to service i, resending it there after a transport
// error or a 5xx until ctx ends (see request).
func (cl *cellClient) do(ctx context.Context, i int, method, path, body string, header map[string]string) (int, map[string]any, error) {
	return request(ctx, func() string { return cl.svcs[i] }, &cl.retries, method, path, body, header)
}

// greet starts a Greet named id on service i and waits for its end; s
// gets the client time just before the start's POST and the outcome.
func (cl *cellClient) greet(ctx context.Context, i int, id string, s *sample) {
	s.id = id
	s.sent = time.Now()
	status, body, err := cl.do(ctx, i, "POST", "/v1/instances", `{"name":"Greet","instanceId":"`+id+`","input":{"name":"`+id+`"}}`,
		map[string]string{"Idempotency-Key": "start-" + id})
	switch {
	case err != nil:
		s.err = fmt.Errorf("start: %w", err)
	case status != http.StatusCreated:
		s.err = fmt.Errorf("start: %d %v", status, body)
	default:
		s.err = cl.awaitEnd(ctx, i, id)
	}
}

// startApproval starts Approval a on service i and closes a.ready once
// its custom status says it waits for its decision (a.err set when it
// cannot). The status is read at a delay doubling from 20 ms to 500 ms,
// as the runtime's own waits read.
func (cl *cellClient) startApproval(ctx context.Context, i int, a *approval) {
	defer close(a.ready)
	status, body, err := cl.do(ctx, i, "POST", "/v1/instances", `{"name":"Approval","instanceId":"`+a.id+`","input":{"item":"`+a.id+`"}}`,
		map[string]string{"Idempotency-Key": "start-" + a.id})
	switch {
	case err != nil:
		a.err = fmt.Errorf("start: %w", err)
		return
	case status != http.StatusCreated:
		a.err = fmt.Errorf("start: %d %v", status, body)
		return
	}
	for delay := 20 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		status, body, err = cl.do(ctx, i, "GET", "/v1/instances/"+a.id, "", nil)
		switch {
		case err != nil:
			a.err = fmt.Errorf("wait for its wait: %w", err)
			return
		case status == http.StatusOK && body["customStatus"] == waitingStatus:
			return
		case status == http.StatusOK && body["state"] != "Running":
			a.err = fmt.Errorf("ended before its decision: %v", body)
			return
		}
		if !sleepUntil(ctx, time.Now().Add(delay)) {
			a.err = fmt.Errorf("wait for its wait: %w", ctx.Err())
			return
		}
	}
}

// decide sends Approval a's decision through service i once a waits for
// it, and waits for a's end; s gets the client time just before the
// event's POST and the outcome.
func (cl *cellClient) decide(ctx context.Context, i int, a *approval, s *sample) {
	s.id = a.id
	select {
	case <-a.ready:
	case <-ctx.Done():
		s.err = fmt.Errorf("the Approval did not wait for its decision: %w", ctx.Err())
		return
	}
	if a.err != nil {
		s.err = a.err
		return
	}
	s.sent = time.Now()
	status, body, err := cl.do(ctx, i, "POST", "/v1/instances/"+a.id+"/events/decision", `{"approved":true,"by":"fleet"}`,
		map[string]string{"Idempotency-Key": "decision-" + a.id})
	switch {
	case err != nil:
		s.err = fmt.Errorf("event: %w", err)
	case status != http.StatusAccepted:
		s.err = fmt.Errorf("event: %d %v", status, body)
	default:
		s.err = cl.awaitEnd(ctx, i, a.id)
	}
}

// awaitEnd waits, 20 s per request, for instance id to end as service i
// reports it: nil when it completed.
func (cl *cellClient) awaitEnd(ctx context.Context, i int, id string) error {
	for {
		status, body, err := cl.do(ctx, i, "GET", "/v1/instances/"+id+"?wait=20s", "", nil)
		switch {
		case err != nil:
			return fmt.Errorf("wait for its end: %w", err)
		case status == http.StatusOK && body["state"] == "Completed":
			return nil
		case status == http.StatusOK && body["state"] == "Running":
			continue
		case status == http.StatusOK:
			return fmt.Errorf("ended %v: %v", body["state"], body["failure"])
		}
		// Not found yet, or refused: again, not at once.
		if !sleepUntil(ctx, time.Now().Add(50*time.Millisecond)) {
			return fmt.Errorf("wait for its end: %w", ctx.Err())
		}
	}
}

// costs are a service's request counters: request units, requests and
// 429 answers from Cosmos DB, every operation and status summed. The
// request units are the sum of the answers' x-ms-request-charge headers
// (package store's meter): cosmosemu's model on an emulator, the
// account's own charges on an account.
type costs struct{ RU, Requests, Throttled float64 }

// add is c + d.
func (c costs) add(d costs) costs {
	return costs{RU: c.RU + d.RU, Requests: c.Requests + d.Requests, Throttled: c.Throttled + d.Throttled}
}

// readCosts reads the counters of the service at addr; a service without
// a request-unit nor a request counter is refused (a 429 counter without
// samples is 0).
func readCosts(ctx context.Context, addr string) (costs, error) {
	m, err := readMetrics(ctx, addr, promRequestUnits, promRequests, promThrottles)
	if err != nil {
		return costs{}, err
	}
	if _, ok := m[promRequestUnits]; !ok {
		if _, ok := m[promRequests]; !ok {
			return costs{}, fmt.Errorf("metrics of %s: no %s nor %s", addr, promRequestUnits, promRequests)
		}
	}
	return costs{RU: m[promRequestUnits], Requests: m[promRequests], Throttled: m[promThrottles]}, nil
}

// scrape reads the counters of the three services and sums them.
func (cl *cellClient) scrape(ctx context.Context) (costs, error) {
	var sum costs
	for _, addr := range cl.svcs {
		c, err := readCosts(ctx, addr)
		if err != nil {
			return costs{}, err
		}
		sum = sum.add(c)
	}
	return sum, nil
}

// slotsOwned reads each service's durafeed.engine.slots.owned gauge.
func (cl *cellClient) slotsOwned(ctx context.Context) ([3]int, error) {
	var owned [3]int
	for i, addr := range cl.svcs {
		m, err := readMetrics(ctx, addr, promSlotsOwned)
		if err != nil {
			return owned, err
		}
		owned[i] = int(m[promSlotsOwned])
	}
	return owned, nil
}

// readMetrics reads the service at addr's /metrics and sums the samples
// of each named metric (sumMetrics).
func readMetrics(ctx context.Context, addr string, names ...string) (map[string]float64, error) {
	url := "http://" + addr + "/metrics"
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return sumMetrics(resp.Body, names...)
}

// sumMetrics sums, per name, the samples of the named metrics in
// Prometheus text r (every label set); a name without samples is absent
// from the result.
func sumMetrics(r io.Reader, names ...string) (map[string]float64, error) {
	sums := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, name := range names {
			rest, ok := strings.CutPrefix(line, name)
			if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
				continue
			}
			if rest[0] == '{' {
				end := strings.LastIndexByte(rest, '}')
				if end < 0 {
					return nil, fmt.Errorf("metrics: bad line %q", line)
				}
				rest = rest[end+1:]
			}
			f := strings.Fields(rest)
			if len(f) == 0 {
				return nil, fmt.Errorf("metrics: bad line %q", line)
			}
			v, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				return nil, fmt.Errorf("metrics: bad line %q: %w", line, err)
			}
			sums[name] += v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return sums, nil
}

// defaultEnv is env without the variables that configure the service,
// its telemetry or an Entra ID credential (DURAFEED_*, COSMOS_*, OTEL_*,
// and AZURE_*, IDENTITY_*, MSI_*, IMDS_ENDPOINT: credentialVar), so that
// the services run with their defaults whatever the caller's
// environment; the store's variables are added after it (storeEnv on an
// emulator, accountServiceEnv on an account, which passes the
// credential's variables on with Entra ID).
func defaultEnv(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		for _, p := range []string{"DURAFEED_", "COSMOS_", "OTEL_"} {
			if strings.HasPrefix(kv, p) {
				return true
			}
		}
		return credentialVar(kv)
	})
}

// logWriter writes each Write (a process's log line) to w after prefix,
// in one Write, one at a time among the writers that share mu: the
// cells' processes log to one writer at once.
type logWriter struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string
}

// Write writes prefix and b to w.
func (l logWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(append([]byte(l.prefix), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// write prints the report: a table of the cells, then per load the
// ratios to polling and the judge's lines.
func (r *sweepReport) write(w io.Writer) {
	s := r.Settings
	ticks := "a minute's worth of ticks per cell (12 to 300)"
	if s.Samples > 0 {
		ticks = fmt.Sprintf("%d ticks per cell", s.Samples)
	}
	if s.Account != nil {
		fmt.Fprintf(w, "durafeed fleet sweep: per cell a container of the run's database and 3 durafeed-service processes on\n  %s\n", s.Account)
	} else {
		fmt.Fprintf(w, "durafeed fleet sweep: per cell cosmosemu (%.0f ms injected per request) and 3 durafeed-service processes\n", s.LatencyMS)
	}
	fmt.Fprintf(w, "  (service defaults); one load after another, the modes of a load at once (one at a time below a %v gap),\n", busyGap)
	fmt.Fprintf(w, "  measured after %.0f s of settling\n", s.SettleS)
	fmt.Fprintf(w, "  %s or %v, at least %d; gaps jittered uniformly in [%g, %g]× the mean; GOMAXPROCS %d, %s\n",
		ticks, time.Duration(s.DurationS*float64(time.Second)), minTicks, s.JitterLow, s.JitterHigh, s.GOMAXPROCS, s.GoVersion)
	fmt.Fprintf(w, "  start→completed: a Greet's start POST to its OrchestrationCompleted; event→completed: an Approval's\n")
	fmt.Fprintf(w, "  decision POST (on another replica) to its OrchestrationCompleted; ms, history timestamps (ms precision)\n")
	if s.Costs != "" {
		fmt.Fprintf(w, "  RU: %s\n", s.Costs)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tload\tticks\tstart n\tp50\tp99\tmax\tevent n\tp50\tp99\tmax\tRU/min\tRU/orch\treq/orch\t429s\tfailed\t")
	f1 := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	for _, c := range r.Cells {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%d\t\n", c.Mode, c.Load, c.Ticks,
			c.Start.N, f1(c.Start.P50MS), f1(c.Start.P99MS), f1(c.Start.MaxMS),
			c.Event.N, f1(c.Event.P50MS), f1(c.Event.P99MS), f1(c.Event.MaxMS),
			f1(c.RUPerMin), f1(c.RUPerOrch), f1(c.RequestsPerOrch), c.Throttled, len(c.Failures))
	}
	_ = tw.Flush()
	for _, c := range r.Cells {
		if c.Error != "" {
			fmt.Fprintf(w, "  %s %s did not run to its end: %s\n", c.Mode, c.Load, c.Error)
		}
		for i, f := range c.Failures {
			if i == 10 {
				fmt.Fprintf(w, "  %s %s: … %d more failures\n", c.Mode, c.Load, len(c.Failures)-10)
				break
			}
			fmt.Fprintf(w, "  %s %s FAILED %s\n", c.Mode, c.Load, f)
		}
	}
	fmt.Fprintf(w, "\nratios to polling; targets: p50 ≤ %g×, p99 ≤ %g× (both measures), RU/orch ≤ polling's\n", targetP50, targetP99)
	ratio := func(p *float64) string {
		if p == nil {
			return "—"
		}
		return strconv.FormatFloat(*p, 'f', 3, 64)
	}
	verdict := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "NO"
	}
	for _, j := range r.Judges {
		fmt.Fprintf(w, "  %-6s %s/%s: start p50 %s p99 %s, event p50 %s p99 %s, RU/orch %s\n", j.Load, j.Mode, j.Against,
			ratio(j.StartP50), ratio(j.StartP99), ratio(j.EventP50), ratio(j.EventP99), ratio(j.RUPerOrc))
		fmt.Fprintf(w, "  %-6s judge %s: p50 %s, p99 %s, RU/orch %s → %s\n", j.Load, j.Mode,
			verdict(j.P50), verdict(j.P99), verdict(j.RU), verdict(j.Pass))
	}
	if r.Spend != nil {
		r.Spend.write(w)
	}
}

// Where the request units come from, for the reports.
const (
	costsOnEmulator = "the services' /metrics (durafeed.cosmos.request_units: each answer's x-ms-request-charge), cosmosemu's simulated charge model"
	costsOnAccount  = "the services' /metrics (durafeed.cosmos.request_units: each answer's x-ms-request-charge), the account's own charges"
)

// writeJSON writes the report as indented JSON to the file path.
func (r *sweepReport) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("sweep report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("sweep report: %w", err)
	}
	return nil
}

// writePNG draws the report as a PNG: two panels side by side,
// start→completed on the left and event→completed on the right, each
// with p50 (solid) and p99 (dashed) in ms against the load's mean gap,
// one colour per mode, log axes. Cells without samples of a measure are
// left out of its panel; it fails when no cell has any.
func (r *sweepReport) writePNG(w io.Writer) error {
	measures := []struct {
		title string
		of    func(sweepCell) latencySummary
	}{
		{"start → completed (Greet)", func(c sweepCell) latencySummary { return c.Start }},
		{"event on another replica → completed (Approval)", func(c sweepCell) latencySummary { return c.Event }},
	}
	var loads plot.ConstantTicks // the loads, named as -sweep-loads named them
	for i, gap := range r.Settings.LoadGapsMS {
		loads = append(loads, plot.Tick{Value: gap / 1000, Label: r.Settings.Loads[i]})
	}
	row := make([]*plot.Plot, len(measures))
	drawn := false
	for i, m := range measures {
		p := plot.New()
		p.Title.Text = m.title
		p.X.Label.Text = "load: mean gap between ticks (log scale)"
		p.Y.Label.Text = "ms (p50 solid, p99 dashed)"
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = loads, plot.LogTicks{Prec: -1}
		p.Legend.Top = true
		for k, mode := range r.Settings.Modes {
			var p50, p99 plotter.XYs
			for _, c := range r.Cells {
				if s := m.of(c); c.Mode == mode && s.N > 0 {
					p50 = append(p50, plotter.XY{X: c.MeanGapMS / 1000, Y: chart.Positive(s.P50MS)})
					p99 = append(p99, plotter.XY{X: c.MeanGapMS / 1000, Y: chart.Positive(s.P99MS)})
				}
			}
			if len(p50) == 0 {
				continue
			}
			byX := func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) }
			slices.SortFunc(p50, byX)
			slices.SortFunc(p99, byX)
			c := chart.ModeColor(k)
			if err := chart.AddLine(p, mode+" p50", p50, c, false); err != nil {
				return err
			}
			if err := chart.AddLine(p, mode+" p99", p99, c, true); err != nil {
				return err
			}
			drawn = true
		}
		// Room above the highest line for the legend (a decade).
		p.Y.Max *= 10
		chart.Widen(&p.X)
		chart.Widen(&p.Y)
		row[i] = p
	}
	if !drawn {
		return errors.New("sweep picture: no cell has a sample")
	}
	img := vgimg.New(24*vg.Centimeter, 12*vg.Centimeter)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(row), PadX: vg.Centimeter, PadY: vg.Centimeter,
		PadTop: vg.Centimeter / 2, PadBottom: vg.Centimeter / 2, PadLeft: vg.Centimeter / 2, PadRight: vg.Centimeter / 2}
	canvases := plot.Align([][]*plot.Plot{row}, tiles, dc)
	for j, p := range row {
		p.Draw(canvases[0][j])
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		return fmt.Errorf("sweep picture: %w", err)
	}
	return nil
}

// writePNGFile writes the picture (writePNG) to the file path.
func (r *sweepReport) writePNGFile(path string) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("sweep picture: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("sweep picture: %w", cerr)
		}
	}()
	return r.writePNG(f)
}
