// Package memprovider is an in-memory reference implementation of
// durable.Provider and durable.ProviderAdmin.
//
// It exists to be obviously correct rather than fast: one mutex guards all
// state, every operation validates first and then applies its effects, so a
// failed call leaves nothing behind. Events and work items are kept in their
// JSON wire form (history.Marshal and durable.MarshalWorkItem) and decoded on
// every read, so the deserialization contract (HistoryError at fetch, errors
// from Read, append-only ack) is exercised for real.
//
// A Store is the shared data, like one database; Store.Open returns a
// provider handle on it, like one replica of a deployment. Handles share all
// data. A handle from Open short-polls: its fetches return at once and ignore
// their poll timeout. A handle from Store.OpenLongPolling long-polls: a fetch
// that finds no work waits up to its poll timeout for work to become
// eligible (see longpoll.go).
//
// The conformance suite (package conformance) is checked against this
// implementation before it judges the Cosmos DB provider.
package memprovider

import (
	"crypto/sha256"
	"sort"
	"sync"
	"time"

	"github.com/durafeed/durafeed/durable"
)

// Store is the shared state of a set of providers: instances, histories,
// queues, locks, sessions and key-value entries. The zero value is not
// usable; create one with NewStore.
type Store struct {
	mu  sync.Mutex
	now func() time.Time
	// afterFuncAt arms a timer on the store's clock (see Clock).
	afterFuncAt func(at time.Time, f func()) (stop func() bool)
	// changed is closed, and cleared, by notify: long-polling fetches wait
	// on it. It is nil when nobody has subscribed since the last notify.
	changed chan struct{}

	// seq orders queue messages (enqueue order) and instances (creation order).
	seq uint64

	instances map[string]*instanceRec
	// history holds encoded events: instance → execution → event id → bytes.
	// It is separate from instances because AppendWithExecution may write
	// history for an instance that has no metadata yet.
	history  map[string]map[uint64]map[uint64][]byte
	orchQ    []*orchMsg
	workQ    []*workMsg
	locks    map[string]*instLock // by instance id
	sessions map[string]*sessionRec
	// kv holds each instance's key-value state: the store of ended
	// executions and the current execution's delta (see kvState).
	kv map[string]*kvState
	// requests records client calls by request id: instance → request id
	// (see durable.RequestIDOf).
	requests map[string]map[string]requestRec
}

// RequestRetention is how long a store remembers a client call's request
// id: a resend of the call within it takes effect once.
const RequestRetention = 24 * time.Hour

// requestRec is a recorded client call.
type requestRec struct {
	kind   string
	digest [sha256.Size]byte
	at     time.Time
}

// callDigest is the digest of e's call: its encoding without the span it
// was made in.
func callDigest(e encodedItem) [sha256.Size]byte {
	data := e.data
	if b, err := durable.MarshalWorkItem(durable.WithoutTraceParent(e.item)); err == nil {
		data = b
	}
	return sha256.Sum256(data)
}

// checkRequest reports what is recorded of e's request id, writing
// nothing (durable.RequestChecker).
func (s *Store) checkRequest(e encodedItem) durable.RequestState {
	rid := durable.RequestIDOf(e.item)
	if rid == "" {
		return durable.RequestUnknown
	}
	old, ok := s.requests[e.item.TargetInstance()][rid]
	switch {
	case !ok || s.now().Sub(old.at) >= RequestRetention:
		return durable.RequestUnknown
	case old.kind != e.item.Kind() || old.digest != callDigest(e):
		return durable.RequestDifferent
	}
	return durable.RequestSame
}

// recordRequest records e's request id, if it has one, and reports
// whether the same call was recorded already (then nothing is to be
// enqueued). The same id with another call is a permanent error. Records
// older than RequestRetention are forgotten.
func (s *Store) recordRequest(op string, e encodedItem) (dup bool, err error) {
	rid := durable.RequestIDOf(e.item)
	if rid == "" {
		return false, nil
	}
	inst := e.item.TargetInstance()
	now := s.now()
	recs := s.requests[inst]
	if recs == nil {
		recs = map[string]requestRec{}
		s.requests[inst] = recs
	}
	for id, r := range recs {
		if now.Sub(r.at) >= RequestRetention {
			delete(recs, id)
		}
	}
	rec := requestRec{kind: e.item.Kind(), digest: callDigest(e), at: now}
	if old, ok := recs[rid]; ok {
		if old.kind != rec.kind || old.digest != rec.digest {
			return false, durable.Permanent(op, durable.ErrRequestReused, "request id was already used for a different %s call on this instance", old.kind)
		}
		return true, nil
	}
	recs[rid] = rec
	return false, nil
}

// instanceRec is an instance's metadata, created by the first ack.
type instanceRec struct {
	id          string
	name        string
	version     string
	parent      string
	currentExec uint64
	createdAt   time.Time
	updatedAt   time.Time
	createdSeq  uint64

	customStatus        *string
	customStatusVersion uint64

	execs map[uint64]*execRec
}

// execRec is one execution's metadata.
type execRec struct {
	id          uint64
	status      durable.Status
	output      *string
	startedAt   time.Time
	completedAt time.Time
	pinned      *durable.SemVer
}

