package changefeed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/internal/clock"
	"github.com/durafeed/durafeed/internal/epk"
)

// finalCheckpointTimeout bounds the one checkpoint attempt made for a batch
// the handler acknowledged while the processor was stopping.
const finalCheckpointTimeout = 5 * time.Second

// reader reads one lease.
type reader struct {
	p     *Processor
	lease Lease
	id    string
	rng   epk.Range
	log   *zap.Logger
	wake  chan struct{}
	done  chan struct{}

	mu   sync.Mutex
	rid  string
	pos  []position
	obs  map[epk.Range]observation
	held *inHand

	// Reader goroutine only: a continuation acknowledged but not yet
	// checkpointed (Options.CheckpointInterval), and the last checkpoint.
	pendingCont string
	lastCp      time.Time
	lastDocs    time.Time // when the reader last found changes
	lastCycle   time.Time // when the previous cycle began
	positioned  bool      // Options.OnPositioned was called

	// pausing is the pause (ns) the reader is in or about to take, zero
	// while it reads; restart asks it to back off afresh, and restarted
	// is when snapBack last did so (unix ns).
	pausing   atomic.Int64
	restart   atomic.Bool
	restarted atomic.Int64
	// wokenAt is when Wake or a snap-back last woke the reader (unix ns):
	// a change may have been written just before, so no read begun
	// earlier may stand in for its next one.
	wokenAt atomic.Int64
	// pageWoken is the start (unix ns) of the latest shared page a
	// sibling woke the reader for; tookPage (reader goroutine only) that
	// of the latest page the reader took changes from. A wake for a page
	// already taken is spurious.
	pageWoken atomic.Int64
	tookPage  int64
	// wakes counts Wake and snap-back wakes; seenWakes (reader goroutine
	// only) is its value when the last cycle began: a higher count is a
	// wake the reader has not acted on.
	wakes     atomic.Int64
	seenWakes int64
}

// observation is the latest LSN of a sub-range's physical partition, as a
// response's session token reported it.
type observation struct {
	latest int64
	at     time.Time
	by     *reader // the reader that made it (nil: a Lag probe)
}

// inHand describes a page read but not yet acknowledged.
type inHand struct {
	rng      epk.Range
	firstLSN int64
	firstTS  time.Time
}

func newReader(p *Processor, l Lease) *reader {
	r := &reader{
		p:     p,
		lease: l,
		id:    l.ID(),
		rng:   l.Range(),
		wake:  make(chan struct{}, 1),
		done:  make(chan struct{}),
		obs:   map[epk.Range]observation{},
	}
	r.log = p.log.With(zap.String("lease", r.id), zap.String("min", r.rng.Min), zap.String("max", r.rng.Max))
	return r
}

// run is the reader goroutine. It waits for prev (an earlier reader of the
// same lease ID) to stop first, so one lease is never read twice at once
// by this process.
func (r *reader) run(ctx context.Context, prev *reader) {
	defer close(r.done)
	ctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-r.lease.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	defer func() {
		cancel()
		<-watched
	}()
	if prev != nil {
		select {
		case <-prev.done:
		case <-ctx.Done():
			return
		}
	}
	r.log.Debug("changefeed: reader started")
	err := r.loop(ctx)
	r.p.removeReader(r)
	select {
	case <-r.lease.Done():
		r.p.stats.leasesLost.Add(1)
		r.log.Debug("changefeed: reader stopped: lease done")
	default:
		switch {
		case errors.Is(err, ErrLeaseLost):
			r.p.stats.leasesLost.Add(1)
			r.log.Info("changefeed: reader stopped: lease lost", zap.Error(err))
		case ctx.Err() != nil:
			r.log.Debug("changefeed: reader stopped")
		default:
			r.log.Error("changefeed: reader stopped", zap.Error(err))
		}
	}
}

