package changefeed

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/internal/epk"
	"go.uber.org/zap"
)

// Range is a half-open interval [Min, Max) of effective partition keys
// (EPKs), ordered as the service orders them. It is an alias, so code
// outside this module can build ranges and implement Lease. Use
// FullRange for a whole container.
type Range = epk.Range

// FullRange is the whole EPK space: a lease over it reads every document
// of the container.
var FullRange = Range{Min: epk.MinInclusive, Max: epk.MaxExclusive}

// Batch is one page of changes from one lease, handed to the Handler.
type Batch struct {
	// LeaseID is the ID of the lease the page was read for.
	LeaseID string
	// Range is the sub-range of the lease's range the page was read from
	// (a lease spanning several physical partitions reads them in turn).
	Range Range
	// Documents are the changed documents, latest version of each, in the
	// order of the service's log sequence numbers (LSN): the changes to one
	// partition key always arrive in the order they were made. Each
	// carries the system properties _lsn, _ts, _etag.
	Documents []json.RawMessage
	// Continuation is what will be checkpointed once the handler succeeds:
	// the lease's position just after this page.
	Continuation string
}

// Handler processes one batch. Returning nil acknowledges it: its
// continuation is then checkpointed. Returning an error means "retry this
// batch": it is offered again, unchanged, after a backoff, for as long as
// the lease is held; nothing after it is read or checkpointed meanwhile.
// Delivery is at least once: after a lease changes hands, the batches since
// its last checkpoint are delivered again. ctx is cancelled when the lease
// is lost or the processor stops. Calls for one lease are sequential;
// different leases are handled concurrently. A panic is not recovered.
type Handler func(ctx context.Context, b Batch) error

// ErrAlreadyRunning is returned by Run when the processor was already run.
var ErrAlreadyRunning = errors.New("changefeed: processor already run")

// Processor reads the change feed of a container for the leases a
// LeaseSource gives it: one reader goroutine per lease, each polling its
// range adaptively, handing pages to the Handler and checkpointing after
// success. Create it with New; it runs once (Run), and stops on Stop or when
// Run's context ends.
type Processor struct {
	container *azcosmos.ContainerClient
	leases    LeaseSource
	handler   Handler
	opts      Options
	log       *zap.Logger

	rngMu sync.Mutex
	rng   *rand.Rand

	partMu sync.Mutex
	parts  map[epk.Range]*partState // by physical partition

	// The container's physical partitions as the SDK's routing map last
	// gave them, and when (see physicalRanges).
	physMu sync.Mutex
	phys   []epk.Range
	physAt time.Time

	// The container's partition key definition, for shared reads (see
	// keys): known, given up on, or last tried at.
	keyMu    sync.Mutex
	key      *keyDef
	keyOff   bool
	keyTried time.Time

	mu      sync.Mutex
	readers map[*reader]struct{}
	latest  map[string]*reader // by lease ID: the most recent reader

	// lastActive is when a reader last found changes or Wake was called
	// (clock unix ns; 0: never): the start of the warm hold.
	lastActive atomic.Int64

	started  atomic.Bool
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}

	// budgetMu guards emptyCharge, the running mean of the charges of
	// reads that found nothing (0: none measured yet).
	budgetMu    sync.Mutex
	emptyCharge float64
	// changes is the count of changes delivered, decayed to changesAt
	// (Options.ReadsPerChange).
	changes   float64
	changesAt time.Time
	// idlePeriod is the budget period an idle reader last took (ns).
	idlePeriod atomic.Int64

	stats counters
	// epoch is when New ran: the origin of the readers' phases.
	epoch time.Time
}

