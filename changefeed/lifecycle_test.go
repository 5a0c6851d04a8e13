package changefeed_test

import (
	"context"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/internal/epk"
	"github.com/stretchr/testify/require"
)

// processorGoroutines returns the stacks of goroutines running methods of
// package changefeed's types (Processor.Run, readers and their watchers).
func processorGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "durafeed/durafeed/changefeed.(*") {
			out = append(out, g)
		}
	}
	return out
}

// TestStopIsClean runs readers (busy, idle and blocked in a handler), stops
// the processor and checks that every goroutine it started is gone when
// Stop returns, and that the goroutine count returns to its baseline. Not
// parallel: it counts the whole process's goroutines.
func TestStopIsClean(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	r8 := epk.SplitEven(8)
	keys := append(keysIn(t, "g", epk.Range{Min: "", Max: r8[4].Min}, 6), keysIn(t, "h", epk.Range{Min: r8[4].Min, Max: epk.MaxExclusive}, 2)...)
	e.writeAll(t, keys, 0, 1) // warm the SDK's caches
	require.Empty(t, processorGoroutines())
	e.hc.CloseIdleConnections()
	baseline := runtime.NumGoroutine()

	store := newMemStore()
	leases := mixedLeases(store)
	blocked := make(chan struct{})
	rec := newRecorder()
	handler := func(hctx context.Context, b changefeed.Batch) error {
		if b.LeaseID == "p2-p3" {
			select {
			case <-blocked:
			default:
				close(blocked)
			}
			<-hctx.Done() // blocked until the processor stops
			return hctx.Err()
		}
		return rec.handle(hctx, b)
	}
	p, err := changefeed.New(e.c, newMemSource(asLeases(leases)...), handler, changefeed.Options{})
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	e.writeAll(t, keys, 1, 5)
	<-blocked
	rec.waitUntil(t, "some batches", func() bool { return len(rec.batches) > 0 })
	require.NotEmpty(t, processorGoroutines())

	require.NoError(t, p.Stop(ctx))
	require.NoError(t, <-errc)
	// Stop returns once every reader has signalled its end; a goroutine may
	// still be returning from its last deferred call then, so the check is
	// that none is left, not that none is runnable at that very instant.
	require.Eventually(t, func() bool { return len(processorGoroutines()) == 0 }, liveness, time.Millisecond,
		"every processor goroutine ends after Stop: %v", processorGoroutines())
	require.Zero(t, p.Stats().Readers)
	require.ErrorIs(t, p.Run(ctx), changefeed.ErrAlreadyRunning)
	require.NoError(t, p.Stop(ctx), "Stop is idempotent")

	// Connection goroutines (client and server side) end on their own
	// schedule once the idle connections are closed.
	e.hc.CloseIdleConnections()
	deadline := time.Now().Add(liveness)
	for runtime.NumGoroutine() > baseline && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), baseline)
}

func TestStopBeforeRunAndContextCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	src := newMemSource(newMemStore().lease("all", changefeed.FullRange))
	p, err := changefeed.New(e.c, src, newRecorder().handle, changefeed.Options{})
	require.NoError(t, err)
	require.NoError(t, p.Stop(context.Background()))
	require.NoError(t, p.Run(context.Background()), "Run after Stop returns at once")

	p2, err := changefeed.New(e.c, newMemSource(newMemStore().lease("all", changefeed.FullRange)), newRecorder().handle, changefeed.Options{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- p2.Run(ctx) }()
	cancel()
	require.NoError(t, <-errc)
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	src := newMemSource()
	h := newRecorder().handle
	for name, o := range map[string]changefeed.Options{
		"ceiling below active": {ActiveDelay: time.Second, IdleCeiling: time.Millisecond},
		"factor below 1":       {BackoffFactor: 0.5},
		"jitter 1":             {Jitter: 1},
		"negative items":       {MaxItemCount: -1},
		"zero start time":      {StartFrom: changefeed.StartFromTime(time.Time{})},
		"retry max below init": {RetryInitial: time.Second, RetryMax: time.Millisecond},
		"negative budget":      {EmptyReadBudget: -1},
		"NaN budget":           {EmptyReadBudget: math.NaN()},
		"infinite budget":      {EmptyReadBudget: math.Inf(1)},
		"negative per change":  {EmptyReadBudget: 1, ReadsPerChange: -1},
	} {
		_, err := changefeed.New(e.c, src, h, o)
		require.Error(t, err, name)
	}
	_, err := changefeed.New(nil, src, h, changefeed.Options{})
	require.Error(t, err)
	_, err = changefeed.New(e.c, nil, h, changefeed.Options{})
	require.Error(t, err)
	_, err = changefeed.New(e.c, src, nil, changefeed.Options{})
	require.Error(t, err)
}