// orchMsg is an orchestrator-queue message.
type orchMsg struct {
	seq       uint64
	instance  string
	kind      string
	data      []byte
	visibleAt time.Time
	// token is the lock token of the fetch that tagged the message ("" when
	// untagged). The message is locked while that instance lock is alive.
	token    string
	attempts uint32
}

// workMsg is a worker-queue message (an ActivityExecute).
type workMsg struct {
	seq         uint64
	instance    string
	execID      uint64
	activityID  uint64
	sessionID   string
	tag         string
	data        []byte
	visibleAt   time.Time
	token       string
	lockedUntil time.Time
	attempts    uint32
}

// instLock is an instance-level orchestration lock.
type instLock struct {
	instance string
	token    string
	until    time.Time
	// name and version are what the fetch reported, used if the ack creates
	// the instance without naming it in the metadata.
	name    string
	version string
}

// sessionRec is a worker session's ownership.
type sessionRec struct {
	owner        string
	lockedUntil  time.Time
	lastActivity time.Time
}

// NewStore returns an empty store using the wall clock.
func NewStore() *Store {
	return &Store{
		now:         time.Now,
		afterFuncAt: realAfterFuncAt(time.Now),
		instances:   map[string]*instanceRec{},
		history:     map[string]map[uint64]map[uint64][]byte{},
		locks:       map[string]*instLock{},
		sessions:    map[string]*sessionRec{},
		kv:          map[string]*kvState{},
		requests:    map[string]map[string]requestRec{},
	}
}

// SetClock replaces the store's time source (time.Now by default), for
// tests that control time. Long-poll timers then run on the wall clock, for
// the time remaining as now measures it when they are armed; use UseClock
// for a clock with its own timers. It must be called before the store is
// used concurrently.
func (s *Store) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now == nil {
		now = time.Now
	}
	s.now, s.afterFuncAt = now, realAfterFuncAt(now)
	s.notify()
}

// Open returns a new provider handle on the store, as a new replica of one
// deployment: handles share all data. The handle also implements
// durable.ProviderAdmin (see Provider.Admin).
// Its fetches short-poll; see OpenLongPolling.
func (s *Store) Open() durable.Provider { return &handle{s: s} }

// CorruptHistory overwrites every stored history event of the instance, in
// every execution, with bytes that cannot be decoded, for the
// deserialization-contract scenarios.
func (s *Store) CorruptHistory(instance string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, events := range s.history[instance] {
		for id := range events {
			events[id] = []byte(`{"type":"CorruptedByTest","event_id":` + "\x00}")
		}
	}
}

// MaxAttemptCount returns the highest attempt count among the instance's
// orchestrator-queue messages (0 when it has none).
func (s *Store) MaxAttemptCount(instance string) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var max uint32
	for _, m := range s.orchQ {
		if m.instance == instance && m.attempts > max {
			max = m.attempts
		}
	}
	return max
}

// nextSeq returns a new sequence number. Callers hold s.mu.
func (s *Store) nextSeq() uint64 {
	s.seq++
	return s.seq
}

// lockAlive returns the instance's lock if it has not expired.
func (s *Store) lockAlive(instance string, now time.Time) *instLock {
	l := s.locks[instance]
	if l == nil || !l.until.After(now) {
		return nil
	}
	return l
}

// lockByToken returns the instance lock holding token, expired or not.
func (s *Store) lockByToken(token string) *instLock {
	for _, l := range s.locks {
		if l.token == token {
			return l
		}
	}
	return nil
}

// orchLocked reports whether an orchestrator message is tagged by a live lock.
func (s *Store) orchLocked(m *orchMsg, now time.Time) bool {
	if m.token == "" {
		return false
	}
	l := s.lockAlive(m.instance, now)
	return l != nil && l.token == m.token
}

// workLocked reports whether a worker message is locked.
func workLocked(w *workMsg, now time.Time) bool {
	return w.token != "" && w.lockedUntil.After(now)
}

// currentExecution returns the execution whose history Read and fetch use:
// the instance's current execution, or for an instance without metadata the
// highest execution with stored history (0 when there is none).
func (s *Store) currentExecution(instance string) uint64 {
	if rec := s.instances[instance]; rec != nil {
		return rec.currentExec
	}
	var max uint64
	for id, events := range s.history[instance] {
		if len(events) > 0 && id > max {
			max = id
		}
	}
	return max
}

// hasHistory reports whether any event is stored for the instance.
func (s *Store) hasHistory(instance string) bool {
	for _, events := range s.history[instance] {
		if len(events) > 0 {
			return true
		}
	}
	return false
}

// sortedEvents returns an execution's encoded events ordered by event id.
func (s *Store) sortedEvents(instance string, exec uint64) [][]byte {
	events := s.history[instance][exec]
	ids := make([]uint64, 0, len(events))
	for id := range events {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	out := make([][]byte, len(ids))
	for i, id := range ids {
		out[i] = events[id]
	}
	return out
}

// currentStatus returns the status of the instance's current execution.
func (rec *instanceRec) currentStatus() durable.Status {
	if e := rec.execs[rec.currentExec]; e != nil {
		return e.status
	}
	return durable.StatusRunning
}

// instancesByCreation returns instance records, newest first.
func (s *Store) instancesByCreation() []*instanceRec {
	out := make([]*instanceRec, 0, len(s.instances))
	for _, rec := range s.instances {
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].createdSeq > out[j].createdSeq })
	return out
}

func cloneStr(p *string) *string {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
