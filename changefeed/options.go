package changefeed

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/durafeed/durafeed/internal/clock"
)

// Defaults applied by New to zero-valued Options fields.
const (
	// DefaultActiveDelay is the time between the starts of two reads of a
	// lease while changes flow (after a page that was not full; after a
	// full page the reader reads again at once). It bounds a flowing reader
	// at about 200 requests a second while adding at most 5 ms to a
	// change's latency.
	DefaultActiveDelay = 5 * time.Millisecond
	// DefaultIdleCeiling is the longest pause between reads of an idle
	// lease. An idle read is a 304 costing about 1 RU, so an idle reader
	// costs 1 RU/s (86,400 RU a day, about $0.65 a month at the serverless
	// price of $0.25 per million RU, or 0.25% of a 400 RU/s container), and
	// a change arriving on an idle lease is seen within 1 s (0.5 s on
	// average). The .NET and Java processors poll idle leases every 5 s.
	// Changes written by this process need not wait at all: see
	// Processor.Wake.
	DefaultIdleCeiling = time.Second
	// DefaultBackoffFactor is the growth of the pause after each empty
	// read: ActiveDelay·2, ·4, ... up to IdleCeiling (with the defaults 10,
	// 20, 40, ... 640 ms, then 1 s: going idle costs seven reads in the
	// 1.27 s before the ceiling is reached).
	DefaultBackoffFactor = 2.0
	// DefaultJitter is the fraction by which an idle pause is randomly
	// shortened (never lengthened), so readers started together drift
	// apart.
	DefaultJitter = 0.1
	// DefaultMaxItemCount is the page size asked of the service.
	DefaultMaxItemCount = 100
	// DefaultRetryInitial is the first pause before retrying a failed read,
	// handler call or checkpoint; it doubles (with jitter) up to
	// DefaultRetryMax.
	DefaultRetryInitial = 100 * time.Millisecond
	// DefaultRetryMax caps the pause between retries.
	DefaultRetryMax = 30 * time.Second
	// DefaultReadTimeout bounds one change-feed read (the SDK's own retries
	// included). The SDK's HTTP client has no overall timeout, so without
	// one a request lost in the network would stall its lease.
	DefaultReadTimeout = 30 * time.Second
)

// minIdleBase is where idle pauses start growing from when ActiveDelay is
// zero.
const minIdleBase = time.Millisecond

