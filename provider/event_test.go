package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/engine"
	"github.com/durafeed/durafeed/leasestore"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/wakeup"
)

// The multi-replica tests drive providers through the provider API with a
// tiny orchestration runtime: an instance started with input "n" schedules
// n activities in its first turn and completes when all n completions
// arrived. Every replica has its own client on the shared emulator.

// journal records what the replicas did, for the consistency checks.
type journal struct {
	mu        sync.Mutex
	turns     map[string][]turnSpan // instance -> successful turns
	execs     map[string]int        // "instance/activity" -> successful work acks
	problems  []string
	completed map[string]bool
}

// turnSpan is a successful turn: from the fetch's return to the ack's call.
type turnSpan struct {
	replica    string
	from, till time.Time
	// owned: the replica owned the instance's slot when the fetch
	// returned.
	owned bool
}

func newJournal() *journal {
	return &journal{turns: map[string][]turnSpan{}, execs: map[string]int{}, completed: map[string]bool{}}
}

func (j *journal) problem(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.problems = append(j.problems, fmt.Sprintf(format, args...))
}

func (j *journal) doneCount() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.completed)
}

// settle marks as completed the instances whose history ends completed
// although no replica saw its final ack succeed: a replica stopped or
// crashed while the ack was in flight cannot know its outcome, yet the
// batch may have committed.
func (j *journal) settle(t *testing.T, p *Provider, ids []string) {
	t.Helper()
	j.mu.Lock()
	var open []string
	for _, id := range ids {
		if !j.completed[id] {
			open = append(open, id)
		}
	}
	j.mu.Unlock()
	for _, id := range open {
		evs, err := p.Read(context.Background(), id)
		require.NoError(t, err)
		if len(evs) == 0 {
			continue
		}
		if _, ok := evs[len(evs)-1].Kind.(history.OrchestrationCompleted); ok {
			j.mu.Lock()
			j.completed[id] = true
			j.mu.Unlock()
		}
	}
}

// replica is a provider with orchestration and worker loops.
type replica struct {
	name   string
	p      *Provider
	j      *journal
	cancel context.CancelFunc
	wg     sync.WaitGroup
	turns  atomic.Int64 // orchestration turns committed
	acts   atomic.Int64 // activities executed and acked
	work   time.Duration
	// orchLock is the lock a turn takes.
	orchLock time.Duration
}

const (
	testOrchLock = 3 * time.Second
	testWorkLock = 10 * time.Second
	// hang is the deadline of a wait on an event: long enough that only a
	// hang reaches it on a loaded machine. How long the events take is
	// measured by BenchmarkReplicaOwnership, not asserted.
	hang = 2 * time.Minute
)

func startReplica(t *testing.T, cfg testCfg, name string, j *journal, loops int, work time.Duration) *replica {
	t.Helper()
	return startReplicaLocking(t, cfg, name, j, loops, work, testOrchLock)
}

// startReplicaLocking is startReplica with the orchestration lock its
// turns take (the test runtime never renews it, so a turn must end within
// it).
func startReplicaLocking(t *testing.T, cfg testCfg, name string, j *journal, loops int, work, orchLock time.Duration) *replica {
	t.Helper()
	cfg.ReplicaID = name
	if os.Getenv("DURAFEED_TEST_LOG") != "" {
		// Lease and engine logs of every replica, named by test and
		// replica, for diagnosing a failure.
		lc := zap.NewDevelopmentConfig()
		lc.Level = zap.NewAtomicLevelAt(zap.InfoLevel)
		if l, err := lc.Build(); err == nil {
			cfg.Logger = l.Named(t.Name() + "/" + name)
		}
	}
	p, err := newProvider(context.Background(), cfg)
	require.NoError(t, err)
	r := &replica{name: name, p: p, j: j, work: work, orchLock: orchLock}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	for range loops {
		r.wg.Go(func() { r.orchLoop(ctx) })
		r.wg.Go(func() { r.workLoop(ctx) })
	}
	t.Cleanup(r.stop)
	return r
}

// stop ends the loops and closes the provider (graceful hand-off).
func (r *replica) stop() {
	r.cancel()
	r.wg.Wait()
	_ = r.p.Close()
}

// crash ends the loops and stops the provider without releasing anything.
func (r *replica) crash() {
	r.cancel()
	r.wg.Wait()
	r.p.Crash()
	_ = r.p.Close()
}

func (r *replica) orchLoop(ctx context.Context) {
	for ctx.Err() == nil {
		item, err := r.p.FetchOrchestrationItem(ctx, r.orchLock, 200*time.Millisecond, nil)
		if err != nil || item == nil {
			continue
		}
		from := time.Now()
		owned := r.p.ev().Owned().Contains(slots.Of(item.Instance))
		turn := r.plan(item)
		till := time.Now()
		if err := r.p.AckOrchestrationItem(ctx, item.LockToken, turn); err != nil {
			if ctx.Err() == nil && !errors.Is(err, durable.ErrPermanent) {
				r.j.problem("%s: ack of %s: %v", r.name, item.Instance, err)
			}
			continue
		}
		r.turns.Add(1)
		r.j.mu.Lock()
		r.j.turns[item.Instance] = append(r.j.turns[item.Instance], turnSpan{replica: r.name, from: from, till: till, owned: owned})
		if turn.Metadata.Status == durable.StatusCompleted {
			r.j.completed[item.Instance] = true
		}
		r.j.mu.Unlock()
	}
}