func (r *reader) loop(ctx context.Context) (err error) {
	if err := r.init(ctx); err != nil {
		return err
	}
	defer func() {
		if ctx.Err() != nil {
			r.flush(ctx)
		}
	}()
	o := &r.p.opts
	var delay time.Duration
	idle := false
	empty := 0
	deep := r.p.deepIdle()
	for {
		r.notePositioned()
		r.pausing.Store(int64(delay))
		began, err := r.pause(ctx, delay, idle)
		r.pausing.Store(0)
		if err != nil {
			return err
		}
		res, err := r.cycle(ctx)
		if err != nil {
			return err
		}
		var period time.Duration // the budget's, when the reader idles under it
		switch {
		case res.full:
			delay, idle, empty = 0, false, 0
		case res.docs:
			r.lastDocs = o.Clock.Now()
			if turnedWarm := r.p.touch(); (turnedWarm || idle && delay > deep) && !o.IndependentBackoff && o.EmptyReadBudget <= 0 {
				r.p.snapBack(r)
			}
			delay, idle, empty = o.ActiveDelay, false, 0
			r.restart.Store(false)
		default:
			if r.restart.Swap(false) {
				empty = 0 // another reader snapped back
			}
			switch {
			case r.warm():
				delay, idle, empty = o.ActiveDelay, false, 0
			case o.EmptyReadBudget > 0:
				delay, idle, empty = r.p.budgetPeriod(ctx), false, 0
				period = delay
			default:
				empty++
				delay, idle = idleDelay(o, empty), true
			}
		}
		// Pauses count from the start of the cycle, so reads start every
		// ActiveDelay rather than ActiveDelay after each answer, and from
		// when it was due rather than when its timer fired, so the
		// timer's lateness does not add up from one cycle to the next;
		// when nothing was read, from skippedAt, when the partitions were
		// last seen.
		if !res.skippedAt.IsZero() {
			began = res.skippedAt
		}
		now := o.Clock.Now()
		delay = max(0, delay-now.Sub(began))
		switch {
		case period > 0:
			delay = r.onPhase(now, delay, period)
		case !idle && !res.full:
			delay = r.onPhase(now, delay, o.ActiveDelay)
		}
	}
}

// onPhase moves the end of a pause onto the reader's phase in a cycle of
// length d (ActiveDelay while changes flow, the budget period while idle
// under a budget): the container's physical partitions are read at
// offsets spread evenly over d (partition k of n at k/n of it, counted
// from the processor's start), so that the reads of a processor's leases
// do not all start at once and queue behind one another for the process's
// CPU, and an idle Processor's reads are evenly spaced. Readers of one
// partition share a phase, so they still take turns. An alignment moves
// the end of a pause by at most half of d.
func (r *reader) onPhase(now time.Time, delay, d time.Duration) time.Duration {
	if d <= 0 {
		return delay
	}
	r.mu.Lock()
	var rng epk.Range
	if len(r.pos) > 0 {
		rng = r.pos[0].rng
	}
	r.mu.Unlock()
	k, n := r.p.phaseOf(rng)
	if n <= 1 {
		return delay
	}
	off := time.Duration(k) * d / time.Duration(n)
	due := now.Add(delay)
	rel := due.Sub(r.p.epoch) - off
	m := (rel - d/2 + d - 1) / d
	if rel-d/2 < 0 {
		m = 0
	}
	target := r.p.epoch.Add(off + m*d)
	return max(0, target.Sub(now))
}

// phaseOf is the index of the physical partition holding rng among the
// container's, and their number.
func (p *Processor) phaseOf(rng epk.Range) (int, int) {
	phys, err := p.physicalRanges(context.Background())
	if err != nil {
		return 0, 0
	}
	for i, fr := range phys {
		if within(rng, fr) {
			return i, len(phys)
		}
	}
	return 0, 0
}

