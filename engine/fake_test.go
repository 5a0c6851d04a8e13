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

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/internal/clock"
	"github.com/durafeed/durafeed/outbox"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/store"
)

// This file holds the fixtures of the engine's core tests: an in-memory
// Store, a lease store and a change-feed processor the test drives by
// hand, a manual clock, and an Engine over them. No emulator: every I/O
// the engine makes is a call on fakeStore, recorded for assertions.

// hangGuard bounds every wait of these tests: it only catches hangs, never
// measures anything.
const hangGuard = 30 * time.Second

// testBlocks is the fixtures' lease count: 4 leases of 64 slots.
const testBlocks = 4

// testLock is the lock timeout the fixtures' fetches ask for.
const testLock = 30 * time.Second

// fakeEpoch is where manual clocks start: documents with visibleAt 0 are
// due, and times are the same in every run.
var fakeEpoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// storeOp names a call on fakeStore.
type storeOp string

const (
	opLockInstance    storeOp = "LockInstance"
	opLockWorkIn      storeOp = "LockWorkIn"
	opTryLockWork     storeOp = "TryLockWork"
	opReadWork        storeOp = "ReadWork"
	opLockWork        storeOp = "LockWork"
	opClaimSession    storeOp = "ClaimSession"
	opQueueHeads      storeOp = "QueueHeads"
	opStale           storeOp = "Stale"
	opFinishInstance  storeOp = "FinishInstance"
	opReleaseLocksOf  storeOp = "ReleaseLocksOf"
	opWriteHint       storeOp = "WriteHint"
	opContainerGone   storeOp = "ContainerGone"
	opDecodeFeedDoc   storeOp = "DecodeFeedDoc"
	opCreate          storeOp = "Create"
	opDelete          storeOp = "Delete"
	opFeedStop        storeOp = "feed.Stop"
	opLeasesRelease   storeOp = "leases.Release"
	opLeasesRunReturn storeOp = "leases.Run returned"
)

// storeCall is one recorded call: Op and the arguments it had.
type storeCall struct {
	Op        storeOp
	Instance  string // LockInstance, TryLockWork, ReadWork, LockWork, FinishInstance
	ID        string // TryLockWork, ReadWork, LockWork, Delete; ClaimSession's session
	Lock      store.LockRequest
	Work      store.WorkLockRequest
	Heads     store.HeadQuery
	Block     slots.Block // LockWorkIn
	Stale     store.StaleQuery
	Partition string          // WriteHint, Create, Delete
	Doc       json.RawMessage // WriteHint, Create
	Holder    string          // ReleaseLocksOf
}

// docKey names a document of fakeStore.
type docKey struct{ instance, id string }

// fakeDoc is a queue document of fakeStore.
type fakeDoc struct {
	store.QueueHead
	Settles   string
	SessionID string
	Tag       string
	version   int
}

// takeable reports whether a fetch may lock d at now (ms).
func (d *fakeDoc) takeable(now int64) bool { return d.VisibleAt <= now && d.LockedUntil <= now }

// fakeStore is an in-memory Store: orchestrator messages and worker items
// per instance, with visibility and lock expiries on the engine's clock,
// and instance locks. It records every call (calls, count). What it does
// not model (history, KV, turns' contents) the engine never looks at.
type fakeStore struct {
	clk Clock
	dec *store.Store // DecodeFeedDoc is a pure function of a zero Store

	mu       sync.Mutex
	docs     map[docKey]*fakeDoc
	instLock map[string]int64 // instance -> lock expiry (ms), by this fake's LockInstance or a test
	sessions map[string]bool  // ClaimSession's answer per session (default true)
	// released is what ReleaseLocksOf returns; stale and findings what
	// Stale returns.
	released store.Write
	stale    []store.QueueHead
	findings outbox.Findings
	seq      int64
	calls    []storeCall
}

var _ Store = (*fakeStore)(nil)

// newFakeStore returns an empty fake on clk (nil: the system clock).
func newFakeStore(clk Clock) *fakeStore {
	if clk == nil {
		clk = clock.System{}
	}
	return &fakeStore{clk: clk, dec: new(store.Store), docs: map[docKey]*fakeDoc{}, instLock: map[string]int64{}, sessions: map[string]bool{}}
}

func (f *fakeStore) now() int64 { return f.clk.Now().UnixMilli() }