// plan computes a turn of the test orchestration.
func (r *replica) plan(item *durable.OrchestrationItem) durable.OrchestrationTurn {
	inst, exec := item.Instance, item.ExecutionID
	next := uint64(len(item.History)) + 1
	mk := func(k history.EventKind, source uint64) history.Event {
		e := ev(inst, exec, next, k)
		e.SourceEventID = source
		next++
		return e
	}
	turn := durable.OrchestrationTurn{ExecutionID: exec}
	n := 0
	done := map[uint64]bool{}
	for _, h := range item.History {
		switch k := h.Kind.(type) {
		case history.OrchestrationStarted:
			n, _ = strconv.Atoi(k.Input)
		case history.ActivityCompleted:
			done[h.SourceEventID] = true
		case history.OrchestrationCompleted:
			r.j.problem("%s: turn on completed instance %s", r.name, inst)
		}
	}
	if len(item.History) == 0 {
		for _, m := range item.Messages {
			if s, ok := m.(durable.StartOrchestration); ok {
				n, _ = strconv.Atoi(s.Input)
				turn.HistoryDelta = append(turn.HistoryDelta, mk(history.OrchestrationStarted{Name: "Fan", Version: "1.0.0", Input: s.Input}, 0))
				turn.Metadata = durable.ExecutionMetadata{OrchestrationName: "Fan", OrchestrationVersion: "1.0.0"}
				for range n {
					id := next
					turn.HistoryDelta = append(turn.HistoryDelta, mk(history.ActivityScheduled{Name: "A", Input: "{}"}, 0))
					turn.WorkerItems = append(turn.WorkerItems, durable.ActivityExecute{Instance: inst, ExecutionID: exec, ID: id, Name: "A", Input: "{}"})
				}
			}
		}
	}
	for _, m := range item.Messages {
		c, ok := m.(durable.ActivityCompleted)
		if !ok {
			continue
		}
		if done[c.ID] {
			r.j.problem("%s: second completion of activity %d of %s", r.name, c.ID, inst)
			continue
		}
		done[c.ID] = true
		turn.HistoryDelta = append(turn.HistoryDelta, mk(history.ActivityCompleted{Result: c.Result}, c.ID))
	}
	if n > 0 && len(done) == n {
		out := "done"
		turn.HistoryDelta = append(turn.HistoryDelta, mk(history.OrchestrationCompleted{Output: out}, 0))
		turn.Metadata.Status, turn.Metadata.Output = durable.StatusCompleted, &out
	}
	return turn
}

func (r *replica) workLoop(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := r.p.FetchWorkItem(ctx, testWorkLock, 200*time.Millisecond, nil, durable.AnyTag())
		if err != nil || w == nil {
			continue
		}
		a := w.Item.(durable.ActivityExecute)
		if r.work > 0 {
			time.Sleep(r.work)
		}
		if ctx.Err() != nil {
			return // crashed mid-activity: the lock expires
		}
		err = r.p.AckWorkItem(ctx, w.LockToken, durable.ActivityCompleted{Instance: a.Instance, ExecutionID: a.ExecutionID, ID: a.ID, Result: r.name})
		if err != nil {
			if ctx.Err() == nil {
				r.j.problem("%s: work ack of %s/%d: %v", r.name, a.Instance, a.ID, err)
			}
			continue
		}
		r.acts.Add(1)
		r.j.mu.Lock()
		r.j.execs[fmt.Sprint(a.Instance, "/", a.ID)]++
		r.j.mu.Unlock()
	}
}

// replicaConfig is the event-driven test configuration of the
// multi-replica tests.
func replicaConfig(container string) testCfg {
	c := eventConfig(container)
	c.SafetySweepInterval = time.Hour // the feed and the signals must do the work
	return c
}

func ownedCount(p *Provider) int { return p.ev().Owned().Len() }

// ownedOnce reports whether the providers own every slot exactly once.
func ownedOnce(ps ...*Provider) bool {
	total := 0
	var union wakeup.Set
	for _, p := range ps {
		s := p.ev().Owned()
		total += s.Len()
		union = union.Union(s)
	}
	return total == slots.Count && union.Len() == slots.Count
}