// notePositioned calls Options.OnPositioned once no position of the
// reader still waits for its first read to fix "now".
func (r *reader) notePositioned() {
	f := r.p.opts.OnPositioned
	if r.positioned || f == nil {
		return
	}
	r.mu.Lock()
	pending := slices.ContainsFunc(r.pos, func(p position) bool { return p.etag == "*" })
	r.mu.Unlock()
	if !pending {
		r.positioned = true
		f(r.id)
	}
}

// warm reports whether the reader is within the warm hold: WarmHold since
// its own last change, or since the processor's last activity.
func (r *reader) warm() bool {
	o := &r.p.opts
	if o.WarmHold <= 0 {
		return false
	}
	now := o.Clock.Now()
	if !r.lastDocs.IsZero() && now.Sub(r.lastDocs) < o.WarmHold {
		return true
	}
	return !o.IndependentBackoff && r.p.warm(now)
}

// idleDelay is the pause after k consecutive empty cycles:
// max(ActiveDelay, 1ms)·BackoffFactor^k, capped at IdleCeiling.
func idleDelay(o *Options, k int) time.Duration {
	base := max(o.ActiveDelay, minIdleBase)
	d := float64(base) * math.Pow(o.BackoffFactor, float64(k))
	if d >= float64(o.IdleCeiling) {
		return o.IdleCeiling
	}
	return time.Duration(d)
}

// pause waits d, or less if woken, and returns when the cycle that
// follows is due: the end of d, or the wake. A cycle always follows, so a
// wake already pending is consumed by it. A sibling's wake for a shared
// page the reader has taken already (it was woken while its previous
// cycle took the page) is ignored.
func (r *reader) pause(ctx context.Context, d time.Duration, idle bool) (time.Time, error) {
	clk := r.p.opts.Clock
	if idle {
		d = r.p.jitter(d)
	}
	if d <= 0 {
		select {
		case <-r.wake:
		default:
		}
		return clk.Now(), ctx.Err()
	}
	due := clk.Now().Add(d)
	t := clk.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-r.wake:
			if r.wakes.Load() == r.seenWakes && r.pageWoken.Load() <= r.tookPage {
				continue
			}
			return clk.Now(), nil
		case <-t.C():
			return due, nil
		}
	}
}

// sleep waits d for a retry.
func (r *reader) sleep(ctx context.Context, d time.Duration) error {
	if !clock.SleepOn(ctx, r.p.opts.Clock, d) {
		return ctx.Err()
	}
	return nil
}

func (p *Processor) newBackOff() *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     p.opts.RetryInitial,
		RandomizationFactor: 0.2,
		Multiplier:          2,
		MaxInterval:         p.opts.RetryMax,
		MaxElapsedTime:      0,
		Stop:                backoff.Stop,
		Clock:               backoff.SystemClock,
	}
	b.Reset()
	return b
}

// init builds the lease's positions: its continuation clamped to its range,
// plus fresh positions (one per physical partition) for any part the
// continuation does not cover. With StartFromNow fresh positions are read
// once and the result checkpointed, so the starting point survives a
// hand-off.
func (r *reader) init(ctx context.Context) error {
	var ps []position
	rid := ""
	if c := r.lease.Continuation(); c != "" {
		var decoded []position
		var err error
		rid, decoded, err = decodeToken(c)
		if err != nil {
			return err
		}
		ps = removeOverlaps(clampPositions(decoded, r.rng))
	}
	missing := gaps(ps, r.rng)
	if len(missing) > 0 {
		phys, err := r.feedRanges(ctx)
		if err != nil {
			return err
		}
		etag := ""
		if r.p.opts.StartFrom.kind == startNow {
			etag = "*"
		}
		for _, g := range missing {
			for _, f := range phys {
				if x, ok := intersect(g, f); ok {
					ps = append(ps, position{rng: x, etag: etag})
				}
			}
		}
		sortPositions(ps)
	}
	if len(ps) == 0 {
		return fmt.Errorf("changefeed: lease range [%s, %s) is empty", r.rng.Min, r.rng.Max)
	}
	r.mu.Lock()
	r.rid, r.pos = rid, ps
	r.mu.Unlock()
	r.lastCycle = r.p.opts.Clock.Now()

	// Pin "now": resolve every "*" position to the service's current
	// position and checkpoint that before any batch is handled.
	pinned := false
	for i := 0; i < len(ps); {
		if ps[i].etag != "*" {
			i++
			continue
		}
		rr, err := r.readAlone(ctx, ps[i])
		if err != nil {
			return err
		}
		// If-None-Match: * never returns documents.
		ps = slices.Concat(ps[:i:i], rr.pos, ps[i+1:])
		i += len(rr.pos)
		pinned = true
		r.commit(ps, rr)
	}
	if pinned {
		return r.checkpoint(ctx, encodeToken(r.currentRID(), ps))
	}
	return nil
}

