package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/internal/clock"
)

// SweepLoad is one load of the sweep phase. Items arrive open loop (each
// at its time, whether or not the earlier ones were fetched) from a
// client in another provider instance: with exponentially distributed
// gaps of mean MeanGap (a Poisson stream), or, with Burst > 0, Burst items
// at once after Quiet of silence.
type SweepLoad struct {
	// Name labels the load in tables, JSON and the picture.
	Name string `json:"name"`
	// MeanGap is the mean gap between arrivals (Burst zero).
	MeanGap time.Duration `json:"mean_gap"`
	// Items is how many items arrive (the samples of the load).
	Items int `json:"items"`
	// Burst, when positive, is the size of one burst sent after Quiet.
	Burst int           `json:"burst,omitempty"`
	Quiet time.Duration `json:"quiet,omitempty"`
}

// DefaultSweepLoads are the loads of the sweep: Poisson streams with mean
// gaps of 10 ms, 100 ms, 1 s, 10 s and 60 s, and a burst of 100 after a
// minute of quiet. Item counts keep every load to a few minutes or less
// except the slowest, whose ten items take ten minutes on average.
func DefaultSweepLoads() []SweepLoad {
	return []SweepLoad{
		{Name: "10ms", MeanGap: 10 * time.Millisecond, Items: 2000},
		{Name: "100ms", MeanGap: 100 * time.Millisecond, Items: 500},
		{Name: "1s", MeanGap: time.Second, Items: 100},
		{Name: "10s", MeanGap: 10 * time.Second, Items: 20},
		{Name: "60s", MeanGap: time.Minute, Items: 10},
		{Name: "burst", Burst: 100, Items: 100, Quiet: time.Minute},
	}
}

// fast reports a load whose dispatch keeps a CPU busy (a fast stream, or
// a burst): its figures are measured one scenario at a time.
func (l SweepLoad) fast() bool { return l.Burst > 0 || l.MeanGap < time.Second }

// SweepScenario is one load in one mode.
type SweepScenario struct {
	Mode Mode
	Load SweepLoad
	// Dispatchers is the number of orchestration fetch loops of the
	// replica (default 4, the runtime's default dispatcher count).
	Dispatchers int
	// Fetch says how the loops call fetch.
	Fetch FetchLoop
	// SampleTimeout bounds the wait for one item (default 30 s) after the
	// last arrival; items not fetched by then are counted as lost.
	SampleTimeout time.Duration
	// Tail is how long after the last arrival the cost window closes
	// (default 5 s, or later once every item is fetched): both modes are
	// charged over windows of the same length, the arrivals' span (the
	// same for a seed) plus the tail, whatever their latency.
	Tail time.Duration
	// Settle is the pause between the replica's first fetches and the
	// first arrival (default 2 s): the replica joins and goes idle first,
	// as a deployed one would be.
	Settle time.Duration
	// Seed seeds the gaps: every mode sees the same arrival times.
	Seed uint64
	// Local sends the items through the fetching replica's own provider
	// instead of a client's, so every write signals its fetch at once:
	// what is left of a wake is the fetch pipeline itself (BurstFloor).
	Local bool
}

// SweepResult is what one SweepScenario measured.
type SweepResult struct {
	Mode              Mode    `json:"mode"`
	Load              string  `json:"load"`
	MeanGapMS         float64 `json:"mean_gap_ms,omitempty"`
	InjectedLatencyMS float64 `json:"injected_latency_ms"`
	// Summary is the wake latency (enqueue return → fetch return) of the
	// items fetched.
	Summary
	Lost        int   `json:"lost"`
	FetchErrors int64 `json:"fetch_errors"`
	AckErrors   int64 `json:"ack_errors"`
	// WindowS is the cost window: from the start of the arrivals to the
	// later of the last arrival plus SweepScenario.Tail and the last fetch
	// (or the timeout).
	WindowS float64 `json:"window_s"`
	// RequestsPerMin and RUPerMin count every request on the scenario's
	// container in the window (the client's writes, the fetches and acks,
	// the feed, the leases), per minute; RUPerWake divides the window's RU
	// by the items fetched.
	RequestsPerMin float64 `json:"requests_per_min"`
	RUPerMin       float64 `json:"ru_per_min"`
	RUPerWake      float64 `json:"ru_per_wake"`
	// ByOperation splits the window's cost by operation.
	ByOperation map[string]OpRate `json:"by_operation,omitempty"`
}