// requireOwnership waits until the replicas own every slot exactly once
// (failing only after hang), and returns how long that took.
func requireOwnership(t *testing.T, what string, rs ...*replica) time.Duration {
	t.Helper()
	ps := make([]*Provider, len(rs))
	for i, r := range rs {
		ps[i] = r.p
	}
	start := time.Now()
	for !ownedOnce(ps...) {
		if time.Since(start) > hang {
			require.Failf(t, "slots not owned exactly once", "%s: not by the replicas after %v", what, hang)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// requireBalanced waits until the replicas' slot counts are within one
// block of each other.
func requireBalanced(t *testing.T, rs ...*replica) {
	t.Helper()
	per := slots.Count / slots.DefaultBlocks
	spread := func() int {
		lo, hi := slots.Count, 0
		for _, r := range rs {
			n := ownedCount(r.p)
			lo, hi = min(lo, n), max(hi, n)
		}
		return hi - lo
	}
	deadline := time.Now().Add(hang)
	last := spread()
	for last > per && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		last = spread()
	}
	require.LessOrEqual(t, last, per, "slots balanced to within one block")
}

// awaitCompletion waits until done holds. It fails when progress (a count
// that grows while the replicas work) stays unchanged for stall, not after
// a fixed time: a loaded machine only takes longer, a lost wakeup stalls
// and fails. On failure it logs what is left to do and where the replicas'
// wakeups are.
func awaitCompletion(t *testing.T, container string, stall time.Duration, done func() bool, progress func() int64, onStall func(), rs ...*replica) {
	t.Helper()
	last, at := progress(), time.Now()
	for !done() {
		if p := progress(); p != last {
			last, at = p, time.Now()
		}
		if time.Since(at) > stall {
			logLeftovers(t, container, rs...)
			logBusyGoroutines(t)
			if onStall != nil {
				onStall()
			}
			t.Fatalf("no progress for %v (progress count %d)", stall, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logBusyGoroutines logs the stacks of the goroutines inside the
// provider's store and engine (of every test running in parallel): where
// a stalled replica is stuck.
func logBusyGoroutines(t *testing.T) {
	t.Helper()
	buf := make([]byte, 32<<20)
	buf = buf[:goruntime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if n < 300 && (strings.Contains(g, "durafeed/store.") || strings.Contains(g, "durafeed/engine.")) {
			n++
			t.Logf("goroutine: %s", g)
		}
	}
}

// logLeftovers logs the queue documents and locked instances left in the
// container, and each replica's owned slots and pending wakeups.
func logLeftovers(t *testing.T, container string, rs ...*replica) {
	t.Helper()
	cc := rawContainer(t, container)
	pager := cc.NewQueryItemsPager("SELECT c.id, c.instanceId, c.type, c.dispatchSlot, c.visibleAt, c.lockedUntil, c.lockToken, c.attemptCount, c._ts FROM c "+
		"WHERE c.type = 'orch_queue' OR c.type = 'worker_queue' OR c.type = 'outbox_intent' OR c.type = 'staged' OR "+
		"(c.type = 'instance' AND (c.lockedUntil > 0 OR c.status != 'Completed' OR IS_DEFINED(c.publish)))", azcosmos.NewPartitionKey(), nil)
	n := 0
	for pager.More() && n < 50 {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Logf("leftover query: %v", err)
			break
		}
		for _, it := range page.Items {
			if n++; n <= 50 {
				t.Logf("left (now %d): %s", time.Now().UnixMilli(), it)
			}
		}
	}
	for _, r := range rs {
		owned := r.p.ev().Owned()
		orch, work := r.p.ev().Pending()
		t.Logf("replica %s: joined %v, owns %d slots, orch wakeups %d (waiters %d), work wakeups %d (waiters %d)",
			r.name, r.p.ev().Joined(), owned.Len(), len(orch.Pending), orch.Waiters, len(work.Pending), work.Waiters)
		t.Logf("  counters: %+v", r.p.ev().Stats())
		for i, pw := range work.Pending {
			if i < 10 {
				t.Logf("  work wakeup kind %d slot %d %q at %d due %v later %v", pw.Kind, pw.Slot, pw.Instance, pw.VisibleAt.UnixMilli(), pw.Due, pw.Later)
			}
		}
		for i, pw := range orch.Pending {
			if i < 10 {
				t.Logf("  orch wakeup slot %d %q at %d due %v", pw.Slot, pw.Instance, pw.VisibleAt.UnixMilli(), pw.Due)
			}
		}
	}
}

// requireOwnershipView waits until viewer's Ownership names, for every
// lease block, the replica among rs whose Owned holds it, with the time
// it got it.
func requireOwnershipView(t *testing.T, viewer *replica, rs ...*replica) {
	t.Helper()
	byName := map[string]*replica{}
	for _, r := range rs {
		byName[r.name] = r
	}
	var last []engine.BlockOwner
	require.Eventually(t, func() bool {
		last = viewer.p.ev().Ownership()
		if len(last) != slots.DefaultBlocks {
			return false
		}
		for _, bo := range last {
			r := byName[bo.Owner]
			if r == nil || !r.p.ev().Owned().Contains(bo.Block.First) || bo.Since.IsZero() {
				return false
			}
		}
		return true
	}, hang, 5*time.Millisecond, "replica %s's view of who owns which block", viewer.name)
	t.Logf("ownership seen by %s: %+v", viewer.name, last)
}

// leaseOwners returns the owner named by each lease document, as stored.
func leaseOwners(t *testing.T, container string) []string {
	t.Helper()
	var owners []string
	for _, d := range queryRows[struct {
		Owner string `json:"owner"`
	}](t, container, leasestore.DefaultPartitionKeyValue, "SELECT c.owner FROM c WHERE c.type = 'lease'") {
		owners = append(owners, d.Owner)
	}
	require.Len(t, owners, slots.DefaultBlocks)
	return owners
}

// TestReplicasShareSlots: three replicas balance the slots to within one
// block; a graceful stop hands every lease to the others before Close
// returns; a joining replica gets its share; the leases of a replica that
// dies without releasing are taken over (at its heartbeat's expiry). How long each step takes is measured by
// BenchmarkReplicaOwnership; here each is an event waited for.
func TestReplicasShareSlots(t *testing.T) {
	t.Parallel()
	container := freshContainer("replicas-share")
	cfg := replicaConfig(container)
	j := newJournal()
	a := startReplica(t, cfg, "a", j, 1, 0)
	b := startReplica(t, cfg, "b", j, 1, 0)
	c := startReplica(t, cfg, "c", j, 1, 0)
	requireOwnership(t, "start", a, b, c)
	require.Eventually(t, func() bool {
		return ownedCount(a.p) > 0 && ownedCount(b.p) > 0 && ownedCount(c.p) > 0
	}, hang, 10*time.Millisecond, "every replica gets slots")
	requireBalanced(t, a, b, c)
	requireOwnershipView(t, a, a, b, c)

	// Graceful stop: the hand-off is written before Close returns.
	c.stop()
	for _, o := range leaseOwners(t, container) {
		require.Contains(t, []string{"a", "b"}, o, "every lease handed to a live replica")
	}
	took := requireOwnership(t, "graceful hand-off", a, b)
	t.Logf("graceful hand-off noticed in %v", took)

	// Join: the newcomer gets its share (two blocks of the three-way
	// split) by balancing.
	d := startReplica(t, cfg, "d", j, 1, 0)
	fair := slots.Count / 3 / (slots.Count / slots.DefaultBlocks) * (slots.Count / slots.DefaultBlocks)
	require.Eventually(t, func() bool { return ownedCount(d.p) >= fair }, hang, 5*time.Millisecond, "a joining replica gets its share")
	requireOwnership(t, "after the join", a, b, d)
	requireBalanced(t, a, b, d)

	// Crash: b releases nothing; the others take its leases over once its
	// heartbeat expires, then a and d own every slot.
	require.Contains(t, leaseOwners(t, container), "b")
	b.crash()
	took = requireOwnership(t, "crash take-over", a, d)
	t.Logf("crash take-over took %v (lease expiry %v)", took, cfg.LeaseExpiry)
	require.NotContains(t, leaseOwners(t, container), "b")
	requireBalanced(t, a, d)
	requireOwnershipView(t, d, a, d)
}

// TestReplicasHistoryConsistentUnderChurn drives a few hundred instances
// through three replicas while one crashes (holding locks and leases),
// one joins and one stops gracefully, then checks every history: event ids
// contiguous, every scheduled activity completed exactly once, turns of an
// instance never overlapping, every instance completed.
func TestReplicasHistoryConsistentUnderChurn(t *testing.T) {
	t.Parallel()
	const instances, acts = 200, 3
	container := freshContainer("replicas-churn")
	cfg := replicaConfig(container) // the safety sweep is an hour away
	j := newJournal()
	a := startReplica(t, cfg, "a", j, 3, time.Millisecond)
	b := startReplica(t, cfg, "b", j, 3, time.Millisecond)
	c := startReplica(t, cfg, "c", j, 3, time.Millisecond)
	requireOwnership(t, "start", a, b, c)
	ctx := context.Background()
	client, err := newProvider(ctx, replicaConfig(container)) // a client: never joins
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	ids := make([]string, instances)
	for i := range ids {
		ids[i] = fmt.Sprintf("churn-%03d", i)
		require.NoError(t, client.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: ids[i], Orchestration: "Fan",
			Input: strconv.Itoa(acts), Version: "1.0.0", ExecutionID: 1}, 0))
	}
	require.Zero(t, ownedCount(client), "a client never owns slots")
	require.Eventually(t, func() bool { return j.doneCount() >= instances/4 }, hang, 10*time.Millisecond)
	b.crash()
	d := startReplica(t, cfg, "d", j, 3, time.Millisecond)
	require.Eventually(t, func() bool { return j.doneCount() >= instances/2 }, hang, 10*time.Millisecond)
	c.stop()
	checked := time.Now()
	awaitCompletion(t, container, 30*time.Second, func() bool {
		if j.doneCount() == instances {
			return true
		}
		if time.Since(checked) > 500*time.Millisecond {
			checked = time.Now()
			j.settle(t, a.p, ids)
		}
		return false
	}, func() int64 {
		return a.acts.Load() + a.turns.Load() + d.acts.Load() + d.turns.Load()
	}, func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		for _, id := range ids {
			if !j.completed[id] {
				evs, err := a.p.Read(ctx, id)
				kinds := make([]string, len(evs))
				for i, e := range evs {
					kinds[i] = fmt.Sprintf("%T", e.Kind)
				}
				t.Logf("not completed in the journal: %s (%v): %v", id, err, kinds)
			}
		}
	}, a, d)

	requireConsistent(t, j, a.p, ids, acts)
	t.Logf("turns a=%d b=%d c=%d d=%d; activities a=%d b=%d c=%d d=%d", a.turns.Load(), b.turns.Load(), c.turns.Load(), d.turns.Load(),
		a.acts.Load(), b.acts.Load(), c.acts.Load(), d.acts.Load())
}

// requireConsistent checks what the replicas did to the instances ids,
// each of which scheduled acts activities: no problem journaled, event
// ids contiguous, every activity completed exactly once and acked once,
// and no two turns of one instance overlapping in time (one turn at a
// time, whichever replica ran it).
func requireConsistent(t *testing.T, j *journal, p *Provider, ids []string, acts int) {
	t.Helper()
	j.mu.Lock()
	defer j.mu.Unlock()
	require.Empty(t, j.problems)
	for _, id := range ids {
		evs, err := p.Read(context.Background(), id)
		require.NoError(t, err)
		scheduled, completed := map[uint64]bool{}, map[uint64]int{}
		for i, e := range evs {
			require.Equal(t, uint64(i+1), e.EventID, "%s: event ids contiguous", id)
			switch e.Kind.(type) {
			case history.ActivityScheduled:
				scheduled[e.EventID] = true
			case history.ActivityCompleted:
				completed[e.SourceEventID]++
			}
		}
		require.Len(t, scheduled, acts, id)
		for s := range scheduled {
			require.Equal(t, 1, completed[s], "%s: activity %d completed exactly once", id, s)
		}
		spans := j.turns[id]
		for x := range spans {
			for y := range spans {
				if x != y && spans[x].from.Before(spans[y].till) && spans[y].from.Before(spans[x].till) {
					t.Fatalf("%s: turns by %s and %s overlapped", id, spans[x].replica, spans[y].replica)
				}
			}
		}
	}
	for k, n := range j.execs {
		require.Equal(t, 1, n, "activity %s acked once", k)
	}
}

// TestFanOutSpreadsActivities: one orchestration fans out 1,000 activities
// on three replicas; backlog hints make each of the other two replicas
// execute at least 20% of them, while every orchestration turn stays with
// the slot's owner, which executes a share too (at least 10%: it also
// runs every turn, and the helpers go through the backlog as fast as it
// does); the owner drops wakeups of items the feed showed taken without
// reading them.
func TestFanOutSpreadsActivities(t *testing.T) {
	t.Parallel()
	const n = 1000
	container := freshContainer("replicas-fanout")
	cfg := replicaConfig(container)
	j := newJournal()
	// A turn of the fan-out instance folds up to a thousand completions
	// into a history of up to two thousand events: under a loaded -race
	// run it can take longer than testOrchLock, and this runtime does not
	// renew locks.
	const lock = 60 * time.Second
	rs := []*replica{
		startReplicaLocking(t, cfg, "a", j, 4, 15*time.Millisecond, lock),
		startReplicaLocking(t, cfg, "b", j, 4, 15*time.Millisecond, lock),
		startReplicaLocking(t, cfg, "c", j, 4, 15*time.Millisecond, lock),
	}
	requireOwnership(t, "start", rs...)
	requireBalanced(t, rs...)
	fanBlock := func() engine.BlockOwner {
		for _, b := range rs[0].p.ev().Ownership() {
			if b.Block.First <= slots.Of("fan") && slots.Of("fan") <= b.Block.Last {
				return b
			}
		}
		return engine.BlockOwner{}
	}
	before := fanBlock()
	ctx := context.Background()
	// Started by a client that takes no part in dispatch: a replica's own
	// start would run its first turn on that replica when idle (the
	// writer runs what it wrote), and this test is about the owner's turns.
	client := openProvider(t, replicaConfig(container))
	require.NoError(t, client.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: "fan", Orchestration: "Fan",
		Input: strconv.Itoa(n), Version: "1.0.0", ExecutionID: 1}, 0))
	awaitCompletion(t, container, time.Minute, func() bool { return j.doneCount() == 1 }, func() int64 {
		var n int64
		for _, r := range rs {
			n += r.acts.Load() + r.turns.Load()
		}
		return n
	}, nil, rs...)
	j.mu.Lock()
	require.Empty(t, j.problems)
	j.mu.Unlock()
	// Every turn was taken by the replica owning the slot, unless a loaded
	// machine moved the slot's lease meanwhile (a late heartbeat, a
	// take-over): a fetch may then return just as its replica loses the
	// slot, and the turn is another's to take next.
	after := fanBlock()
	moved := before.Epoch != after.Epoch || before.Owner != after.Owner
	j.mu.Lock()
	for _, sp := range j.turns["fan"] {
		if moved {
			t.Logf("the slot's lease moved (%s, epoch %d → %s, epoch %d); a turn by %s, owner at its fetch: %v",
				before.Owner, before.Epoch, after.Owner, after.Epoch, sp.replica, sp.owned)
			continue
		}
		require.True(t, sp.owned, "a turn by %s at %v, which did not own the slot", sp.replica, sp.from)
	}
	j.mu.Unlock()
	var total int64
	for _, r := range rs {
		t.Logf("replica %s: %d activities, %d orchestration turns, stats %+v", r.name, r.acts.Load(), r.turns.Load(), r.p.ev().Stats())
		total += r.acts.Load()
	}
	require.Equal(t, int64(n), total)
	for _, r := range rs {
		if moved && r.turns.Load() > 0 {
			// Owner for part of the run: neither bound of a role holds.
			continue
		}
		if r.turns.Load() > 0 {
			require.GreaterOrEqual(t, r.acts.Load(), int64(n/10), "the owner, %s, executes at least 10%% of the activities", r.name)
			require.Positive(t, r.p.ev().Stats().WorkSkipped, "the owner, %s, dropped wakeups of items others took", r.name)
			continue
		}
		require.GreaterOrEqual(t, r.acts.Load(), int64(n/5), "replica %s, helping on a hint, executes at least 20%% of the activities", r.name)
	}
}