// feedRanges returns the container's physical partition ranges, retrying.
func (r *reader) feedRanges(ctx context.Context) ([]epk.Range, error) {
	bo := r.p.newBackOff()
	for {
		rctx, cancel := context.WithTimeout(ctx, r.p.opts.ReadTimeout)
		frs, err := r.p.container.ReadFeedRanges(rctx, nil)
		cancel()
		if err == nil {
			out := make([]epk.Range, len(frs))
			for i, f := range frs {
				out[i] = epk.Range{Min: f.MinInclusive, Max: normMax(f.MaxExclusive)}
			}
			return out, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r.p.stats.readErrors.Add(1)
		d := retryDelay(err, bo)
		r.logRetry("read partition key ranges", err, d)
		if err := r.sleep(ctx, d); err != nil {
			return nil, err
		}
	}
}

// cycleResult is what a cycle found. skippedAt is set when the cycle
// skipped every position: the time of the oldest observation it relied
// on, from which the next pause counts.
type cycleResult struct {
	docs, full bool
	skippedAt  time.Time
}

// cycle reads each of the lease's positions once, handing every non-empty
// page to the handler and checkpointing after it. A position that the
// reads of the processor's other readers begun since this reader's
// previous cycle began, and since it was last woken (a change may have
// been written just before), already answer is not read: see
// Processor.fromOthers.
func (r *reader) cycle(ctx context.Context) (cycleResult, error) {
	var res cycleResult
	r.mu.Lock()
	cur := slices.Clone(r.pos)
	rid := r.rid
	r.mu.Unlock()
	r.seenWakes = r.wakes.Load()
	w := window{since: r.lastCycle}
	if n := r.wokenAt.Load(); n != 0 {
		w.woken = time.Unix(0, n)
	}
	r.lastCycle = r.p.opts.Clock.Now()
	read := false
	var oldest time.Time
	for i := 0; i < len(cur); {
		rr, at, skip, other, claim := r.p.fromOthers(ctx, r, cur[i], w)
		if other {
			if skip {
				r.p.stats.skippedReads.Add(1)
			} else {
				r.p.stats.sharedPages.Add(1)
				r.tookPage = max(r.tookPage, at.UnixNano())
			}
			r.mu.Lock()
			if prev, had := r.obs[cur[i].rng]; !had || prev.at.Before(at) {
				r.obs[cur[i].rng] = observation{latest: rr.latest, at: at}
			}
			r.mu.Unlock()
			if oldest.IsZero() || at.Before(oldest) {
				oldest = at
			}
		} else {
			read = true
			var err error
			rr, err = r.read(ctx, cur[i])
			if claim != nil {
				claim() // ends the flight if the read did not (another partition after a split)
			}
			if err != nil {
				return res, err
			}
		}
		if rr.rid != "" {
			rid = rr.rid
		}
		next := slices.Concat(cur[:i:i], rr.pos, cur[i+1:])
		if len(rr.docs) > 0 {
			docs := rr.docs
			if f := r.p.opts.Filter; f != nil {
				docs = filterDocs(docs, f)
			}
			cont := encodeToken(rid, next)
			if len(docs) > 0 {
				b := Batch{LeaseID: r.id, Range: rr.from, Documents: docs, Continuation: cont}
				if err := r.deliver(ctx, b); err != nil {
					return res, err
				}
				if err := r.checkpointSoon(ctx, cont); err != nil {
					return res, err
				}
				r.p.stats.batches.Add(1)
				r.p.stats.documents.Add(int64(len(b.Documents)))
				r.p.noteChanges(len(b.Documents), r.p.opts.Clock.Now())
				res.docs = true
			} else if r.pendingCont != "" {
				r.pendingCont = cont // covered by the checkpoint already due
			}
		}
		if rr.more {
			res.full = true
		}
		r.commit(next, rr)
		cur = next
		i += len(rr.pos)
	}
	if !read {
		res.skippedAt = oldest
	}
	if r.pendingCont != "" && r.p.opts.Clock.Now().Sub(r.lastCp) >= r.p.opts.CheckpointInterval {
		cont := r.pendingCont
		if err := r.checkpoint(ctx, cont); err != nil {
			return res, err
		}
		r.pendingCont, r.lastCp = "", r.p.opts.Clock.Now()
	}
	return res, nil
}

// filterDocs keeps the documents f accepts (a new slice when any is dropped).
func filterDocs(docs []json.RawMessage, f func(json.RawMessage) bool) []json.RawMessage {
	for i, d := range docs {
		if f(d) {
			continue
		}
		out := append([]json.RawMessage(nil), docs[:i]...)
		for _, d := range docs[i+1:] {
			if f(d) {
				out = append(out, d)
			}
		}
		return out
	}
	return docs
}

// flush records a checkpoint left pending by CheckpointInterval when the
// reader stops with its lease still held (one attempt, on a detached
// context), so that the next owner does not see those changes again.
func (r *reader) flush(ctx context.Context) {
	if r.pendingCont == "" {
		return
	}
	select {
	case <-r.lease.Done():
		return
	default:
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalCheckpointTimeout)
	defer cancel()
	if r.lease.Checkpoint(fctx, r.pendingCont) == nil {
		r.p.stats.checkpoints.Add(1)
		r.pendingCont = ""
	}
}

// checkpointSoon checkpoints cont now, or, within CheckpointInterval of the
// last checkpoint, leaves it pending for the end of a later cycle.
func (r *reader) checkpointSoon(ctx context.Context, cont string) error {
	iv := r.p.opts.CheckpointInterval
	if iv > 0 && r.p.opts.Clock.Now().Sub(r.lastCp) < iv {
		r.pendingCont = cont
		return nil
	}
	if err := r.checkpoint(ctx, cont); err != nil {
		return err
	}
	r.pendingCont, r.lastCp = "", r.p.opts.Clock.Now()
	return nil
}

// commit installs the positions after a page was acknowledged (or found
// empty).
func (r *reader) commit(ps []position, rr readResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pos = ps
	if rr.rid != "" {
		r.rid = rr.rid
	}
	r.held = nil
	for k := range r.obs {
		if !slices.ContainsFunc(ps, func(p position) bool { return overlaps(p.rng, k) }) {
			delete(r.obs, k)
		}
	}
}

// deliver calls the handler until it accepts b, the lease is lost or the
// processor stops.
func (r *reader) deliver(ctx context.Context, b Batch) error {
	r.mu.Lock()
	r.held = describePage(b)
	r.mu.Unlock()
	var bo *backoff.ExponentialBackOff
	for {
		err := r.p.handler(ctx, b)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.p.stats.handlerErrors.Add(1)
		if bo == nil {
			bo = r.p.newBackOff()
		}
		d := bo.NextBackOff()
		r.log.Warn("changefeed: handler failed; retrying the batch", zap.Error(err), zap.Int("documents", len(b.Documents)), zap.Duration("retry_in", d))
		if err := r.sleep(ctx, d); err != nil {
			return err
		}
	}
}

func describePage(b Batch) *inHand {
	h := &inHand{rng: b.Range, firstLSN: -1}
	var sys struct {
		LSN *int64 `json:"_lsn"`
		TS  *int64 `json:"_ts"`
	}
	if len(b.Documents) > 0 && json.Unmarshal(b.Documents[0], &sys) == nil {
		if sys.LSN != nil {
			h.firstLSN = *sys.LSN
		}
		if sys.TS != nil {
			h.firstTS = time.Unix(*sys.TS, 0)
		}
	}
	return h
}

// checkpoint records cont in the lease, retrying transient failures. If the
// processor is stopping (but the lease is still held) it makes one attempt
// on a detached context, so an acknowledged batch is not redelivered.
func (r *reader) checkpoint(ctx context.Context, cont string) error {
	var bo *backoff.ExponentialBackOff
	for {
		if ctx.Err() != nil {
			select {
			case <-r.lease.Done():
			default:
				fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalCheckpointTimeout)
				if r.lease.Checkpoint(fctx, cont) == nil {
					r.p.stats.checkpoints.Add(1)
				}
				cancel()
			}
			return ctx.Err()
		}
		err := r.lease.Checkpoint(ctx, cont)
		if err == nil {
			r.p.stats.checkpoints.Add(1)
			return nil
		}
		if errors.Is(err, ErrLeaseLost) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.p.stats.checkpointErrors.Add(1)
		if bo == nil {
			bo = r.p.newBackOff()
		}
		d := bo.NextBackOff()
		r.log.Warn("changefeed: checkpoint failed; retrying", zap.Error(err), zap.Duration("retry_in", d))
		if err := r.sleep(ctx, d); err != nil {
			return err
		}
	}
}

