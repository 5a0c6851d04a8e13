package provider

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
)

// TestOneLockAttemptPerInstance: a wakeup that reaches an instance while
// a fetch of this replica is locking it starts no second attempt (each
// would read the instance's messages and history only to lose the lock
// race); the attempt in flight follows it up. With every query of the
// instance's partition slowed down and four orchestration fetches, the
// completions of a 40-activity fan-out never have two of the replica's
// lock attempts reading the partition at once, and the instance
// completes.
func TestOneLockAttemptPerInstance(t *testing.T) {
	t.Parallel()
	container := freshContainer("lock-once")
	cfg := replicaConfig(container)
	cfg.joinEagerly = true
	j := newJournal()
	maxQueries := middleware.slowQueriesOf(container, "hot", 100*time.Millisecond)
	r := startReplica(t, cfg, "a", j, 4, 5*time.Millisecond)
	require.NoError(t, r.p.EnqueueForOrchestrator(context.Background(), durable.StartOrchestration{Instance: "hot", Orchestration: "Fan",
		Input: "40", Version: "1.0.0", ExecutionID: 1}, 0))
	awaitCompletion(t, container, time.Minute, func() bool { return j.doneCount() == 1 }, func() int64 {
		return r.acts.Load() + r.turns.Load()
	}, nil, r)
	j.mu.Lock()
	require.Empty(t, j.problems)
	j.mu.Unlock()
	require.Equal(t, 1, maxQueries(), "one lock attempt at a time reads the instance's partition")
	t.Logf("turns %d, activities %d", r.turns.Load(), r.acts.Load())
}