// crashDrill opens replica "a" (joined eagerly, the safety sweep an hour
// away) on a fresh container for a test that crashes it; openB opens the
// replica "b" that takes over.
func crashDrill(t *testing.T, name string) (container string, a *Provider, openB func() *Provider) {
	t.Helper()
	container = freshContainer(name)
	cfg := replicaConfig(container)
	cfg.joinEagerly = true
	cfgA, cfgB := cfg, cfg
	cfgA.ReplicaID, cfgB.ReplicaID = "a", "b"
	return container, openProvider(t, cfgA), func() *Provider { return openProvider(t, cfgB) }
}

// TestOutboxDeliveredByFeedAfterCrash: a replica commits a turn with an
// outbox intent and dies before delivering it (its feed handler is held,
// then it crashes without releasing its leases). The replica that takes
// its slots over reads the intent from the dead owner's last checkpoint
// and delivers it exactly once; the safety sweep (an hour away) plays no
// part.
func TestOutboxDeliveredByFeedAfterCrash(t *testing.T) {
	t.Parallel()
	container, a, openB := crashDrill(t, "outbox-feed-crash")
	ctx := context.Background()
	createInstance(t, a, "parent", "")
	require.NoError(t, a.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: "parent", Name: "go"}, 0))
	item := mustFetchOrch(t, a, lockLong)
	a.ev().HoldIntents(true)
	require.NoError(t, a.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta:      []history.Event{ev("parent", 1, 2, history.SubOrchestrationScheduled{Name: "C", Instance: "child", Input: "{}"})},
		OrchestratorItems: []durable.WorkItem{durable.StartOrchestration{Instance: "child", Orchestration: "C", Input: "{}", ExecutionID: 1, ParentInstance: "parent", ParentID: 2}}}))
	require.Equal(t, 1, countDocs(t, container, "parent", "c.type = 'outbox_intent'"), "the commit wrote the intent")
	require.Eventually(t, func() bool { return a.ev().Stats().IntentsHeld > 0 }, hang, time.Millisecond, "the feed handler saw the intent and held it")
	require.Zero(t, countDocs(t, container, "child", "c.type = 'orch_queue'"), "nothing delivered yet")
	a.Crash()

	b := openB()
	require.Eventually(t, func() bool { return countDocs(t, container, "parent", "c.type = 'outbox_intent'") == 0 },
		hang, 20*time.Millisecond, "the new owner's feed delivers the intent")
	require.Equal(t, 1, countDocs(t, container, "child", "c.type = 'orch_queue'"), "delivered exactly once")
	require.GreaterOrEqual(t, b.ev().Stats().FeedDelivered, int64(1), "delivered by the feed handler")
	require.Zero(t, b.ev().Stats().SweepDelivered+a.ev().Stats().SweepDelivered, "not by the safety sweep")
	var child *durable.OrchestrationItem
	require.Eventually(t, func() bool {
		var err error
		child, err = b.FetchOrchestrationItem(ctx, lockLong, 100*time.Millisecond, nil)
		require.NoError(t, err)
		return child != nil
	}, hang, 10*time.Millisecond)
	require.Equal(t, "child", child.Instance)
	require.Len(t, child.Messages, 1)
}