// read reads one page at pos, widened over its siblings' positions when
// reads are shared (see share.go), whose page it then publishes and whose
// own part it returns. A widened page whose documents cannot be told
// apart is dropped and pos read alone.
func (r *reader) read(ctx context.Context, pos position) (readResult, error) {
	span, wide := r.p.span(ctx, r, pos)
	if !wide {
		return r.readAlone(ctx, pos)
	}
	rr, err := r.readSpan(ctx, span, true)
	if err != nil {
		return rr, err
	}
	r.p.wakeRiders(rr.page)
	own, err := narrow(rr, pos)
	if err != nil {
		r.log.Debug("changefeed: a widened read cannot be used; reading the lease's range alone", zap.Error(err))
		return r.readAlone(ctx, pos)
	}
	r.observe(own)
	return own, nil
}

// readAlone reads one page at pos alone.
func (r *reader) readAlone(ctx context.Context, pos position) (readResult, error) {
	rr, err := r.readSpan(ctx, pos, false)
	if err == nil {
		r.observe(rr)
	}
	return rr, err
}

// observe records the partition LSN a read of the reader's reported.
func (r *reader) observe(rr readResult) {
	if rr.latest >= 0 {
		r.mu.Lock()
		r.obs[rr.from] = observation{latest: rr.latest, at: r.p.opts.Clock.Now()}
		r.mu.Unlock()
	}
}

