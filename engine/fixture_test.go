package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/internal/clock/clocktest"
	"github.com/durafeed/durafeed/leasestore"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/wakeup"
)

// fakeLeases is a session's lease store driven by the test: acquire, lose
// and expire fire leasestore.Options' callbacks as the real store does
// (OnChange with the store's lock held).
type fakeLeases struct {
	opts leasestore.Options
	fs   *fakeStore // records Release and Run's return in the fake store's call log

	mu      sync.Mutex
	owned   map[int]leasestore.LeaseInfo
	members []string
	epoch   int64
	kicks   int

	runDone chan struct{} // closed when Run returned
}

var _ Leases = (*fakeLeases)(nil)

func (l *fakeLeases) Run(ctx context.Context) error {
	<-ctx.Done()
	l.fs.mu.Lock()
	l.fs.record(storeCall{Op: opLeasesRunReturn})
	l.fs.mu.Unlock()
	close(l.runDone)
	return nil
}

// Release hands every lease off, as the real store does: EventLost
// (ReasonReleased) for each.
func (l *fakeLeases) Release(context.Context) error {
	l.fs.mu.Lock()
	l.fs.record(storeCall{Op: opLeasesRelease})
	l.fs.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, info := range l.owned {
		delete(l.owned, i)
		l.opts.OnChange(leasestore.Event{Kind: leasestore.EventLost, Lease: info, Reason: leasestore.ReasonReleased})
	}
	return nil
}

func (l *fakeLeases) Holder() string { return "holder:" + l.opts.ReplicaID }

func (l *fakeLeases) Owned() []leasestore.LeaseInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []leasestore.LeaseInfo
	for _, info := range l.owned {
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

func (l *fakeLeases) Leases() []leasestore.LeaseInfo { return l.Owned() }

func (l *fakeLeases) Members() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.members)
}

func (l *fakeLeases) OwnerOf(index int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.owned[index].Owner
}

func (l *fakeLeases) WakeEndpoint(string) (leasestore.WakeEndpoint, bool) {
	return leasestore.WakeEndpoint{}, false
}
func (l *fakeLeases) PeerEndpoints() []leasestore.WakeEndpoint { return nil }
func (l *fakeLeases) WakesReported() []leasestore.WakesReport  { return nil }

func (l *fakeLeases) Kick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.kicks++
}

// info is lease i as the real store describes it.
func (l *fakeLeases) info(i int, continuation string) leasestore.LeaseInfo {
	return leasestore.LeaseInfo{ID: fmt.Sprintf("lease:%d", i), Index: i, Range: l.opts.Ranges[i], Owner: l.opts.ReplicaID,
		Epoch: l.epoch, Continuation: continuation}
}

// acquire makes this replica hold lease i; continuation "" is a lease
// never read before (its reader starts at "now").
func (l *fakeLeases) acquire(i int, continuation string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.epoch++
	info := l.info(i, continuation)
	l.owned[i] = info
	l.opts.OnChange(leasestore.Event{Kind: leasestore.EventAcquired, Lease: info})
}

// lose takes lease i from this replica (another replica took it).
func (l *fakeLeases) lose(i int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	info, ok := l.owned[i]
	if !ok {
		return
	}
	delete(l.owned, i)
	l.opts.OnChange(leasestore.Event{Kind: leasestore.EventLost, Lease: info, Reason: leasestore.ReasonTaken})
}

// setMembers replaces the live replicas the store reports.
func (l *fakeLeases) setMembers(m ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.members = m
}

// fakeFeed is a session's change-feed processor: it reads nothing (the
// test calls Engine.handle itself) and records Stop and Wake.
type fakeFeed struct {
	opts changefeed.Options
	fs   *fakeStore

	mu    sync.Mutex
	wakes []changefeed.Range

	runDone chan struct{} // closed when Run returned
}

var _ Feed = (*fakeFeed)(nil)

func (p *fakeFeed) Run(ctx context.Context) error {
	<-ctx.Done()
	close(p.runDone)
	return ctx.Err()
}

func (p *fakeFeed) Stop(context.Context) error {
	p.fs.mu.Lock()
	defer p.fs.mu.Unlock()
	p.fs.record(storeCall{Op: opFeedStop})
	return nil
}

func (p *fakeFeed) Wake(r changefeed.Range) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wakes = append(p.wakes, r)
}