// New returns a Processor reading container's change feed for the leases
// that leases hands out, calling handler for every page of changes. It
// validates opts and applies their defaults; it performs no I/O.
func New(container *azcosmos.ContainerClient, leases LeaseSource, handler Handler, opts Options) (*Processor, error) {
	if container == nil {
		return nil, errors.New("changefeed: nil container")
	}
	if leases == nil {
		return nil, errors.New("changefeed: nil lease source")
	}
	if handler == nil {
		return nil, errors.New("changefeed: nil handler")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	seed := o.JitterSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	return &Processor{
		container: container,
		leases:    leases,
		handler:   handler,
		opts:      o,
		log:       o.Logger,
		rng:       rand.New(rand.NewPCG(seed, 0x6368616e67656665)),
		readers:   map[*reader]struct{}{},
		parts:     map[epk.Range]*partState{},
		latest:    map[string]*reader{},
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		epoch:     o.Clock.Now(),
	}, nil
}

// Run starts a reader for every lease the LeaseSource delivers and blocks
// until ctx is done or Stop is called; it then stops every reader and
// returns once all of them have returned. Either way of stopping is clean
// and returns nil; Run fails only with ErrAlreadyRunning when called twice.
// Leases are not released: that is the LeaseSource's business.
func (p *Processor) Run(ctx context.Context) error {
	if !p.started.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer close(p.done)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	acquired := p.leases.Acquired()
	p.log.Debug("changefeed: processor running")
loop:
	for {
		select {
		case <-runCtx.Done():
			break loop
		case <-p.stop:
			break loop
		case l, ok := <-acquired:
			if !ok {
				acquired = nil
				continue
			}
			if l == nil {
				continue
			}
			select {
			case <-p.stop:
				break loop
			default:
			}
			p.startReader(runCtx, &wg, l)
		}
	}
	cancel()
	wg.Wait()
	p.log.Debug("changefeed: processor stopped")
	return nil
}

// Stop stops every reader and waits until Run has returned, or until ctx is
// done (then it returns ctx's error and Run finishes on its own). A batch
// the handler already acknowledged is still checkpointed (one attempt),
// including one whose checkpoint CheckpointInterval had left pending;
// a handler still running sees its context cancelled. Leases are not
// released. Stop before Run makes Run return at once; Stop is idempotent.
func (p *Processor) Stop(ctx context.Context) error {
	p.stopOnce.Do(func() { close(p.stop) })
	if !p.started.Load() {
		return nil
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wake makes every reader whose lease range overlaps r read at once instead
// of finishing its pause, e.g. right after this process wrote a document
// whose EPK lies in r. A reader busy reading or handling reads again as
// soon as it is done. Wake never blocks.
func (p *Processor) Wake(r Range) {
	if p.touch() {
		p.snapBack(nil)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.opts.Clock.Now().UnixNano()
	for rd := range p.readers {
		if overlaps(rd.rng, r) {
			rd.wokenAt.Store(now)
			rd.wakes.Add(1)
			select {
			case rd.wake <- struct{}{}:
			default:
			}
			p.stats.wakes.Add(1)
		}
	}
}

// snapBack is called when reader from finds changes after a deep idle
// spell (a pause past deepIdle), or when the processor turns warm (from is
// nil after a Wake): work resumed after a quiet period, and it tends to
// continue in other ranges. The processor's other readers that
// are deep idle too are woken to read at once and restart their back-off,
// each at most once per restartEvery, so a trickle of changes costs each
// reader at most a few reads a second more than backing off alone.
func (p *Processor) snapBack(from *reader) {
	deep := p.deepIdle()
	now := p.opts.Clock.Now().UnixNano()
	p.mu.Lock()
	defer p.mu.Unlock()
	for rd := range p.readers {
		if rd == from || time.Duration(rd.pausing.Load()) <= deep || now-rd.restarted.Load() < int64(restartEvery) {
			continue
		}
		rd.restarted.Store(now)
		rd.restart.Store(true)
		rd.wokenAt.Store(now)
		rd.wakes.Add(1)
		select {
		case rd.wake <- struct{}{}:
		default:
		}
	}
}

// partState is what the processor knows of one physical partition: the
// latest observation of its LSN, the latest shared page, and the read of
// it in flight, if any.
type partState struct {
	ob       observation
	page     *sharedPage
	flight   chan struct{} // closed when the read in flight ends; nil: none
	flightAt time.Time
	flightBy *reader
}

// partLocked returns the state of physical partition phys, creating it;
// partMu must be held.
func (p *Processor) partLocked(phys epk.Range) *partState {
	st := p.parts[phys]
	if st == nil {
		st = &partState{}
		p.parts[phys] = st
	}
	return st
}

// beginRead registers a read of physical partition phys by `by` starting
// at `at`. It returns the channel to pass to endRead, or nil when another
// read of the partition is already in flight (a flight `by` claimed in
// fromOthers is its own).
func (p *Processor) beginRead(phys epk.Range, by *reader, at time.Time) chan struct{} {
	p.partMu.Lock()
	defer p.partMu.Unlock()
	st := p.partLocked(phys)
	if st.flight != nil {
		if by != nil && st.flightBy == by {
			return st.flight // claimed by fromOthers for this read
		}
		return nil
	}
	st.flight, st.flightAt, st.flightBy = make(chan struct{}), at, by
	return st.flight
}

// endRead ends a read begun by beginRead (flight may be nil) and records
// what it observed and the page it shares, if anything.
func (p *Processor) endRead(phys epk.Range, flight chan struct{}, ob *observation, pg *sharedPage) {
	p.partMu.Lock()
	defer p.partMu.Unlock()
	st := p.partLocked(phys)
	if ob != nil && !st.ob.at.After(ob.at) {
		st.ob = *ob
	}
	if pg != nil && (st.page == nil || !st.page.at.After(pg.at)) {
		st.page = pg
	}
	if flight != nil && st.flight == flight {
		close(flight)
		st.flight = nil
	}
}

// window is which reads may stand in for a reader's next one: those begun
// since its previous cycle began and strictly after it was last woken.
type window struct{ since, woken time.Time }

func (w window) admits(at time.Time) bool {
	return !at.IsZero() && !at.Before(w.since) && at.After(w.woken)
}

// fromOthers says what the reads of pos's physical partition made by the
// processor's other readers (or a Lag probe) within w tell reader r
// about pos, so that r need not read it. If such a read is still in
// flight, it waits for its answer rather than read the partition a second
// time. Two answers replace a read: a shared page covering pos (see
// share.go), which gives pos's changes past its position and moves it to
// the page's end; or an observation that the partition's latest LSN was
// no later than pos's continuation when that read began, so nothing
// beyond pos existed then (skip). A read of any sub-range reports the LSN
// of its whole partition, so even leases that do not share pages take
// turns reading an idle partition: one read per pause per partition
// instead of one per lease. It returns the result to use and when the
// read it comes from began. Unknown or unparsable positions always need a
// read, as does everything when the service's continuations do not
// advance with the partition's LSN (the readers then read as if alone).
func (p *Processor) fromOthers(ctx context.Context, r *reader, pos position, w window) (res readResult, at time.Time, skip, ok bool, claim func()) {
	n, ok := etagLSN(pos.etag)
	if !ok {
		return res, at, false, false, nil
	}
	phys, _, ok := p.physicalOf(ctx, pos.rng)
	if !ok {
		return res, at, false, false, nil
	}
	for waits := 0; ; waits++ {
		p.partMu.Lock()
		st := p.partLocked(phys)
		if fl := st.flight; fl != nil && waits < maxFlightWaits && st.flightBy != r && w.admits(st.flightAt) {
			p.partMu.Unlock()
			select {
			case <-fl:
				continue
			case <-ctx.Done():
				return res, at, false, false, nil
			}
		}
		ob, pg := st.ob, st.page
		if pg != nil && pg.by != r && w.admits(pg.at) {
			if res, ok := fromPage(pg, pos, n); ok {
				p.partMu.Unlock()
				return res, pg.at, false, true, nil
			}
		}
		if ob.by != r && w.admits(ob.at) && ob.latest <= n {
			p.partMu.Unlock()
			res = readResult{pos: []position{pos}, from: pos.rng, latest: ob.latest}
			return res, ob.at, true, true, nil
		}
		// r reads: claim the partition's flight now, so that a sibling
		// whose pause ends at the same moment waits for this read instead
		// of making its own (readPage's beginRead takes the claim over).
		if st.flight != nil {
			p.partMu.Unlock()
			return res, at, false, false, nil
		}
		fl := make(chan struct{})
		st.flight, st.flightAt, st.flightBy = fl, p.opts.Clock.Now(), r
		p.partMu.Unlock()
		return res, at, false, false, func() { p.endRead(phys, fl, nil, nil) }
	}
}

// maxFlightWaits bounds how many reads of other readers in a row fromOthers
// waits for before reading itself.
const maxFlightWaits = 3

// touch records activity for the warm hold. It reports whether the
// processor was cold (no activity within WarmHold) until now; always false
// without a hold or with IndependentBackoff.
func (p *Processor) touch() bool {
	if p.opts.WarmHold <= 0 || p.opts.IndependentBackoff {
		return false
	}
	now := p.opts.Clock.Now().UnixNano()
	prev := p.lastActive.Swap(now)
	return prev == 0 || now-prev >= int64(p.opts.WarmHold)
}

// warm reports whether the processor saw activity within WarmHold.
func (p *Processor) warm(now time.Time) bool {
	last := p.lastActive.Load()
	return last != 0 && now.UnixNano()-last < int64(p.opts.WarmHold)
}

// restartEvery is the least time between two snap-backs of one reader.
const restartEvery = time.Second

// deepIdle is the pause beyond which a reader counts as idle for
// snapBack: sixteen active delays (80 ms with the defaults).
func (p *Processor) deepIdle() time.Duration {
	return 16 * max(p.opts.ActiveDelay, minIdleBase)
}

func (p *Processor) startReader(ctx context.Context, wg *sync.WaitGroup, l Lease) {
	r := newReader(p, l)
	p.mu.Lock()
	prev := p.latest[r.id]
	p.latest[r.id] = r
	p.readers[r] = struct{}{}
	p.mu.Unlock()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer p.removeReader(r) // in case run returned early
		r.run(ctx, prev)
	}()
}

func (p *Processor) removeReader(r *reader) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.readers, r)
	if p.latest[r.id] == r {
		delete(p.latest, r.id)
	}
}

func (p *Processor) snapshotReaders() []*reader {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*reader, 0, len(p.readers))
	for r := range p.readers {
		out = append(out, r)
	}
	return out
}