// readSpan reads one page at pos (a span to share when share is set),
// retrying failures with backoff (honouring the service's retry-after)
// until it succeeds or ctx ends. Nothing is given up while the lease is
// held: an error that retrying cannot fix (the container was deleted, say)
// is logged at Error level at every attempt.
func (r *reader) readSpan(ctx context.Context, pos position, share bool) (readResult, error) {
	var bo *backoff.ExponentialBackOff
	for {
		rr, err := r.p.readPage(ctx, r, r.currentRID(), pos, r.p.opts.MaxItemCount, share)
		if err == nil {
			return rr, nil
		}
		if ctx.Err() != nil {
			return rr, ctx.Err()
		}
		r.p.stats.readErrors.Add(1)
		if bo == nil {
			bo = r.p.newBackOff()
		}
		d := retryDelay(err, bo)
		r.logRetry("read change feed", err, d)
		if err := r.sleep(ctx, d); err != nil {
			return rr, err
		}
	}
}

func (r *reader) currentRID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rid
}

func (r *reader) logRetry(what string, err error, d time.Duration) {
	f := []zap.Field{zap.Error(err), zap.Duration("retry_in", d)}
	if transient(err) {
		r.log.Warn("changefeed: "+what+" failed; retrying", f...)
	} else {
		r.log.Error("changefeed: "+what+" failed and retrying is unlikely to help; retrying anyway while the lease is held", f...)
	}
}

