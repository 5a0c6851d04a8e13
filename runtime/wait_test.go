package runtime_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/internal/memprovider"
	"github.com/durafeed/durafeed/runtime"
)

// watchingProvider adds durable.InstanceWatcher to a provider: every
// committed turn notifies the watches of its instance, and watches
// counts the watches open.
type watchingProvider struct {
	durable.Provider
	mu    sync.Mutex
	chans map[string][]chan struct{}
	open  int
}

type testWatch struct {
	p    *watchingProvider
	ch   chan struct{}
	once sync.Once
}

func (w *testWatch) Changed() <-chan struct{} { return w.ch }
func (w *testWatch) Close() {
	w.once.Do(func() {
		w.p.mu.Lock()
		w.p.open--
		w.p.mu.Unlock()
	})
}

func (p *watchingProvider) WatchInstance(ctx context.Context, instance string) (durable.InstanceWatch, error) {
	w := &testWatch{p: p, ch: make(chan struct{}, 1)}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.chans[instance] = append(p.chans[instance], w.ch)
	p.open++
	return w, nil
}

func (p *watchingProvider) AckOrchestrationItem(ctx context.Context, token string, turn durable.OrchestrationTurn) error {
	err := p.Provider.AckOrchestrationItem(ctx, token, turn)
	if err == nil && len(turn.HistoryDelta) > 0 {
		p.mu.Lock()
		for _, ch := range p.chans[turn.HistoryDelta[0].InstanceID] {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		p.mu.Unlock()
	}
	return err
}

func (p *watchingProvider) openWatches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

// gatedRegistry registers Gated: it sets the custom status "waiting",
// then awaits the activity Gate, which returns once release is closed;
// its output is its input plus one.
func gatedRegistry() (*runtime.Registry, chan struct{}) {
	reg := runtime.NewRegistry()
	release := make(chan struct{})
	runtime.RegisterActivity(reg, "Gate", func(ctx context.Context, _ int) (int, error) {
		select {
		case <-release:
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
	runtime.RegisterOrchestration(reg, "Gated", func(ctx *runtime.OrchestrationContext, in int) (int, error) {
		ctx.SetCustomStatus("waiting")
		var out int
		err := ctx.CallActivity("Gate", in).Await(&out)
		return out + in, err
	})
	return reg, release
}

// TestWaitHearsTheProvider: with a provider that reports changes
// (durable.InstanceWatcher), WaitForOrchestration and WaitForCustomStatus
// return on the notification of the turn that completes the instance,
// not at their next poll (an hour away here), and release their watches.
func TestWaitHearsTheProvider(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := &watchingProvider{Provider: memprovider.NewStore().Open(), chans: map[string][]chan struct{}{}}
	reg, release := gatedRegistry()
	start(t, p, reg, nil)
	c := runtime.NewClientWithOptions(p, runtime.ClientOptions{PollInitial: time.Hour, PollMax: time.Hour})

	// The custom status is set by the first turn, which may commit
	// before or after the wait begins: either way the wait returns.
	require.NoError(t, c.StartOrchestration(ctx, "w", "Gated", 41))
	cs, err := c.WaitForCustomStatus(ctx, "w", 0)
	require.NoError(t, err)
	require.NotNil(t, cs)

	done := make(chan runtime.Status, 1)
	go func() {
		st, err := c.WaitForOrchestration(ctx, "w")
		if err == nil {
			done <- st
		}
		close(done)
	}()
	require.Eventually(t, func() bool { return p.openWatches() == 1 }, 20*time.Second, time.Millisecond,
		"the wait watches the instance")
	close(release)
	st, ok := <-done
	require.True(t, ok, "the wait returned an error")
	require.Equal(t, runtime.StateCompleted, st.State)
	var out int
	require.NoError(t, st.DecodeOutput(&out))
	require.Equal(t, 42, out)
	require.Equal(t, 0, p.openWatches(), "every watch released")
}

// countingProvider counts the history reads and instance-record reads
// made through it.
type countingProvider struct {
	durable.Provider
	reads, infos atomic.Int64
}

func (p *countingProvider) Read(ctx context.Context, instance string) ([]history.Event, error) {
	p.reads.Add(1)
	return p.Provider.Read(ctx, instance)
}

func (p *countingProvider) Admin() (durable.ProviderAdmin, bool) {
	a, ok := p.Provider.Admin()
	if !ok {
		return nil, false
	}
	return countingAdmin{ProviderAdmin: a, p: p}, true
}

type countingAdmin struct {
	durable.ProviderAdmin
	p *countingProvider
}

func (a countingAdmin) GetInstanceInfo(ctx context.Context, instance string) (durable.InstanceInfo, error) {
	a.p.infos.Add(1)
	return a.ProviderAdmin.GetInstanceInfo(ctx, instance)
}

// TestWaitReadsTheHistoryOnceEnded: while the instance record says the
// orchestration runs, WaitForOrchestration's checks read only the record;
// the history, whose size grows with the orchestration, is read once the
// record says it ended, and at every check after a delay of PollMax (the
// safety net for a record that lags).
func TestWaitReadsTheHistoryOnceEnded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		pollMax      time.Duration
		readsWhileOn bool
	}{
		{"record first", time.Hour, false},
		{"history at PollMax", 4 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			p := memprovider.NewStore().Open()
			reg, release := gatedRegistry()
			start(t, p, reg, nil)
			plain := runtime.NewClient(p)
			require.NoError(t, plain.StartOrchestration(ctx, "g", "Gated", 41))
			_, err := plain.WaitForCustomStatus(ctx, "g", 0) // the first turn committed
			require.NoError(t, err)

			cp := &countingProvider{Provider: p}
			c := runtime.NewClientWithOptions(cp, runtime.ClientOptions{PollInitial: time.Millisecond, PollMax: tc.pollMax})
			done := make(chan runtime.Status, 1)
			go func() {
				st, err := c.WaitForOrchestration(ctx, "g")
				if err == nil {
					done <- st
				}
				close(done)
			}()
			if tc.readsWhileOn {
				// Delays of 1 and 2 ms read the record, those of 4 ms
				// the history.
				require.Eventually(t, func() bool { return cp.reads.Load() >= 3 }, 20*time.Second, time.Millisecond)
				require.GreaterOrEqual(t, cp.infos.Load(), int64(3))
			} else {
				require.Eventually(t, func() bool { return cp.infos.Load() >= 5 }, 20*time.Second, time.Millisecond)
				require.Zero(t, cp.reads.Load(), "no history read while the record says running")
			}
			before := cp.reads.Load()
			close(release)
			st, ok := <-done
			require.True(t, ok, "the wait returned an error")
			require.Equal(t, runtime.StateCompleted, st.State)
			var out int
			require.NoError(t, st.DecodeOutput(&out))
			require.Equal(t, 42, out)
			if !tc.readsWhileOn {
				require.Equal(t, before+1, cp.reads.Load(), "one history read, once ended")
			}
		})
	}
}