// jitter shortens an idle pause by up to Options.Jitter of it.
func (p *Processor) jitter(d time.Duration) time.Duration {
	if p.opts.Jitter == 0 || d <= 0 {
		return d
	}
	p.rngMu.Lock()
	f := p.rng.Float64()
	p.rngMu.Unlock()
	return d - time.Duration(float64(d)*p.opts.Jitter*f)
}

// Stats are cumulative counters of a Processor since New, plus the number
// of readers running now.
type Stats struct {
	// Readers is the number of readers running (one per held lease).
	Readers int
	// Reads counts change-feed reads (SDK ReadChangeFeed calls, including
	// failed ones and Lag probes); EmptyReads those that found nothing new
	// (304).
	Reads, EmptyReads int64
	// RequestCharge sums the request units reported by successful reads.
	RequestCharge float64
	// Batches and Documents count what the handler acknowledged.
	Batches, Documents int64
	// HandlerErrors counts handler calls that failed (and were retried).
	HandlerErrors int64
	// ReadErrors counts failed reads (all retried).
	ReadErrors int64
	// Checkpoints counts successful checkpoints; CheckpointErrors failed
	// ones other than a lost lease (retried).
	Checkpoints, CheckpointErrors int64
	// LeasesLost counts readers stopped because their lease ended: Done
	// closed (lost or released) or a checkpoint failed with ErrLeaseLost.
	LeasesLost int64
	// Wakes counts readers signalled by Wake.
	Wakes int64
	// SkippedReads counts reads not made because another reader of the
	// same physical partition had just found nothing new there.
	SkippedReads int64
	// SharedPages counts reads not made because another reader's read of
	// a span covering the lease's range brought its changes (see
	// Options.SeparateReads).
	SharedPages int64
	// IdlePeriod is the pause an idle reader last took under
	// Options.EmptyReadBudget (zero without a budget, or before any
	// reader idled), and EmptyReadCharge the mean charge of an empty read
	// the budget assumes.
	IdlePeriod      time.Duration
	EmptyReadCharge float64
}