// TestEventDrivenLocalWakeLatency: a fetch long-polling on the owning
// replica returns work enqueued through that replica within milliseconds,
// and returns nil after its poll timeout when none comes.
func TestEventDrivenLocalWakeLatency(t *testing.T) {
	t.Parallel()
	cfg := replicaConfig(freshContainer("wake-latency"))
	cfg.joinEagerly = true
	p := openProvider(t, cfg)
	ctx := context.Background()
	start := time.Now()
	item, err := p.FetchOrchestrationItem(ctx, lockLong, 300*time.Millisecond, nil)
	require.NoError(t, err)
	require.Nil(t, item)
	require.GreaterOrEqual(t, time.Since(start), 250*time.Millisecond, "waits for the poll timeout")
	var lat []time.Duration
	for i := range 20 {
		got := make(chan time.Time, 1)
		go func() {
			it, err := p.FetchOrchestrationItem(ctx, lockLong, 5*time.Second, nil)
			if err == nil && it != nil {
				got <- time.Now()
				_ = p.AbandonOrchestrationItem(ctx, it.LockToken, time.Hour, false)
			} else {
				got <- time.Time{}
			}
		}()
		time.Sleep(20 * time.Millisecond)
		sent := time.Now()
		require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: fmt.Sprint("lat-", i), Orchestration: "O", Input: "{}", ExecutionID: 1}, 0))
		at := <-got
		require.False(t, at.IsZero(), "the long poll returns the work")
		lat = append(lat, at.Sub(sent))
	}
	t.Logf("enqueue-to-fetch: %v", lat)
}