// TestStartFrom checks the starting points of a lease without a
// continuation, and that "now" is pinned by a checkpoint so that a later
// owner continues from the first owner's start, not its own.
func TestStartFrom(t *testing.T) {
	t.Parallel()
	t.Run("now", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envOptions{})
		keys := keysIn(t, "n", changefeed.FullRange, 8)
		e.writeAll(t, keys, 0, 3) // before the start: skipped
		store := newMemStore()
		first := store.lease("all", changefeed.FullRange)
		pinned := make(chan struct{})
		first.checkpointHook = func() error {
			select {
			case <-pinned:
			default:
				close(pinned)
			}
			return nil
		}
		p1, err := changefeed.New(e.c, newMemSource(first), newRecorder().handle, changefeed.Options{StartFrom: changefeed.StartFromNow()})
		require.NoError(t, err)
		stop := run(t, p1)
		<-pinned
		stop()
		first.lose()
		require.Len(t, tokenRanges(t, store.get("all")), 4, "one position per physical partition")

		e.writeAll(t, keys, 3, 6) // after the first owner's start
		rec := newRecorder()
		p2, err := changefeed.New(e.c, newMemSource(store.lease("all", changefeed.FullRange)), rec.handle, changefeed.Options{StartFrom: changefeed.StartFromNow()})
		require.NoError(t, err)
		run(t, p2)
		rec.waitUntil(t, "the later writes", func() bool { return len(rec.all) >= len(keys)*3 })
		for _, d := range rec.snapshot() {
			require.GreaterOrEqual(t, d.Seq, 3, d.ID)
		}
		require.Len(t, rec.snapshot(), len(keys)*3)
	})
	t.Run("time", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, envOptions{})
		keys := keysIn(t, "m", changefeed.FullRange, 8)
		e.writeAll(t, keys, 0, 3)
		rec := newRecorder()
		p, err := changefeed.New(e.c, newMemSource(newMemStore().lease("all", changefeed.FullRange)), rec.handle,
			changefeed.Options{StartFrom: changefeed.StartFromTime(time.Now().Add(-time.Hour))})
		require.NoError(t, err)
		run(t, p)
		e.writeAll(t, keys, 3, 6)
		rec.waitAll(t, keys, 6)
		requireExactlyInOrder(t, rec.snapshot(), keys, 6)
	})
}

// TestLeaseSplitInheritsContinuation: a lease store may split a lease and
// give both halves the parent's continuation; each half continues from the
// parent's position over its own keys only.
func TestLeaseSplitInheritsContinuation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	phys := e.physical(t)
	rng := pkRange(phys[0])
	r8 := epk.SplitEven(8)
	lo, hi := r8[0], r8[1]
	require.Equal(t, rng, epk.Range{Min: lo.Min, Max: hi.Max})
	keys := keysIn(t, "l", rng, 16)
	e.writeAll(t, keys, 0, 5)

	store := newMemStore()
	parent := store.lease("parent", rng)
	rec1 := newRecorder()
	p1, err := changefeed.New(e.c, newMemSource(parent), rec1.handle, changefeed.Options{})
	require.NoError(t, err)
	stop := run(t, p1)
	rec1.waitAll(t, keys, 5)
	stop()
	parent.lose()
	e.writeAll(t, keys, 5, 10)

	cont := store.get("parent")
	halves := []*memLease{
		{id: "lo", rng: lo, cont: cont, store: store, done: make(chan struct{})},
		{id: "hi", rng: hi, cont: cont, store: store, done: make(chan struct{})},
	}
	rec2 := newRecorder()
	p2, err := changefeed.New(e.c, newMemSource(asLeases(halves)...), rec2.handle, changefeed.Options{})
	require.NoError(t, err)
	run(t, p2)
	rec2.waitUntil(t, "the later writes", func() bool { return len(rec2.all) >= len(keys)*5 })
	ds := rec2.snapshot()
	require.Len(t, ds, len(keys)*5)
	for _, d := range ds {
		require.GreaterOrEqual(t, d.Seq, 5)
		want := "lo"
		if hi.Contains(keyEPK(t, d.PK)) {
			want = "hi"
		}
		require.Equal(t, want, d.lease)
	}
}

// TestLocalLeaseAndStaticSource runs the processor without any lease store.
func TestLocalLeaseAndStaticSource(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	var saved []string
	l := changefeed.NewLocalLease("all", changefeed.FullRange, "", func(_ context.Context, c string) error {
		saved = append(saved, c)
		return nil
	})
	rec := newRecorder()
	p, err := changefeed.New(e.c, changefeed.StaticSource(l), rec.handle, changefeed.Options{})
	require.NoError(t, err)
	stop := run(t, p)
	keys := keysIn(t, "s", changefeed.FullRange, 4)
	e.writeAll(t, keys, 0, 3)
	rec.waitAll(t, keys, 3)
	stop()
	require.NotEmpty(t, saved)
	require.Equal(t, saved[len(saved)-1], l.Continuation())
	l.Release()
	require.ErrorIs(t, l.Checkpoint(context.Background(), "x"), changefeed.ErrLeaseLost)
	<-l.Done()
}

// TestOnPositioned: OnPositioned is called once per reader, after its
// first read has fixed StartFromNow's "now"; every write after the call
// is delivered.
func TestOnPositioned(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	keys := keysIn(t, "op", changefeed.FullRange, 8)
	var mu sync.Mutex
	var calls []string
	positioned := make(chan struct{})
	rec := newRecorder()
	p, err := changefeed.New(e.c, newMemSource(newMemStore().lease("all", changefeed.FullRange)), rec.handle,
		changefeed.Options{StartFrom: changefeed.StartFromNow(), ActiveDelay: 5 * time.Millisecond, IdleCeiling: 20 * time.Millisecond,
			OnPositioned: func(id string) {
				mu.Lock()
				calls = append(calls, id)
				if len(calls) == 1 {
					close(positioned)
				}
				mu.Unlock()
			}})
	require.NoError(t, err)
	run(t, p)
	<-positioned
	e.writeAll(t, keys, 0, 3)
	rec.waitAll(t, keys, 3)
	requireExactlyInOrder(t, rec.snapshot(), keys, 3)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"all"}, calls, "once per reader, with its lease's ID")
}
