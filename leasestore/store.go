package leasestore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/internal/epk"
	"go.uber.org/zap"
)

// ErrRangesMismatch reports that the lease documents already stored cover
// other ranges than Options.Ranges: replicas (or an earlier deployment) were
// configured differently. Run returns an error wrapping it.
var ErrRangesMismatch = errors.New("leasestore: stored lease ranges do not match Options.Ranges")

// ErrDuplicateReplica reports that another running process registered a
// heartbeat under this replica's ReplicaID. Run returns an error wrapping
// it after closing Done of every lease it held.
var ErrDuplicateReplica = errors.New("leasestore: another process uses this ReplicaID")

// ErrReleased is returned by Run when the Store was already released.
var ErrReleased = errors.New("leasestore: store released")

// EventKind tells what an Event reports.
type EventKind int

const (
	// EventAcquired reports that this replica acquired a lease.
	EventAcquired EventKind = iota + 1
	// EventLost reports that a lease's Done was closed.
	EventLost
)

// String returns "acquired" or "lost".
func (k EventKind) String() string {
	switch k {
	case EventAcquired:
		return "acquired"
	case EventLost:
		return "lost"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Reason tells why a lease was lost.
type Reason string

// Reasons for losing a lease.
const (
	// ReasonHandedOff: this replica handed the lease to an under-loaded
	// replica that asked for it (a steal request).
	ReasonHandedOff Reason = "handed-off"
	// ReasonTaken: the lease document shows another owner or epoch (taken
	// over, or found so by Checkpoint).
	ReasonTaken Reason = "taken"
	// ReasonFenced: this replica could not write its heartbeat for
	// LeaseExpiry - HeartbeatInterval and gave up its leases before
	// others may take them.
	ReasonFenced Reason = "fenced"
	// ReasonExpired: another replica declared this one dead.
	ReasonExpired Reason = "expired"
	// ReasonReleased: Release was called.
	ReasonReleased Reason = "released"
	// ReasonStopped: Run returned.
	ReasonStopped Reason = "stopped"
)

// LeaseInfo describes a lease.
type LeaseInfo struct {
	// ID is the lease document id, "lease:<Index>".
	ID string
	// Index is the lease's position in Options.Ranges.
	Index int
	// Range is the EPK range the lease covers.
	Range epk.Range
	// Owner is the ReplicaID holding it.
	Owner string
	// Epoch is the ownership epoch this replica holds it under.
	Epoch int64
	// Continuation is the last checkpointed continuation.
	Continuation string
	// AcquiredAt is when the lease passed to Owner, by the clock of the
	// replica that wrote the change (informational; zero when unknown).
	AcquiredAt time.Time
}

// Event is an ownership change of this replica (see Options.OnChange).
type Event struct {
	Kind  EventKind
	Lease LeaseInfo
	// Reason is set for EventLost.
	Reason Reason
}

// leaseView is the latest known version of a lease document.
type leaseView struct {
	doc   leaseDoc
	etag  azcore.ETag
	known bool
}

// memberView is what this replica knows of another replica's heartbeat.
type memberView struct {
	doc  ownerDoc
	etag azcore.ETag
	// changedAt is this process's monotonic time at which it last saw the
	// document's ETag change (or first saw the document).
	changedAt time.Time
}

// Store keeps change-feed leases as documents in a Cosmos DB container and
// coordinates their ownership among the replicas sharing it. It implements
// changefeed.LeaseSource. Create it with New, run it with Run, stop it
// gracefully with Release.
type Store struct {
	c           *azcosmos.ContainerClient
	opts        Options
	id          string
	log         *zap.Logger
	fenceAfter  time.Duration
	resyncEvery time.Duration

	acquired    chan changefeed.Lease
	runDone     chan struct{}
	releaseCh   chan *releaseReq
	kickBalance chan struct{}
	kickWatch   chan struct{}
	beatCh      chan struct{}
	deliverCh   chan struct{}
	kickBeat    chan struct{}
	feedCont    string // change-feed continuation; setup, then the watch loop only

	metaMu    sync.Mutex
	meta      atomic.Pointer[meta]
	fatalCh   chan struct{}
	fatalOnce sync.Once

	mu           sync.Mutex
	leases       []leaseView
	extra        []string // lease documents beyond len(Ranges)
	members      map[string]*memberView
	held         map[int]*lease
	deliverQ     []*lease
	registered   bool
	incarnation  string
	mySeq        int64
	myETag       azcore.ETag
	lastBeat     time.Time
	firstBeat    time.Time       // first registration, for tests and logs
	tried        map[string]bool // incarnations this process wrote
	ran          bool            // Run was called
	running      bool            // Run is between setup and return
	releasing    bool
	released     bool
	releaseAsked bool
	cancelSetup  context.CancelFunc // set while Run is in setup
	backoffUntil time.Time
	fatal        error
}

// New returns a Store for the leases kept in container. It does no I/O;
// Run creates missing lease documents, registers the heartbeat and starts
// acquiring.
func New(container *azcosmos.ContainerClient, opts Options) (*Store, error) {
	if container == nil {
		return nil, errors.New("leasestore: nil container")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	o.Ranges = append([]epk.Range(nil), o.Ranges...)
	s := &Store{
		c:           container,
		opts:        o,
		id:          o.ReplicaID,
		log:         o.Logger.With(zap.String("replica", o.ReplicaID)),
		fenceAfter:  o.LeaseExpiry - o.HeartbeatInterval,
		resyncEvery: resyncPeriods * o.HeartbeatInterval,
		acquired:    make(chan changefeed.Lease),
		runDone:     make(chan struct{}),
		releaseCh:   make(chan *releaseReq),
		kickBalance: make(chan struct{}, 1),
		kickWatch:   make(chan struct{}, 1),
		beatCh:      make(chan struct{}, 1),
		deliverCh:   make(chan struct{}, 1),
		fatalCh:     make(chan struct{}),
		kickBeat:    make(chan struct{}, 1),
		leases:      make([]leaseView, len(o.Ranges)),
		members:     map[string]*memberView{},
		held:        map[int]*lease{},
		tried:       map[string]bool{},
	}
	return s, nil
}

var _ changefeed.LeaseSource = (*Store)(nil)

// ReplicaID returns this replica's id.
func (s *Store) ReplicaID() string { return s.id }

// Acquired delivers each lease this replica acquires, once. A lease whose
// Done closed before it could be delivered is skipped. The channel is
// closed when Run returns.
func (s *Store) Acquired() <-chan changefeed.Lease { return s.acquired }

// Owned returns a snapshot of the leases this replica currently holds,
// ordered by index.
func (s *Store) Owned() []LeaseInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]LeaseInfo, 0, len(s.held))
	for _, l := range s.held {
		out = append(out, s.infoLocked(l))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

// Leases returns every lease as this replica last saw its document (its
// own writes, the lease partition's change feed and queries), ordered by
// index: who owns which range (Owner "" for a free lease), under which
// epoch, since when. Another replica's view may be newer by a watch
// period.
func (s *Store) Leases() []LeaseInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]LeaseInfo, 0, len(s.leases))
	for i, v := range s.leases {
		if !v.known {
			continue
		}
		li := LeaseInfo{ID: leaseID(i), Index: i, Range: s.opts.Ranges[i], Owner: v.doc.Owner, Epoch: v.doc.Epoch,
			Continuation: v.doc.Continuation}
		if at, err := time.Parse(time.RFC3339Nano, v.doc.AcquiredAt); err == nil {
			li.AcquiredAt = at
		}
		out = append(out, li)
	}
	return out
}