type readResult struct {
	rid    string
	pos    []position // replacement for the position read (several after a split)
	from   epk.Range  // the sub-range the page came from
	docs   []json.RawMessage
	more   bool  // the page was full: more changes follow
	latest int64 // the partition's latest LSN, -1 if unknown
	status int
	page   *sharedPage // the page shared with siblings (a widened read)
}

// Change-feed request headers narrowing a read to an EPK sub-range of a
// physical partition, as the .NET and Java SDKs send them. azcosmos v1.5.0
// resolves a FeedRange to whole physical partitions and sends neither, so
// without them a lease on part of a partition would receive the whole
// partition's changes.
const (
	headerStartEPK    = "x-ms-start-epk"
	headerEndEPK      = "x-ms-end-epk"
	headerReadKeyType = "x-ms-read-key-type"
	readKeyTypeEPK    = "EffectivePartitionKeyRange"
	headerSession     = "x-ms-session-token"
)

// readPage makes one ReadChangeFeed call for pos alone. The SDK resolves
// the position to its physical partition through its routing-map cache; if
// the partition has split it gets 410/1002, refreshes the map and reads the
// children (each inheriting the position's continuation), which come back
// as several positions. With share, pos is a span of several leases'
// positions and the page is published for them (Processor.fromOthers)
// before the read counts as ended.
func (p *Processor) readPage(ctx context.Context, by *reader, rid string, pos position, maxItems int32, share bool) (readResult, error) {
	res := readResult{latest: -1, from: pos.rng}
	ctx, cancel := context.WithTimeout(ctx, p.opts.ReadTimeout)
	defer cancel()
	tok := encodeToken(rid, []position{pos})
	o := &azcosmos.ChangeFeedOptions{MaxItemCount: maxItems, Continuation: &tok}
	if pos.etag == "" && p.opts.StartFrom.kind == startTime {
		t := p.opts.StartFrom.t
		o.StartFrom = &t
	}
	started := p.opts.Clock.Now()
	phys, exact, known := p.physicalOf(ctx, pos.rng)
	if !exact {
		h := http.Header{}
		h.Set(headerStartEPK, pos.rng.Min)
		h.Set(headerEndEPK, pos.rng.Max)
		h.Set(headerReadKeyType, readKeyTypeEPK)
		ctx = policy.WithHTTPHeader(ctx, h)
	}
	var flight chan struct{}
	var seen *observation
	if known {
		flight = p.beginRead(phys, by, started)
		defer func() { p.endRead(phys, flight, seen, res.page) }()
	}
	p.stats.reads.Add(1)
	resp, err := p.container.ReadChangeFeed(ctx, o)
	if err != nil {
		p.forgetPhysical()
		return res, err
	}
	p.stats.chargeMilli.Add(int64(math.Round(float64(resp.RequestCharge) * 1000)))
	rid2, ps, err := decodeToken(resp.ContinuationToken)
	if err != nil {
		return res, fmt.Errorf("changefeed: unexpected continuation from ReadChangeFeed: %w", err)
	}
	ps = clampPositions(ps, pos.rng)
	if len(ps) > 1 {
		p.forgetPhysical() // the position split
	}
	if len(ps) == 0 {
		return res, fmt.Errorf("changefeed: ReadChangeFeed returned a continuation outside [%s, %s)", pos.rng.Min, pos.rng.Max)
	}
	res.rid, res.pos = rid2, ps
	if resp.FeedRange != nil {
		if x, ok := intersect(epk.Range{Min: resp.FeedRange.MinInclusive, Max: normMax(resp.FeedRange.MaxExclusive)}, pos.rng); ok {
			res.from = x
		}
	}
	if raw := resp.RawResponse; raw != nil {
		res.status = raw.StatusCode
		if n, ok := sessionLSN(raw.Header.Get(headerSession)); ok {
			res.latest = n
			seen = &observation{latest: n, at: started, by: by}
		}
	}
	if len(resp.Items) == 0 {
		p.stats.emptyReads.Add(1)
		p.noteEmptyCharge(float64(resp.RequestCharge)) // a 304: the budget's unit
	} else {
		res.docs = make([]json.RawMessage, len(resp.Items))
		for i, it := range resp.Items {
			res.docs[i] = it
		}
		res.more = len(resp.Items) >= int(maxItems)
	}
	if share {
		res.page = p.newPage(by, pos, res, started)
	}
	return res, nil
}