// RunSweep runs one sweep scenario in a container of its own: a replica
// with Dispatchers fetch loops, and a client provider that sends the
// load's items.
func (e *Env) RunSweep(ctx context.Context, s SweepScenario) (res SweepResult, err error) {
	s.Fetch = s.Fetch.withDefaults()
	if s.Dispatchers <= 0 {
		s.Dispatchers = 4
	}
	if s.SampleTimeout <= 0 {
		s.SampleTimeout = 30 * time.Second
	}
	if s.Tail <= 0 {
		s.Tail = 5 * time.Second
	}
	if s.Settle <= 0 {
		s.Settle = 2 * time.Second
	}
	res = SweepResult{Mode: s.Mode, Load: s.Load.Name, MeanGapMS: ms(s.Load.MeanGap), InjectedLatencyMS: ms(e.Latency())}
	if s.Load.Items <= 0 || (s.Load.Burst <= 0 && s.Load.MeanGap <= 0) {
		return res, fmt.Errorf("bench: sweep load %q needs Items and a MeanGap or a Burst", s.Load.Name)
	}
	container, drop, err := e.newContainer(ctx, fmt.Sprintf("sweep-%s-%s", s.Load.Name, s.Mode))
	if err != nil {
		return res, err
	}
	defer drop()
	fetcher, err := e.openProvider(ctx, container, s.Mode)
	if err != nil {
		return res, err
	}
	defer func() { _ = fetcher.Close() }()
	client := fetcher
	if !s.Local {
		c, err := e.openProvider(ctx, container, clientMode(s.Mode))
		if err != nil {
			return res, err
		}
		defer func() { _ = c.Close() }()
		client = c
	}

	var (
		mu      sync.Mutex
		sent    = map[string]time.Time{}
		fetched = map[string]time.Time{}
		allIn   = make(chan struct{})
		total   = s.Load.Items
	)
	got := func(item *durable.OrchestrationItem, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if _, dup := fetched[item.Instance]; dup {
			return
		}
		fetched[item.Instance] = at
		if len(fetched) == total {
			close(allIn)
		}
	}
	loopCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var fetchErrs, ackErrs atomic.Int64
	for range s.Dispatchers {
		wg.Go(func() {
			runFetchLoop(loopCtx, fetcher, s.Mode, s.Fetch, &fetchErrs, func(item *durable.OrchestrationItem, at time.Time) {
				got(item, at)
				if err := ackTurn(context.WithoutCancel(loopCtx), fetcher, item); err != nil {
					ackErrs.Add(1)
				}
			})
		})
	}
	defer func() {
		stop()
		wg.Wait()
		res.FetchErrors, res.AckErrors = fetchErrs.Load(), ackErrs.Load()
	}()
	if !clock.Sleep(ctx, s.Settle) {
		return res, ctx.Err()
	}

	rng := rand.New(rand.NewPCG(s.Seed, 0x7377656570))
	u0, t0 := e.usage(container), time.Now()
	send := func(i int) error {
		inst := fmt.Sprintf("%s-%05d", container, i)
		item := durable.StartOrchestration{Instance: inst, Orchestration: "bench", Input: "{}", ExecutionID: 1}
		if err := client.EnqueueForOrchestrator(ctx, item, 0); err != nil {
			return fmt.Errorf("bench: enqueue: %w", err)
		}
		mu.Lock()
		sent[inst] = time.Now()
		mu.Unlock()
		return nil
	}
	if s.Load.Burst > 0 {
		if !clock.Sleep(ctx, s.Load.Quiet) {
			return res, ctx.Err()
		}
		// The burst's items are sent at once, each on its own goroutine
		// (as many callers would), and timed from their own return.
		var sg sync.WaitGroup
		var sendErr atomic.Value
		for i := range s.Load.Items {
			sg.Go(func() {
				if err := send(i); err != nil {
					sendErr.CompareAndSwap(nil, err)
				}
			})
		}
		sg.Wait()
		if err, _ := sendErr.Load().(error); err != nil {
			return res, err
		}
	} else {
		// Arrival times are fixed in advance from the start, so a slow
		// enqueue delays nothing after it.
		at := t0
		for i := range s.Load.Items {
			at = at.Add(time.Duration(rng.ExpFloat64() * float64(s.Load.MeanGap)))
			if !clock.Sleep(ctx, time.Until(at)) {
				return res, ctx.Err()
			}
			if err := send(i); err != nil {
				return res, err
			}
		}
	}
	timeout := time.NewTimer(s.SampleTimeout)
	select {
	case <-allIn:
	case <-timeout.C:
	case <-ctx.Done():
		timeout.Stop()
		return res, ctx.Err()
	}
	timeout.Stop()
	mu.Lock()
	var last time.Time
	for _, at := range sent {
		if at.After(last) {
			last = at
		}
	}
	mu.Unlock()
	if !clock.Sleep(ctx, time.Until(last.Add(s.Tail))) {
		return res, ctx.Err()
	}
	window := time.Since(t0)
	u := e.usage(container).sub(u0)

	mu.Lock()
	samples := make([]time.Duration, 0, len(sent))
	for inst, s := range sent {
		if f, ok := fetched[inst]; ok {
			samples = append(samples, f.Sub(s))
		}
	}
	res.Lost = len(sent) - len(samples)
	mu.Unlock()
	res.Summary = Summarize(samples)
	res.WindowS = round2(window.Seconds())
	if mins := window.Minutes(); mins > 0 {
		var reqs int64
		res.ByOperation = map[string]OpRate{}
		for op, o := range u.ByOperation {
			reqs += o.Requests
			res.ByOperation[op] = OpRate{RequestsPerMin: round2(float64(o.Requests) / mins), RUPerMin: round2(o.RequestCharge / mins)}
		}
		res.RequestsPerMin = round2(float64(reqs) / mins)
		res.RUPerMin = round2(u.RequestCharge / mins)
	}
	if res.N > 0 {
		res.RUPerWake = round2(u.RequestCharge / float64(res.N))
	}
	return res, nil
}