// record appends c; mu held.
func (f *fakeStore) record(c storeCall) { f.calls = append(f.calls, c) }

// callsOf returns the recorded calls of op, in order.
func (f *fakeStore) callsOf(op storeOp) []storeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []storeCall
	for _, c := range f.calls {
		if c.Op == op {
			out = append(out, c)
		}
	}
	return out
}

// count returns how many calls of op were made.
func (f *fakeStore) count(op storeOp) int { return len(f.callsOf(op)) }

// lockedInstances returns the instances of the LockInstance calls so far.
func (f *fakeStore) lockedInstances() []string {
	var out []string
	for _, c := range f.callsOf(opLockInstance) {
		out = append(out, c.Instance)
	}
	return out
}

// triedWork returns the "instance/id" of the TryLockWork calls so far.
func (f *fakeStore) triedWork() []string {
	var out []string
	for _, c := range f.callsOf(opTryLockWork) {
		out = append(out, c.Instance+"/"+c.ID)
	}
	return out
}

// headQueries returns the QueueHeads calls so far.
func (f *fakeStore) headQueries() []store.HeadQuery {
	var out []store.HeadQuery
	for _, c := range f.callsOf(opQueueHeads) {
		out = append(out, c.Heads)
	}
	return out
}

// hints returns the hint documents written so far, decoded.
func (f *fakeStore) hints(t *testing.T) []hintDoc {
	t.Helper()
	var out []hintDoc
	for _, c := range f.callsOf(opWriteHint) {
		var h hintDoc
		require.NoError(t, json.Unmarshal(c.Doc, &h))
		out = append(out, h)
	}
	return out
}

// docOpt modifies a document put in the fake.
type docOpt func(*fakeDoc)

func visibleAt(ms int64) docOpt   { return func(d *fakeDoc) { d.VisibleAt = ms } }
func lockedUntil(ms int64) docOpt { return func(d *fakeDoc) { d.LockedUntil = ms } }
func settles(id string) docOpt    { return func(d *fakeDoc) { d.Settles = id } }
func tagged(tag string) docOpt    { return func(d *fakeDoc) { d.Tag = tag } }
func inSession(sid string) docOpt { return func(d *fakeDoc) { d.SessionID = sid } }

// putMsg puts an orchestrator message of instance (visible now, unless
// opts say otherwise) and returns it as the change feed shows it.
func (f *fakeStore) putMsg(t *testing.T, instance, id string, opts ...docOpt) json.RawMessage {
	return f.put(t, "orch_queue", instance, id, opts)
}

// putWork puts a worker item of instance and returns it as the change
// feed shows it.
func (f *fakeStore) putWork(t *testing.T, instance, id string, opts ...docOpt) json.RawMessage {
	return f.put(t, "worker_queue", instance, id, opts)
}

func (f *fakeStore) put(t *testing.T, typ, instance, id string, opts []docOpt) json.RawMessage {
	t.Helper()
	f.mu.Lock()
	f.seq++
	d := &fakeDoc{QueueHead: store.QueueHead{ID: id, InstanceID: instance, Type: typ, DispatchSlot: slots.Of(instance),
		EnqueuedAt: f.clk.Now().UnixMicro() + f.seq}}
	for _, o := range opts {
		o(d)
	}
	if old := f.docs[docKey{instance, id}]; old != nil {
		d.version = old.version
	}
	d.version++
	f.docs[docKey{instance, id}] = d
	f.mu.Unlock()
	return f.raw(t, instance, id)
}

// raw returns the document's current version as the change feed shows it.
func (f *fakeStore) raw(t *testing.T, instance, id string) json.RawMessage {
	t.Helper()
	f.mu.Lock()
	d := f.docs[docKey{instance, id}]
	require.NotNil(t, d, "no document %s/%s", instance, id)
	doc := map[string]any{"id": d.ID, "instanceId": d.InstanceID, "type": d.Type, "_etag": fmt.Sprintf(`"%s-%d"`, d.ID, d.version),
		"workItem": "{}", "dispatchSlot": d.DispatchSlot, "visibleAt": d.VisibleAt, "enqueuedAt": d.EnqueuedAt,
		"lockedUntil": d.LockedUntil, "sessionId": d.SessionID, "tag": d.Tag}
	if d.LockedUntil > 0 {
		doc["lockToken"] = "token-" + d.ID
	}
	if d.Settles != "" {
		doc["settles"] = d.Settles
	}
	f.mu.Unlock()
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	return b
}