// Members returns the ReplicaIDs this replica currently considers live
// (itself included while its heartbeat is healthy), sorted.
func (s *Store) Members() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var out []string
	if s.healthyLocked(now) {
		out = append(out, s.id)
	}
	for r, m := range s.members {
		if s.memberLiveLocked(m, now) {
			out = append(out, r)
		}
	}
	sort.Strings(out)
	return out
}

func (s *Store) infoLocked(l *lease) LeaseInfo {
	return LeaseInfo{
		ID:           leaseID(l.idx),
		Index:        l.idx,
		Range:        l.rng,
		Owner:        s.id,
		Epoch:        l.epoch,
		Continuation: l.cont,
	}
}

// healthyLocked reports whether this replica may hold leases: registered,
// not releasing, and its last successful heartbeat was sent less than
// fenceAfter ago.
func (s *Store) healthyLocked(now time.Time) bool {
	return s.registered && !s.releasing && now.Sub(s.lastBeat) < s.fenceAfter
}

// memberLiveLocked reports whether another replica counts as live: its
// heartbeat says live and changed less than LeaseExpiry ago on this
// process's monotonic clock.
func (s *Store) memberLiveLocked(m *memberView, now time.Time) bool {
	return m.doc.State == stateLive && now.Sub(m.changedAt) < s.opts.LeaseExpiry
}

// memberDeadLocked reports whether another replica's leases may be taken:
// declared expired, or its heartbeat unchanged for LeaseExpiry (whatever
// its state), or (m == nil) no heartbeat document at all.
func (s *Store) memberDeadLocked(m *memberView, now time.Time) bool {
	return m == nil || m.doc.State == stateExpired || now.Sub(m.changedAt) >= s.opts.LeaseExpiry
}

// applyLeaseLocked installs a lease document version if it is newer than
// the known one. It reports whether ownership (owner, epoch or steal
// request) changed, and closes a held lease the document no longer grants.
func (s *Store) applyLeaseLocked(d leaseDoc, etag azcore.ETag) (changed bool) {
	i := d.Index
	if i < 0 || i >= len(s.leases) || d.ID != leaseID(i) {
		if i >= len(s.leases) && d.ID == leaseID(i) {
			s.noteExtraLocked(d.ID)
		}
		return false
	}
	v := &s.leases[i]
	if v.known && d.Rev <= v.doc.Rev {
		return false
	}
	changed = !v.known || v.doc.Owner != d.Owner || v.doc.Epoch != d.Epoch || v.doc.StealBy != d.StealBy
	if v.known && v.doc.StealBy == s.id && d.StealBy == "" && d.Owner == v.doc.Owner {
		// Our steal request was refused: do not ask again at once.
		s.backoffLocked()
	}
	v.doc, v.etag, v.known = d, etag, true
	if l := s.held[i]; l != nil {
		if d.Owner != s.id || d.Epoch != l.epoch {
			// Nobody takes a held lease without our consent unless we were
			// already meant to have let go: worth a warning.
			s.log.Warn("held lease changed owner", zap.Int("lease", i), zap.String("owner", d.Owner), zap.Int64("epoch", d.Epoch))
			s.loseLocked(l, ReasonTaken)
		} else {
			l.cont = d.Continuation
		}
	}
	return changed
}