// TestPinnedInstanceRunsOnCompatibleReplica: in a rolling upgrade the
// owner of an instance's slot may run only older versions than the one
// the instance is pinned to. Its backlog hint lists the refused instance,
// and a replica whose dispatcher accepts that version runs it.
func TestPinnedInstanceRunsOnCompatibleReplica(t *testing.T) {
	t.Parallel()
	container := freshContainer("pinned-upgrade")
	cfg := replicaConfig(container)
	ctx := context.Background()
	v2 := durable.SemVer{Major: 2}

	// One instance per lease block, pinned to 2.0.0 by a replica that then
	// leaves.
	seedCfg := cfg
	seedCfg.ReplicaID = "seed"
	seed, err := newProvider(ctx, seedCfg)
	require.NoError(t, err)
	per := slots.Count / slots.DefaultBlocks
	var insts []string
	for i := 0; len(insts) < slots.DefaultBlocks; i++ {
		id := fmt.Sprint("pinned-", i)
		if slots.Of(id)/per == len(insts) {
			insts = append(insts, id)
		}
	}
	for _, id := range insts {
		require.NoError(t, seed.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: id, Orchestration: "O", Input: "{}", ExecutionID: 1}, 0))
		item, err := seed.FetchOrchestrationItem(ctx, lockLong, 5*time.Second, nil)
		require.NoError(t, err)
		require.NotNil(t, item)
		md := durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "2.0.0", PinnedVersion: &v2}
		require.NoError(t, seed.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
			HistoryDelta: []history.Event{ev(item.Instance, 1, 1, history.OrchestrationStarted{Name: "O", Version: "2.0.0", Input: "{}"})},
			Metadata:     md}))
	}
	require.NoError(t, seed.Close())

	// An old replica (runs 1.x) and a new one (runs 2.x).
	var mu sync.Mutex
	ranOn := map[string]string{}
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	open := func(name string, lo, hi durable.SemVer) *replica {
		c := cfg
		c.ReplicaID = name
		p := openProvider(t, c)
		filter := &durable.DispatcherCapabilityFilter{SupportedVersions: []durable.SemVerRange{{Min: lo, Max: hi}}}
		for range 2 {
			wg.Go(func() {
				for lctx.Err() == nil {
					item, err := p.FetchOrchestrationItem(lctx, lockLong, 200*time.Millisecond, filter)
					if err != nil || item == nil {
						continue
					}
					mu.Lock()
					ranOn[item.Instance] = name
					mu.Unlock()
					_ = p.AbandonOrchestrationItem(context.WithoutCancel(lctx), item.LockToken, time.Hour, true)
				}
			})
		}
		return &replica{name: name, p: p}
	}
	old := open("old", durable.SemVer{Major: 1}, durable.SemVer{Major: 1, Minor: 99})
	cur := open("new", v2, durable.SemVer{Major: 2, Minor: 99})
	requireOwnership(t, "start", old, cur)
	requireBalanced(t, old, cur)

	var onOld []string
	for _, id := range insts {
		if old.p.ev().Owned().Contains(slots.Of(id)) {
			onOld = append(onOld, id)
		}
		require.NoError(t, cur.p.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: id, Name: "go", Data: "{}"}, 0))
	}
	require.NotEmpty(t, onOld, "the old replica owns some of the instances")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ranOn) == len(insts)
	}, hang, 20*time.Millisecond, "every pinned instance runs")
	mu.Lock()
	defer mu.Unlock()
	for _, id := range insts {
		require.Equal(t, "new", ranOn[id], "%s runs on the replica that accepts 2.x (owner old: %v)", id, old.p.ev().Owned().Contains(slots.Of(id)))
	}
}