// head returns the document's queue head.
func (f *fakeStore) head(t *testing.T, instance, id string) store.QueueHead {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.docs[docKey{instance, id}]
	require.NotNil(t, d, "no document %s/%s", instance, id)
	return d.QueueHead
}

// remove deletes a document (an ack).
func (f *fakeStore) remove(instance, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.docs, docKey{instance, id})
}

// lockInstance makes another process hold instance's lock until ms.
func (f *fakeStore) lockInstance(instance string, until int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.instLock[instance] = until
}

// ackTurn commits the turn locked on instance: its locked messages go,
// the instance lock is released. It returns the Release for the Commit.
func (f *fakeStore) ackTurn(instance string) store.Release {
	f.mu.Lock()
	defer f.mu.Unlock()
	until := f.instLock[instance]
	delete(f.instLock, instance)
	for k, d := range f.docs {
		if k.instance == instance && d.IsOrchestrator() && d.LockedUntil == until {
			delete(f.docs, k)
		}
	}
	return store.Release{Instance: instance, LockedUntil: until}
}

func (f *fakeStore) LockInstance(_ context.Context, req store.LockRequest) (store.LockResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(storeCall{Op: opLockInstance, Instance: req.Instance, Lock: req})
	now := f.now()
	if until := f.instLock[req.Instance]; until > now {
		return store.LockResult{LockedUntil: until}, nil
	}
	var msgs []*fakeDoc
	for k, d := range f.docs {
		if k.instance == req.Instance && d.IsOrchestrator() && d.takeable(now) {
			msgs = append(msgs, d)
		}
	}
	if len(msgs) == 0 {
		return store.LockResult{}, nil
	}
	sort.Slice(msgs, func(i, j int) bool { return msgs[i].EnqueuedAt < msgs[j].EnqueuedAt })
	until := now + req.LockTimeout.Milliseconds()
	r := store.LockResult{Item: &durable.OrchestrationItem{Instance: req.Instance}, HeldUntil: until, Due: msgs[0].Due()}
	for _, d := range msgs {
		d.LockedUntil = until
		d.version++
		r.LockedMsgs = append(r.LockedMsgs, d.ID)
	}
	f.instLock[req.Instance] = until
	return r, nil
}

// lockWorkLocked locks d for req; mu held.
func (f *fakeStore) lockWorkLocked(d *fakeDoc, req store.WorkLockRequest) store.WorkLockResult {
	until := f.now() + req.LockTimeout.Milliseconds()
	d.LockedUntil = until
	d.version++
	return store.WorkLockResult{Item: &durable.LockedWorkItem{LockToken: d.InstanceID + "/" + d.ID}, Head: d.QueueHead, LockedUntil: until}
}

func (f *fakeStore) LockWorkIn(_ context.Context, block slots.Block, req store.WorkLockRequest) (store.WorkLockResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(storeCall{Op: opLockWorkIn, Block: block, Work: req})
	now := f.now()
	var best *fakeDoc
	for _, d := range f.docs {
		if d.IsOrchestrator() || !block.Contains(d.DispatchSlot) || !d.takeable(now) || !req.Tags.Matches(d.Tag) ||
			(d.SessionID != "" && (req.Session == nil || !f.sessionFree(d.SessionID))) {
			continue
		}
		if best == nil || d.EnqueuedAt < best.EnqueuedAt {
			best = d
		}
	}
	if best == nil {
		return store.WorkLockResult{}, nil
	}
	return f.lockWorkLocked(best, req), nil
}

// sessionFree is ClaimSession's answer for sid; mu held.
func (f *fakeStore) sessionFree(sid string) bool {
	owned, set := f.sessions[sid]
	return !set || owned
}

func (f *fakeStore) TryLockWork(_ context.Context, instance, id string, req store.WorkLockRequest) (store.WorkLockResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(storeCall{Op: opTryLockWork, Instance: instance, ID: id, Work: req})
	d := f.docs[docKey{instance, id}]
	if d == nil || d.IsOrchestrator() {
		return store.WorkLockResult{}, nil // gone
	}
	if !d.takeable(f.now()) || d.SessionID != "" || !req.Tags.Matches(d.Tag) {
		return store.WorkLockResult{Undecided: true}, nil
	}
	return f.lockWorkLocked(d, req), nil
}