func (p *fakeFeed) Lag(context.Context) ([]changefeed.RangeLag, error) { return nil, nil }

// woken returns the ranges Wake was called with.
func (p *fakeFeed) woken() []changefeed.Range {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.wakes)
}

// fakeSession is one session's lease store and feed processor.
type fakeSession struct {
	leases *fakeLeases
	feed   *fakeFeed
}

// fixture is an Engine over fakeStore and fake sessions, on a manual
// clock.
type fixture struct {
	t   *testing.T
	clk *clocktest.Manual
	fs  *fakeStore
	e   *Engine

	mu       sync.Mutex
	sessions []*fakeSession
	started  chan *fakeSession // each session as it is built
}

// fixtureMembers are the live replicas a fake lease store reports by
// default: with testBlocks leases a replica's fair share is then one
// lease, so Join returns once one lease is held and caught up.
var fixtureMembers = []string{"self", "peer-1", "peer-2", "peer-3"}

// newFixture returns an engine named "self" over fakes, with o's options
// on top of the fixture's: the manual clock, testBlocks leases, and no
// idle leave or safety sweep unless o asks. Close(false) runs at cleanup,
// which then checks that every fake session's Run has returned.
func newFixture(t *testing.T, o Options) *fixture {
	t.Helper()
	f := &fixture{t: t, clk: clocktest.NewManual(fakeEpoch), started: make(chan *fakeSession, 16)}
	f.fs = newFakeStore(f.clk)
	o.Clock = f.clk
	if o.ReplicaID == "" {
		o.ReplicaID = "self"
	}
	if o.Leases == nil {
		o.Leases = &LeaseOptions{Blocks: testBlocks}
	}
	if o.IdleLeave == 0 {
		o.IdleLeave = 1000 * time.Hour
	}
	if o.SafetySweepInterval == 0 {
		o.SafetySweepInterval = 1000 * time.Hour
	}
	e, err := New(context.Background(), Backend{Store: f.fs, Session: f.newSession}, o)
	require.NoError(t, err)
	f.e = e
	t.Cleanup(func() {
		e.Close(false)
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, s := range f.sessions {
			for name, ch := range map[string]chan struct{}{"lease store": s.leases.runDone, "feed": s.feed.runDone} {
				select {
				case <-ch:
				default:
					t.Errorf("session %d: the %s still runs after Close", i, name)
				}
			}
		}
	})
	return f
}

// newSession is the fixture's Backend.Session.
func (f *fixture) newSession(lo leasestore.Options, h changefeed.Handler, fo changefeed.Options) (Leases, Feed, error) {
	s := &fakeSession{
		leases: &fakeLeases{opts: lo, fs: f.fs, owned: map[int]leasestore.LeaseInfo{}, members: slices.Clone(fixtureMembers), runDone: make(chan struct{})},
		feed:   &fakeFeed{opts: fo, fs: f.fs, runDone: make(chan struct{})},
	}
	f.mu.Lock()
	f.sessions = append(f.sessions, s)
	f.mu.Unlock()
	f.started <- s
	return s.leases, s.feed, nil
}

// session returns the latest session built.
func (f *fixture) session() *fakeSession {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NotEmpty(f.t, f.sessions, "no session was built")
	return f.sessions[len(f.sessions)-1]
}

// sessionCount returns how many sessions were built.
func (f *fixture) sessionCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sessions)
}

// awaitSession returns the next session built (Join or a fetch joining
// on another goroutine), once the engine has published it: its lease
// store and readers start before that (see the report of this suite: a
// catch-up finished before then would signal nothing).
func (f *fixture) awaitSession() *fakeSession {
	f.t.Helper()
	var s *fakeSession
	select {
	case s = <-f.started:
	case <-time.After(hangGuard):
		f.t.Fatal("no session was built")
	}
	require.Eventually(f.t, func() bool {
		cur := f.e.sess.Load()
		return cur != nil && cur.store == Leases(s.leases)
	}, hangGuard, time.Millisecond, "the session is not published")
	return s
}

// ctx is a context bounded by hangGuard.
func (f *fixture) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	f.t.Cleanup(cancel)
	return ctx
}

// leaseSlots returns the slots of lease i.
func (f *fixture) leaseSlots(i int) wakeup.Set { return f.e.blockSlots(i) }