// FetchFloor measures durafeed's own floor of a wake: the median
// duration of an event-driven fetch of an item this replica already knows
// is there (enqueued through its own provider, so signalled locally),
// which is the fetch's own round trips once the write is visible. n
// samples. It is measured by the code under test, so the report prints it
// as information and judges against SweepFloorRoundTrips round trips
// instead.
func (e *Env) FetchFloor(ctx context.Context, n int) (time.Duration, error) {
	container, drop, err := e.newContainer(ctx, "floor")
	if err != nil {
		return 0, err
	}
	defer drop()
	p, err := e.openProvider(ctx, container, ModeEventDriven)
	if err != nil {
		return 0, err
	}
	defer func() { _ = p.Close() }()
	// Join first (the first fetch joins the lease group).
	if _, err := p.FetchOrchestrationItem(ctx, 30*time.Second, time.Second, nil); err != nil {
		return 0, err
	}
	var ds []time.Duration
	for i := 0; len(ds) < n && i < 4*n; i++ {
		inst := fmt.Sprintf("%s-%04d", container, i)
		if err := p.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: inst, Orchestration: "bench", Input: "{}", ExecutionID: 1}, 0); err != nil {
			return 0, err
		}
		start := time.Now()
		item, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 5*time.Second, nil)
		d := time.Since(start)
		if err != nil {
			return 0, err
		}
		if item == nil {
			continue
		}
		ds = append(ds, d)
		if err := ackTurn(ctx, p, item); err != nil {
			return 0, err
		}
	}
	if len(ds) == 0 {
		return 0, fmt.Errorf("bench: no fetch for the floor")
	}
	slices.Sort(ds)
	return ds[len(ds)/2], nil
}

