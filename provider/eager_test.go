package provider

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/wakeup"
)

// The writer runs what it wrote (engine.Options.Eager, opt-in): a replica whose fetch is idle runs the work its own writes
// made visible in slots another replica owns, and the instance lock keeps
// one turn to one replica.

// instancesIn returns n instance ids, named prefix-k, whose slots are in
// set, which must not be empty.
func instancesIn(t *testing.T, set wakeup.Set, prefix string, n int) []string {
	t.Helper()
	require.False(t, set.IsEmpty(), "no slot to put %s in", prefix)
	return instancesWhere(t, prefix, n, set.Contains)
}

// TestWriterRunsItsOwnWrites: orchestrations started through replica
// a's client in slots replica b owns run, with their activities and
// completions, on a as well as on b, and every history is still one turn
// at a time, each activity completed once.
func TestWriterRunsItsOwnWrites(t *testing.T) {
	t.Parallel()
	const instances, acts = 30, 3
	container := freshContainer("eager")
	cfg := replicaConfig(container)
	j := newJournal()
	a := startReplica(t, cfg, "a", j, 2, 0)
	b := startReplica(t, cfg, "b", j, 2, 0)
	requireOwnership(t, "start", a, b)
	requireBalanced(t, a, b)
	ids := instancesIn(t, b.p.ev().Owned(), "eager", instances)
	ctx := context.Background()
	for _, id := range ids {
		require.NoError(t, a.p.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: id, Orchestration: "Fan",
			Input: strconv.Itoa(acts), Version: "1.0.0", ExecutionID: 1}, 0))
	}
	require.Eventually(t, func() bool { return j.doneCount() == instances }, hang, 10*time.Millisecond)
	requireConsistent(t, j, a.p, ids, acts)

	st, _ := a.p.EngineStats()
	require.Positive(t, st.Eager, "a signalled its own writes in b's slots")
	j.mu.Lock()
	defer j.mu.Unlock()
	unowned := 0
	for _, id := range ids {
		for _, s := range j.turns[id] {
			if s.replica == "a" && !s.owned {
				unowned++
			}
		}
	}
	require.Positive(t, unowned, "a ran turns of instances in slots it did not own")
	t.Logf("a: %d turns in b's slots, %d eager signals; turns a=%d b=%d", unowned, st.Eager, a.turns.Load(), b.turns.Load())
}

// TestEagerWriterKilledMidTurnLosesNothing: a writer that took its own
// start eagerly, in a slot another replica owns, and died before its
// ack leaves nothing behind: the owner runs the orchestration to the
// end, once.
func TestEagerWriterKilledMidTurnLosesNothing(t *testing.T) {
	t.Parallel()
	const acts = 2
	container := freshContainer("eager-crash")
	cfg := replicaConfig(container)
	j := newJournal()
	b := startReplica(t, cfg, "b", j, 2, 0)
	requireOwnership(t, "b alone", b)
	wcfg := cfg
	wcfg.ReplicaID, wcfg.joinEagerly = "w", true
	w := openProvider(t, wcfg)
	ctx := context.Background()

	// Start instances through w, each in a slot b owns, until w's waiting
	// fetch takes one of them itself (its fetch may not be blocked yet
	// when the write returns: then b runs that one).
	var taken *durable.OrchestrationItem
	var started []string
	deadline := time.Now().Add(hang)
	for k := 0; taken == nil; k++ {
		require.True(t, time.Now().Before(deadline), "w never ran its own write")
		id := instancesIn(t, b.p.ev().Owned(), fmt.Sprint("eager-crash-", k), 1)[0]
		got := make(chan *durable.OrchestrationItem, 1)
		go func() {
			item, err := w.FetchOrchestrationItem(ctx, testOrchLock, time.Second, nil)
			if err != nil {
				item = nil
			}
			got <- item
		}()
		require.NoError(t, w.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: id, Orchestration: "Fan",
			Input: strconv.Itoa(acts), Version: "1.0.0", ExecutionID: 1}, 0))
		started = append(started, id)
		if item := <-got; item != nil && item.Instance == id && !w.ev().Owned().Contains(slots.Of(id)) {
			taken = item
		}
	}
	st, _ := w.EngineStats()
	require.Positive(t, st.Eager)
	w.Crash() // no ack: the turn dies with the process

	require.Eventually(t, func() bool { return j.doneCount() == len(started) }, hang, 10*time.Millisecond,
		"the owner finishes every orchestration, %s included", taken.Instance)
	requireConsistent(t, j, b.p, started, acts)
}