// physicalOf returns the physical partition holding r (see
// physicalRanges), and whether r is exactly that partition. ok is false
// when the partitions cannot be read or none holds r whole (a split not
// seen yet).
func (p *Processor) physicalOf(ctx context.Context, r epk.Range) (phys epk.Range, exact, ok bool) {
	ranges, err := p.physicalRanges(ctx)
	if err != nil {
		return epk.Range{}, false, false
	}
	for _, fr := range ranges {
		if epk.Compare(fr.Min, r.Min) <= 0 && epk.Compare(r.Max, fr.Max) <= 0 {
			return fr, fr == r, true
		}
	}
	return epk.Range{}, false, false
}

// physRangesMaxAge is how long physicalRanges reuses what the SDK's
// routing map gave. Every read looks its partition up several times;
// asking the SDK each time (cached there too, but at the cost of a
// tracing span, a container lookup and a fresh slice per call) was a
// twentieth of a warm replica's CPU and an eighth of its allocation.
const physRangesMaxAge = time.Second

// physicalRanges returns the container's physical partitions in EPK
// order, from the SDK's cached routing map (no request unless that cache
// is cold), reusing the last answer for up to physRangesMaxAge. A read
// that fails or sees its position split forgets it (forgetPhysical), so a
// split this processor's reads run into is seen at their next lookup, and
// any other within physRangesMaxAge of the SDK's seeing it. Until then a
// lookup may name the parent partition, as the SDK's own cache may until
// a request of its runs into the split; read handles both alike. Callers
// must not modify the slice.
func (p *Processor) physicalRanges(ctx context.Context) ([]epk.Range, error) {
	now := time.Now()
	p.physMu.Lock()
	if p.phys != nil && now.Sub(p.physAt) < physRangesMaxAge {
		defer p.physMu.Unlock()
		return p.phys, nil
	}
	p.physMu.Unlock()
	frs, err := p.container.ReadFeedRanges(ctx, nil)
	if err != nil {
		return nil, err
	}
	out := make([]epk.Range, len(frs))
	for i, f := range frs {
		out[i] = epk.Range{Min: f.MinInclusive, Max: normMax(f.MaxExclusive)}
	}
	p.physMu.Lock()
	p.phys, p.physAt = out, now
	p.physMu.Unlock()
	return out, nil
}

// forgetPhysical makes the next physicalRanges ask the SDK again.
func (p *Processor) forgetPhysical() {
	p.physMu.Lock()
	p.phys = nil
	p.physMu.Unlock()
}