// TestLateFirstFeedReadLosesNothing: a lease acquired without a
// continuation starts its feed where its reader's first read fixes "now".
// A write landing between the acquisition's catch-up query and that read,
// however late the read comes, must be found by the catch-up that follows
// it. (A timer one second after the acquisition used to stand in for that
// catch-up; under load a write after it waited for the safety sweep.)
func TestLateFirstFeedReadLosesNothing(t *testing.T) {
	t.Parallel()
	container := freshContainer("latepin")
	client := openProvider(t, testConfig(container)) // polling: never joins, never signals the replica
	// Every lease reader's first read (8 leases, each within one of the 4
	// partitions) takes 4 s.
	middleware.slowFeedReads(container, 8, 4*time.Second)
	cfg := eventConfig(container)
	cfg.SafetySweepInterval = time.Hour
	cfg.joinEagerly = true
	p := openProvider(t, cfg)
	// New waits for the share a bounded time; a loaded machine may need
	// longer.
	require.Eventually(t, func() bool { return ownedCount(p) == slots.Count }, hang, 5*time.Millisecond, "New joined and owns every slot")

	// Past the old timer's catch-up, before any reader has read.
	time.Sleep(1500 * time.Millisecond)
	ctx := context.Background()
	require.NoError(t, client.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: "late-1", Orchestration: "O", Input: "{}", ExecutionID: 1}, 0))

	item, err := p.FetchOrchestrationItem(ctx, lockLong, hang, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "the write before the feed's starting point was caught up")
	require.Equal(t, "late-1", item.Instance)
}