// BurstFloor measures the physical floor of a burst's wakes: the median
// wake of a burst of n items that the event-driven replica writes itself,
// so that every item is signalled to its fetch loops the moment it is
// written. Nothing is left to wake; each item waits only for the fetch
// round trips of those ahead of it on the replica's dispatchers, which no
// wake mechanism can shorten. Like FetchFloor it is measured by the code
// under test (in two published runs it lay above the burst's own p50) and
// is information only.
func (e *Env) BurstFloor(ctx context.Context, n, dispatchers int, fetch FetchLoop, seed uint64) (time.Duration, error) {
	r, err := e.RunSweep(ctx, SweepScenario{Mode: ModeEventDriven, Load: SweepLoad{Name: "burst-floor", Burst: n, Items: n},
		Dispatchers: dispatchers, Fetch: fetch, Seed: seed, Local: true, Tail: time.Second})
	if err != nil {
		return 0, err
	}
	if r.N == 0 || r.Lost > 0 {
		return 0, fmt.Errorf("bench: burst floor fetched %d of %d items", r.N, n)
	}
	return time.Duration(r.P50MS * float64(time.Millisecond)), nil
}

// sweepCriteria are the sweep's targets for one load, at one injected
// latency: event-driven against polling.
type sweepCriteria struct {
	p50, p99, cost bool
	p50Want        string
}

// judgeSweep applies the sweep targets: the event-driven p50 at least 10×
// lower than polling's (20× where polling's is above 100 ms), or within
// 2× of the floor where 10× would fall below it; the p99 at most ¼ of
// polling's; RU per minute at most polling's. floorMS is sweepFloorMS (a
// bound from the bare round trip, not a measurement of durafeed). Every
// criterion fails when either side has no samples or event-driven lost
// an item.
func judgeSweep(ed, poll SweepResult, floorMS float64) sweepCriteria {
	var c sweepCriteria
	factor := 10.0
	if poll.P50MS > 100 {
		factor = 20
	}
	limit := poll.P50MS / factor
	c.p50Want = fmt.Sprintf("≤ %.2f ms (%g× lower)", limit, factor)
	if limit < floorMS {
		limit = 2 * floorMS
		c.p50Want = fmt.Sprintf("≤ %.2f ms (2× the floor)", limit)
	}
	ok := ed.N > 0 && poll.N > 0 && ed.Lost == 0
	c.p50 = ok && ed.P50MS <= limit
	c.p99 = ok && ed.P99MS <= poll.P99MS/4
	c.cost = ok && ed.RUPerMin <= poll.RUPerMin
	return c
}

// sweepX is a load's position on the picture's x axis: its mean gap in
// seconds (a burst has none and is left out).
func sweepX(r SweepResult) (float64, bool) {
	if r.MeanGapMS <= 0 {
		return 0, false
	}
	return r.MeanGapMS / 1000, true
}

// SelectSweep returns the loads of DefaultSweepLoads named in names ("all"
// for every one), in their order, with their item counts (and a burst's
// quiet) multiplied by scale (at least three items each). It fails on an
// unknown name or a scale that is not positive.
func SelectSweep(names []string, scale float64) ([]SweepLoad, error) {
	if scale <= 0 {
		return nil, fmt.Errorf("bench: sweep scale %g must be positive", scale)
	}
	all := DefaultSweepLoads()
	want := map[string]bool{}
	for _, n := range names {
		if n == "all" {
			for _, l := range all {
				want[l.Name] = true
			}
			continue
		}
		if !slices.ContainsFunc(all, func(l SweepLoad) bool { return l.Name == n }) {
			return nil, fmt.Errorf("bench: unknown sweep load %q", n)
		}
		want[n] = true
	}
	var out []SweepLoad
	for _, l := range all {
		if !want[l.Name] {
			continue
		}
		if l.Burst > 0 {
			l.Quiet = time.Duration(float64(l.Quiet) * scale)
		} else {
			l.Items = max(3, int(math.Round(float64(l.Items)*scale)))
		}
		out = append(out, l)
	}
	return out, nil
}