// joinOwning joins the replica, acquires leases (pinned: read before) and
// returns once Join has returned and their catch-up has run.
func (f *fixture) joinOwning(leases ...int) *fakeSession {
	f.t.Helper()
	_, err := f.e.join()
	require.NoError(f.t, err)
	s := f.awaitSession()
	var set wakeup.Set
	for _, i := range leases {
		s.leases.acquire(i, "checkpoint")
		set = set.Union(f.leaseSlots(i))
	}
	require.NoError(f.t, f.e.Join(f.ctx()))
	f.awaitCaughtUp(set)
	return s
}

// awaitCaughtUp waits until the catch-up of set has run (its rows are
// signalled before the slots' heads count as complete).
func (f *fixture) awaitCaughtUp(set wakeup.Set) {
	f.t.Helper()
	require.Eventually(f.t, func() bool {
		h := f.e.heads
		h.mu.Lock()
		defer h.mu.Unlock()
		return set.Difference(h.complete).IsEmpty()
	}, hangGuard, time.Millisecond, "catch-up of %v", set)
}

// handle hands the engine a change-feed page of docs.
func (f *fixture) handle(docs ...json.RawMessage) {
	f.t.Helper()
	require.NoError(f.t, f.e.handle(f.ctx(), changefeed.Batch{Documents: docs}))
}

// fetchOrch runs one FetchOrchestrationItem with a zero poll timeout: it
// takes what is due now and returns.
func (f *fixture) fetchOrch() *durable.OrchestrationItem {
	f.t.Helper()
	item, err := f.e.FetchOrchestrationItem(f.ctx(), testLock, 0, nil)
	require.NoError(f.t, err)
	return item
}

// fetchWork runs one FetchWorkItem with a zero poll timeout, untagged
// items and no session.
func (f *fixture) fetchWork() *durable.LockedWorkItem {
	f.t.Helper()
	return f.fetchWorkWith(nil, durable.DefaultOnlyTags())
}

func (f *fixture) fetchWorkWith(session *durable.SessionFetchConfig, tags durable.TagFilter) *durable.LockedWorkItem {
	f.t.Helper()
	item, err := f.e.FetchWorkItem(f.ctx(), testLock, 0, session, tags)
	require.NoError(f.t, err)
	return item
}

// pending returns the keys of the hub's pending wakeups (a Scan as
// "scan:<slot>"), and those due now.
func pendingKeys(h *wakeup.Hub) (all, due []string) {
	for _, p := range h.Snapshot().Pending {
		k := p.Instance
		if p.Kind == wakeup.Scan {
			k = scanKey(p.Slot)
		}
		all = append(all, k)
		if p.Due {
			due = append(due, k)
		}
	}
	return all, due
}

// scanKey is pendingKeys' name of a Scan of slot.
func scanKey(slot int) string { return fmt.Sprintf("scan:%d", slot) }

// pendingAt returns the pending wakeup of key in h.
func pendingAt(t *testing.T, h *wakeup.Hub, key string) wakeup.PendingWakeup {
	t.Helper()
	for _, p := range h.Snapshot().Pending {
		if p.Instance == key {
			return p
		}
	}
	t.Fatalf("no pending wakeup %q", key)
	return wakeup.PendingWakeup{}
}

// instIn returns an instance id (prefix-n) whose slot lies in set.
func instIn(t *testing.T, set wakeup.Set, prefix string) string {
	t.Helper()
	for n := range 100_000 {
		inst := fmt.Sprintf("%s-%d", prefix, n)
		if set.Contains(slots.Of(inst)) {
			return inst
		}
	}
	t.Fatalf("no instance of %v", set)
	return ""
}

// instanceJSON is an instance document as the change feed shows it:
// locked until lockedUntil (ms) when that is set.
func instanceJSON(t *testing.T, instance string, lockedUntil int64) json.RawMessage {
	t.Helper()
	doc := map[string]any{"id": "instance", "instanceId": instance, "type": "instance", "lockedUntil": lockedUntil}
	if lockedUntil > 0 {
		doc["lockToken"] = "token"
	}
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	return b
}

// hintJSON is another replica's backlog hint document.
func hintJSON(t *testing.T, h hintDoc) json.RawMessage {
	t.Helper()
	h.ID, h.Type, h.InstanceID = hintID(h.Replica), typeHint, leasestore.DefaultPartitionKeyValue
	if h.Slots == nil {
		h.Slots = []int{}
	}
	b, err := json.Marshal(h)
	require.NoError(t, err)
	return b
}