// TestFailoverReleasesLocksOfDeadReplica: a replica dies holding an
// orchestration lock and a work-item lock, both an hour long. The replica
// that takes its leases over frees them at once (its take-over declared
// the holder dead), so the work is fetchable long before the locks would
// expire; and the dead replica, were it only judged dead, can no longer
// commit under its old lock.
func TestFailoverReleasesLocksOfDeadReplica(t *testing.T) {
	t.Parallel()
	container, a, openB := crashDrill(t, "failover-locks")
	ctx := context.Background()
	createInstance(t, a, "x", "")
	require.NoError(t, a.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: "x", Name: "go"}, 0))
	item := mustFetchOrch(t, a, time.Hour)
	require.NoError(t, a.EnqueueForWorker(ctx, durable.ActivityExecute{Instance: "x", ExecutionID: 1, ID: 2, Name: "A", Input: "{}"}))
	var w *durable.LockedWorkItem
	require.Eventually(t, func() bool {
		var err error
		w, err = a.FetchWorkItem(ctx, time.Hour, 100*time.Millisecond, nil, durable.AnyTag())
		require.NoError(t, err)
		return w != nil
	}, hang, time.Millisecond)
	a.Crash()

	b := openB()
	var got *durable.OrchestrationItem
	require.Eventually(t, func() bool {
		var err error
		got, err = b.FetchOrchestrationItem(ctx, lockLong, 200*time.Millisecond, nil)
		require.NoError(t, err)
		return got != nil
	}, hang, time.Millisecond, "the dead replica's orchestration lock is freed at the take-over")
	require.Equal(t, "x", got.Instance)
	require.Len(t, got.Messages, 1)
	var gotW *durable.LockedWorkItem
	require.Eventually(t, func() bool {
		var err error
		gotW, err = b.FetchWorkItem(ctx, lockLong, 200*time.Millisecond, nil, durable.AnyTag())
		require.NoError(t, err)
		return gotW != nil
	}, hang, time.Millisecond, "the dead replica's work-item lock is freed at the take-over")
	require.EqualValues(t, 2, gotW.AttemptCount)
	require.GreaterOrEqual(t, b.ev().Stats().LocksReleased, int64(3), "instance, message and work item")

	// The old holder's writes under its freed locks fail; the new ones hold.
	turn := durable.OrchestrationTurn{ExecutionID: 1, HistoryDelta: []history.Event{ev("x", 1, 2, history.ExternalEvent{Name: "go"})}}
	require.ErrorIs(t, a.AckOrchestrationItem(ctx, item.LockToken, turn), durable.ErrPermanent)
	require.ErrorIs(t, a.AckWorkItem(ctx, w.LockToken, durable.ActivityCompleted{Instance: "x", ExecutionID: 1, ID: 2, Result: "old"}), durable.ErrPermanent)
	require.NoError(t, b.AckOrchestrationItem(ctx, got.LockToken, turn))
	require.NoError(t, b.AckWorkItem(ctx, gotW.LockToken, durable.ActivityCompleted{Instance: "x", ExecutionID: 1, ID: 2, Result: "new"}))
	hist, err := b.Read(ctx, "x")
	require.NoError(t, err)
	require.Len(t, hist, 2, "the turn applied once")
	require.Equal(t, 1, countDocs(t, container, "x", "c.type = 'orch_queue'"), "one completion")
}