func (f *fakeStore) ReadWork(_ context.Context, instance, id string) (*store.WorkDoc, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(storeCall{Op: opReadWork, Instance: instance, ID: id})
	d := f.docs[docKey{instance, id}]
	if d == nil || d.IsOrchestrator() {
		return nil, nil
	}
	return &store.WorkDoc{QueueHead: d.QueueHead, SessionID: d.SessionID, Tag: d.Tag}, nil
}

func (f *fakeStore) LockWork(_ context.Context, w *store.WorkDoc, req store.WorkLockRequest) (store.WorkLockResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(storeCall{Op: opLockWork, Instance: w.InstanceID, ID: w.ID, Work: req})
	d := f.docs[docKey{w.InstanceID, w.ID}]
	if d == nil || !d.takeable(f.now()) {
		return store.WorkLockResult{}, nil // another fetch won
	}
	return f.lockWorkLocked(d, req), nil
}

func (f *fakeStore) ClaimSession(_ context.Context, sid string, _ *durable.SessionFetchConfig) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(storeCall{Op: opClaimSession, ID: sid})
	return f.sessionFree(sid), nil
}

// setReleased sets what ReleaseLocksOf returns.
func (f *fakeStore) setReleased(w store.Write) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = w
}

// setStale sets what Stale returns.
func (f *fakeStore) setStale(heads []store.QueueHead, found outbox.Findings) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stale, f.findings = heads, found
}

// setSession makes ClaimSession answer owned for sid.
func (f *fakeStore) setSession(sid string, owned bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sessions[sid] = owned
}

func (f *fakeStore) QueueHeads(_ context.Context, q store.HeadQuery) ([]store.QueueHead, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(storeCall{Op: opQueueHeads, Heads: q})
	now := f.now()
	var out []store.QueueHead
	for _, d := range f.docs {
		if (d.IsOrchestrator() && !q.Orchestrator) || (!d.IsOrchestrator() && !q.Worker) ||
			!slices.ContainsFunc(q.Blocks, func(b slots.Block) bool { return b.Contains(d.DispatchSlot) }) {
			continue
		}
		if q.DueOnly {
			if !d.takeable(now) {
				continue
			}
			if !d.IsOrchestrator() && q.Worker && !q.Orchestrator && (!q.Tags.Matches(d.Tag) || (q.NoSessions && d.SessionID != "")) {
				continue
			}
		}
		out = append(out, d.QueueHead)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].EnqueuedAt < out[j].EnqueuedAt })
	return out, nil
}

func (f *fakeStore) Stale(_ context.Context, q store.StaleQuery) ([]store.QueueHead, outbox.Findings, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(storeCall{Op: opStale, Stale: q})
	return slices.Clone(f.stale), f.findings, nil
}

func (f *fakeStore) FinishInstance(_ context.Context, instance string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(storeCall{Op: opFinishInstance, Instance: instance})
	return nil
}

func (f *fakeStore) ReleaseLocksOf(_ context.Context, holder string) (store.Write, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(storeCall{Op: opReleaseLocksOf, Holder: holder})
	return f.released, nil
}

func (f *fakeStore) WriteHint(_ context.Context, partition string, doc json.RawMessage) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(storeCall{Op: opWriteHint, Partition: partition, Doc: slices.Clone(doc)})
	return nil
}

func (f *fakeStore) ContainerGone(context.Context, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(storeCall{Op: opContainerGone})
	return nil
}

func (f *fakeStore) DecodeFeedDoc(raw []byte, now int64) (store.FeedDoc, error) {
	f.mu.Lock()
	f.record(storeCall{Op: opDecodeFeedDoc})
	f.mu.Unlock()
	return f.dec.DecodeFeedDoc(raw, now)
}

func (f *fakeStore) Create(_ context.Context, partition string, doc json.RawMessage) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(storeCall{Op: opCreate, Partition: partition, Doc: slices.Clone(doc)})
	return nil
}

func (f *fakeStore) Delete(_ context.Context, partition, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(storeCall{Op: opDelete, Partition: partition, ID: id})
	return nil
}