type counters struct {
	reads, emptyReads, chargeMilli, batches, documents, handlerErrors, readErrors,
	checkpoints, checkpointErrors, leasesLost, wakes, skippedReads, sharedPages atomic.Int64
}

// Stats returns the processor's counters.
func (p *Processor) Stats() Stats {
	p.mu.Lock()
	n := len(p.readers)
	p.mu.Unlock()
	s := &p.stats
	return Stats{
		Readers:          n,
		Reads:            s.reads.Load(),
		EmptyReads:       s.emptyReads.Load(),
		RequestCharge:    float64(s.chargeMilli.Load()) / 1000,
		Batches:          s.batches.Load(),
		Documents:        s.documents.Load(),
		HandlerErrors:    s.handlerErrors.Load(),
		ReadErrors:       s.readErrors.Load(),
		Checkpoints:      s.checkpoints.Load(),
		CheckpointErrors: s.checkpointErrors.Load(),
		LeasesLost:       s.leasesLost.Load(),
		Wakes:            s.wakes.Load(),
		SkippedReads:     s.skippedReads.Load(),
		SharedPages:      s.sharedPages.Load(),
		IdlePeriod:       time.Duration(p.idlePeriod.Load()),
		EmptyReadCharge:  p.meanEmptyCharge(),
	}
}