// Options configures a Processor. The zero value is usable: every field has
// a documented default.
type Options struct {
	// ActiveDelay is the time from the start of one read to the start of
	// the next while changes flow. Zero means DefaultActiveDelay; a
	// negative value means no pause.
	ActiveDelay time.Duration
	// IdleCeiling is the longest pause between reads of a lease that keeps
	// answering "nothing new". Zero means DefaultIdleCeiling. It must not be
	// below ActiveDelay.
	IdleCeiling time.Duration
	// BackoffFactor multiplies the pause after every read that found
	// nothing, starting from ActiveDelay (1 ms if that is zero) and capped
	// at IdleCeiling; the first read that finds a change snaps the pause
	// back to ActiveDelay. Zero means DefaultBackoffFactor; it must be at
	// least 1 (1 keeps polling at ActiveDelay).
	BackoffFactor float64
	// IndependentBackoff makes every reader back off on its own. By
	// default the readers of one Processor share their back-off: when one
	// finds changes after a deep idle spell (a pause past 16 ActiveDelays),
	// the others that are deep idle too are woken to read at once and
	// restart their back-off from ActiveDelay, since work that resumes in
	// one range tends to continue in others. Each reader is restarted at
	// most once a second, which bounds the extra cost under a trickle of
	// changes to a few reads a second per reader; an idle processor pays
	// nothing extra. The next change in a woken reader's range then waits
	// for the back-off reached since the restart instead of up to
	// IdleCeiling.
	IndependentBackoff bool
	// EmptyReadBudget, when positive, replaces the idle back-off with a
	// budget: the request units per second the Processor may spend on
	// reads that find nothing for the handler. An idle reader then reads
	// once per budget period, P·c/EmptyReadBudget, where P is the number
	// of physical partitions the Processor's leases overlap and c the mean
	// charge of its recent reads that returned nothing (304; 1 RU until
	// one is measured), and the reads of a container's N physical
	// partitions are spread evenly over the period (partition k at k/N of
	// it) instead of bunching. A
	// read that finds changes is followed after ActiveDelay, and so on
	// while reads keep finding changes; the first empty one returns the
	// reader to the period. A change on an idle range so waits half a
	// period on average and a whole one at most (plus a read), while the
	// Processor spends EmptyReadBudget whatever the number of leases.
	// MaxIdlePeriod, when positive, bounds that period: an idle
	// partition is read at least every MaxIdlePeriod whatever the
	// budget, so that the longest wait of a change does not grow with
	// the number of partitions; the spend is then up to P·c/MaxIdlePeriod
	// RU per second, and scales with P as a query over every partition
	// does.
	//
	// A read that returns only documents the Filter drops paces as an
	// empty one, but what it costs above a 304 is not counted: that
	// surplus follows the writes (the Processor's own, or the lease
	// documents beside the data), not the schedule.
	// IdleCeiling, BackoffFactor, Jitter and the shared back-off do not
	// apply to such readers; Wake still reads at once, and WarmHold, if
	// set, still holds readers at ActiveDelay (reads the budget does not
	// count). Zero (the default): the back-off.
	EmptyReadBudget float64
	// MaxIdlePeriod: see EmptyReadBudget (zero or negative: no bound).
	MaxIdlePeriod time.Duration
	// ReadsPerChange, with EmptyReadBudget, raises the budget with the
	// work: every change delivered to the handler adds ReadsPerChange
	// reads' worth, so that the budget is EmptyReadBudget +
	// ReadsPerChange·c·r, r the rate of changes delivered (documents a
	// second, decaying with a 2 s time constant). A busy Processor so
	// reads its partitions more often the more changes it sees (about
	// ReadsPerChange reads per change, down to ActiveDelay between
	// reads), and returns to EmptyReadBudget within seconds of the work
	// stopping. Zero (the default): the budget alone.
	ReadsPerChange float64
	// WarmHold keeps readers from backing off while the processor is
	// warm: for WarmHold after the processor last saw a change in any of
	// its ranges or was woken by Wake, every reader that finds nothing
	// pauses only ActiveDelay, and backs off from there once WarmHold has
	// passed. A processor turning warm wakes its deep idle readers as the
	// shared back-off does. Work that arrives in bursts (a reply to
	// something this process did a moment ago, the next step of a job in
	// progress) is then read within ActiveDelay wherever it lands, at a
	// cost of one read per reader per ActiveDelay while warm; an idle
	// processor pays nothing extra. With IndependentBackoff the hold
	// counts from the reader's own last change. Zero (the default) or
	// negative: no hold.
	WarmHold time.Duration
	// SeparateReads makes every lease read its own range alone. By
	// default the leases of one Processor that lie side by side in one
	// physical partition share reads: the reader whose position is the
	// lowest reads their whole span once, and the others take their
	// changes from that page (each keeping its own position and
	// checkpoint) instead of reading again, so a change costs one read
	// however many of the Processor's leases its partition holds. Sharing
	// needs the container's partition key definition (read once) to tell
	// the documents of one lease from another's; until it is known, or if
	// a document's key cannot be computed, leases read alone.
	SeparateReads bool
	// Jitter is the fraction, in [0, 1), by which idle pauses are randomly
	// shortened. Zero means DefaultJitter; a negative value disables
	// jitter.
	Jitter float64
	// JitterSeed seeds the jitter; zero seeds from the run time.
	JitterSeed uint64
	// MaxItemCount is the largest number of documents asked for per read,
	// hence per Batch. Zero means DefaultMaxItemCount.
	MaxItemCount int32
	// StartFrom says where a lease that was never checkpointed starts.
	// The zero value is StartFromBeginning.
	StartFrom StartFrom
	// OnPositioned, when set, is called once per reader (with its lease's
	// ID) as soon as the reader holds a position for its whole range:
	// every change made after the call returns is delivered by this
	// reader or a later owner of the lease. With StartFromNow that is
	// after the reader's first read of each physical partition (the read
	// fixes "now"), so a query issued after the call covers whatever was
	// written before the feed's starting point, with no gap however late
	// that first read comes; with a checkpoint or another StartFrom, at
	// once. It runs on the reader's goroutine and must not block.
	OnPositioned func(leaseID string)
	// RetryInitial is the first pause before retrying a failed read,
	// handler call or checkpoint. Zero means DefaultRetryInitial.
	RetryInitial time.Duration
	// RetryMax caps the retry pause. Zero means DefaultRetryMax.
	RetryMax time.Duration
	// ReadTimeout bounds each change-feed read; a read that times out is
	// retried. Zero means DefaultReadTimeout.
	ReadTimeout time.Duration
	// Filter, when set, decides which changed documents reach the
	// Handler. A page whose documents are all filtered out is not handed
	// over and not checkpointed (a later checkpoint covers it), and counts
	// as "nothing new" for pacing. Use it when the container also holds
	// documents the handler ignores that are written often, such as the
	// leases themselves: a lease's own checkpoint write would otherwise
	// wake the reader of its range again and again. Default: every
	// document.
	Filter func(doc json.RawMessage) bool
	// CheckpointInterval, when positive, is the least time between two
	// checkpoints of a lease: a batch acknowledged sooner after the last
	// checkpoint is recorded by the first cycle ending after the interval
	// (a cycle reads every position of the lease once, so an idle lease
	// records it at its next read). Checkpoints then cost at most one write
	// per interval per lease; the price is that after a crash a new owner
	// may see again up to that much (a reader that stops with its lease
	// held records the pending checkpoint). Default 0: checkpoint after
	// every batch.
	CheckpointInterval time.Duration
	// Logger receives reader life-cycle events (Debug), retried errors
	// (Warn) and errors that cannot succeed by retrying (Error). Default
	// zap.NewNop().
	Logger *zap.Logger
	// Clock is the source of time for pauses and lag figures. Default the
	// system clock; tests and simulations may supply their own.
	Clock Clock
}