func (s *Store) noteExtraLocked(id string) {
	for _, e := range s.extra {
		if e == id {
			return
		}
	}
	s.extra = append(s.extra, id)
}

// applyOwnerLocked installs a heartbeat document version read from the
// change feed or a query (reads are sequential, so never older than what
// those reads saw before). It reports whether membership changed.
func (s *Store) applyOwnerLocked(o ownerDoc, etag azcore.ETag, now time.Time) (changed bool) {
	if o.Replica == "" || o.ID != ownerID(o.Replica) {
		return false
	}
	if o.Replica == s.id {
		// Our own document: only a declaration of our death matters here;
		// the heartbeat loop handles everything else.
		if s.registered && o.Incarnation == s.incarnation && o.State == stateExpired {
			s.log.Warn("declared dead by another replica; giving up leases", zap.String("by", o.ExpiredBy))
			s.fenceLocked(ReasonExpired)
			s.registered = false
			s.signal(s.kickBeat)
			return true
		}
		return false
	}
	m := s.members[o.Replica]
	switch {
	case m == nil:
		s.members[o.Replica] = &memberView{doc: o, etag: etag, changedAt: now}
		return true
	case m.doc.Incarnation != o.Incarnation:
		*m = memberView{doc: o, etag: etag, changedAt: now}
		return true
	case o.Seq > m.doc.Seq:
		changed = m.doc.State != o.State
		if etag != m.etag {
			m.changedAt = now
		}
		m.doc, m.etag = o, etag
		return changed
	}
	return false
}

// loseLocked closes a held lease's Done.
func (s *Store) loseLocked(l *lease, why Reason) {
	if l.closed {
		return
	}
	l.closed = true
	close(l.done)
	if s.held[l.idx] == l {
		delete(s.held, l.idx)
	}
	s.log.Debug("lease lost", zap.Int("lease", l.idx), zap.Int64("epoch", l.epoch), zap.String("reason", string(why)))
	if s.opts.OnChange != nil {
		s.opts.OnChange(Event{Kind: EventLost, Lease: s.infoLocked(l), Reason: why})
	}
}

// fenceLocked closes every held lease.
func (s *Store) fenceLocked(why Reason) {
	for _, l := range s.held {
		s.loseLocked(l, why)
	}
}

// installLocked records a lease this replica just acquired (its document,
// as written, names us with epoch d.Epoch) and queues its delivery. It
// refuses (returns false) unless the replica is healthy now: a write
// answered after the self-fencing deadline must not start a holding.
func (s *Store) installLocked(d leaseDoc, now time.Time) bool {
	if !s.healthyLocked(now) || d.Owner != s.id {
		return false
	}
	if old := s.held[d.Index]; old != nil {
		if old.epoch == d.Epoch {
			return true
		}
		s.loseLocked(old, ReasonTaken)
	}
	l := &lease{
		s:     s,
		idx:   d.Index,
		rng:   s.opts.Ranges[d.Index],
		epoch: d.Epoch,
		cont:  d.Continuation,
		done:  make(chan struct{}),
	}
	s.held[d.Index] = l
	s.log.Debug("lease acquired", zap.Int("lease", l.idx), zap.Int64("epoch", l.epoch))
	if s.opts.OnChange != nil {
		s.opts.OnChange(Event{Kind: EventAcquired, Lease: s.infoLocked(l)})
	}
	s.deliverQ = append(s.deliverQ, l)
	s.signal(s.deliverCh)
	return true
}

func (s *Store) signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// deliverLoop hands acquired leases to the consumer of Acquired.
func (s *Store) deliverLoop(ctx context.Context) {
	for {
		s.mu.Lock()
		var l *lease
		if len(s.deliverQ) > 0 {
			l = s.deliverQ[0]
			s.deliverQ[0] = nil
			s.deliverQ = s.deliverQ[1:]
		}
		s.mu.Unlock()
		if l == nil {
			select {
			case <-s.deliverCh:
				continue
			case <-ctx.Done():
				return
			}
		}
		select {
		case s.acquired <- l:
		case <-l.done:
		case <-ctx.Done():
			return
		}
	}
}

// setFatal records an error that ends Run.
func (s *Store) setFatal(err error) {
	s.mu.Lock()
	if s.fatal == nil {
		s.fatal = err
	}
	s.mu.Unlock()
	s.fatalOnce.Do(func() { close(s.fatalCh) })
}