func (o Options) withDefaults() (Options, error) {
	switch {
	case o.ActiveDelay == 0:
		o.ActiveDelay = DefaultActiveDelay
	case o.ActiveDelay < 0:
		o.ActiveDelay = 0
	}
	if o.IdleCeiling == 0 {
		o.IdleCeiling = DefaultIdleCeiling
	}
	if o.IdleCeiling < o.ActiveDelay {
		return o, fmt.Errorf("changefeed: IdleCeiling %v is below ActiveDelay %v", o.IdleCeiling, o.ActiveDelay)
	}
	if o.BackoffFactor == 0 {
		o.BackoffFactor = DefaultBackoffFactor
	}
	if o.BackoffFactor < 1 {
		return o, fmt.Errorf("changefeed: BackoffFactor %v is below 1", o.BackoffFactor)
	}
	switch {
	case o.Jitter == 0:
		o.Jitter = DefaultJitter
	case o.Jitter < 0:
		o.Jitter = 0
	case o.Jitter >= 1:
		return o, fmt.Errorf("changefeed: Jitter %v is not below 1", o.Jitter)
	}
	if o.MaxItemCount == 0 {
		o.MaxItemCount = DefaultMaxItemCount
	}
	if o.MaxItemCount < 0 {
		return o, fmt.Errorf("changefeed: MaxItemCount %d is negative", o.MaxItemCount)
	}
	if o.RetryInitial == 0 {
		o.RetryInitial = DefaultRetryInitial
	}
	if o.RetryMax == 0 {
		o.RetryMax = DefaultRetryMax
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.CheckpointInterval < 0 {
		return o, fmt.Errorf("changefeed: CheckpointInterval %v is negative", o.CheckpointInterval)
	}
	if o.ReadTimeout < 0 {
		return o, fmt.Errorf("changefeed: ReadTimeout %v is negative", o.ReadTimeout)
	}
	if o.RetryInitial < 0 || o.RetryMax < o.RetryInitial {
		return o, fmt.Errorf("changefeed: retry pauses %v..%v are invalid", o.RetryInitial, o.RetryMax)
	}
	if err := o.StartFrom.validate(); err != nil {
		return o, err
	}
	if o.WarmHold < 0 {
		o.WarmHold = 0
	}
	if o.EmptyReadBudget < 0 || math.IsNaN(o.EmptyReadBudget) || math.IsInf(o.EmptyReadBudget, 0) {
		return o, fmt.Errorf("changefeed: EmptyReadBudget %v is not a positive number of RU per second", o.EmptyReadBudget)
	}
	if o.ReadsPerChange < 0 || math.IsNaN(o.ReadsPerChange) || math.IsInf(o.ReadsPerChange, 0) {
		return o, fmt.Errorf("changefeed: ReadsPerChange %v is not a positive number", o.ReadsPerChange)
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Clock == nil {
		o.Clock = clock.System{}
	}
	return o, nil
}

type startKind uint8

const (
	startBeginning startKind = iota
	startNow
	startTime
)

// StartFrom says where reading starts on a lease that carries no
// continuation. Build one with StartFromBeginning, StartFromNow or
// StartFromTime; the zero value is StartFromBeginning.
type StartFrom struct {
	kind startKind
	t    time.Time
}

// StartFromBeginning reads every document's current version from the start
// of the container's history.
func StartFromBeginning() StartFrom { return StartFrom{} }

// StartFromNow skips what was written before the lease is first read. The
// position is pinned by a checkpoint right after that first read, so a
// later owner of the lease continues from there instead of from its own
// "now".
func StartFromNow() StartFrom { return StartFrom{kind: startNow} }

// StartFromTime starts with the changes made at or after t (at the
// service's one-second resolution).
func StartFromTime(t time.Time) StartFrom { return StartFrom{kind: startTime, t: t} }

// String describes the starting point.
func (s StartFrom) String() string {
	switch s.kind {
	case startNow:
		return "now"
	case startTime:
		return s.t.UTC().Format(time.RFC3339)
	default:
		return "beginning"
	}
}

func (s StartFrom) validate() error {
	if s.kind == startTime && s.t.IsZero() {
		return errors.New("changefeed: StartFromTime needs a non-zero time")
	}
	return nil
}

// Clock is a source of time. The Processor uses it for every pause (polling,
// retries) and for the timestamps of lag figures.
type Clock = clock.Clock

// Timer is a one-shot timer made by a Clock.
type Timer = clock.Timer
