package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/internal/memprovider"
	"github.com/durafeed/durafeed/runtime"
)

// TestClientRequestIDs: a call repeated with its request id takes effect
// once; the same id with other arguments is refused; calls without one get
// fresh ids, so two calls are two effects.
func TestClientRequestIDs(t *testing.T) {
	ctx := testCtx(t)
	p := memprovider.NewStore().Open()
	c := runtime.NewClient(p)
	admin, ok := p.Admin()
	require.True(t, ok)
	depth := func() int {
		d, err := admin.GetQueueDepths(ctx)
		require.NoError(t, err)
		return d.OrchestratorQueue
	}

	calls := []struct {
		name  string
		call  func(...runtime.CallOption) error
		other func(...runtime.CallOption) error
	}{
		{"start",
			func(o ...runtime.CallOption) error { return c.StartOrchestration(ctx, "i", "O", 1, o...) },
			func(o ...runtime.CallOption) error { return c.StartOrchestration(ctx, "i", "O", 2, o...) }},
		{"raise",
			func(o ...runtime.CallOption) error { return c.RaiseEvent(ctx, "i", "e", 1, o...) },
			func(o ...runtime.CallOption) error { return c.RaiseEvent(ctx, "i", "e", 2, o...) }},
		{"enqueue-event",
			func(o ...runtime.CallOption) error { return c.EnqueueEvent(ctx, "i", "q", 1, o...) },
			func(o ...runtime.CallOption) error { return c.EnqueueEvent(ctx, "i", "q", 2, o...) }},
		{"cancel",
			func(o ...runtime.CallOption) error { return c.CancelInstance(ctx, "i", "a", o...) },
			func(o ...runtime.CallOption) error { return c.CancelInstance(ctx, "i", "b", o...) }},
	}
	want := 0
	for _, tc := range calls {
		id := runtime.WithRequestID("call-" + tc.name)
		require.NoError(t, tc.call(id), tc.name)
		require.NoError(t, tc.call(id), "%s repeated", tc.name)
		want++
		require.Equal(t, want, depth(), "%s: one message for two calls with one id", tc.name)
		require.ErrorIs(t, tc.other(id), durable.ErrPermanent, "%s: other arguments under a used id", tc.name)
		require.ErrorIs(t, tc.other(id), durable.ErrRequestReused, tc.name)
		require.NoError(t, tc.call(), tc.name)
		require.NoError(t, tc.call(), tc.name)
		want += 2
		require.Equal(t, want, depth(), "%s: calls without an id are distinct", tc.name)
	}
}

// TestClientRecorded: the *Recorded checks say, writing nothing, whether
// a call under a request id took effect (the same call), another call used
// the id, or nothing is known (no id, or an unused one).
func TestClientRecorded(t *testing.T) {
	ctx := testCtx(t)
	p := memprovider.NewStore().Open()
	c := runtime.NewClient(p)
	admin, _ := p.Admin()
	id := runtime.WithRequestID("k")
	check := func(want durable.RequestState, got durable.RequestState, err error) {
		t.Helper()
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	got, err := c.StartRecorded(ctx, "i", "O", `1`, id)
	check(durable.RequestUnknown, got, err)
	require.NoError(t, c.StartOrchestrationRaw(ctx, "i", "O", `1`, id))
	require.NoError(t, c.RaiseEventRaw(ctx, "i", "e", `1`, runtime.WithRequestID("e")))
	require.NoError(t, c.CancelInstance(ctx, "i", "r", runtime.WithRequestID("c")))
	d, err := admin.GetQueueDepths(ctx)
	require.NoError(t, err)

	got, err = c.StartRecorded(ctx, "i", "O", `1`, id)
	check(durable.RequestSame, got, err)
	got, err = c.StartRecorded(ctx, "i", "O", `2`, id)
	check(durable.RequestDifferent, got, err)
	got, err = c.StartRecorded(ctx, "i", "O", `1`)
	check(durable.RequestUnknown, got, err)
	got, err = c.EventRecorded(ctx, "i", "e", `1`, runtime.WithRequestID("e"))
	check(durable.RequestSame, got, err)
	got, err = c.EventRecorded(ctx, "i", "e", `1`, id)
	check(durable.RequestDifferent, got, err)
	got, err = c.CancelRecorded(ctx, "i", "r", runtime.WithRequestID("c"))
	check(durable.RequestSame, got, err)
	got, err = c.CancelRecorded(ctx, "j", "r", runtime.WithRequestID("c"))
	check(durable.RequestUnknown, got, err)
	after, err := admin.GetQueueDepths(ctx)
	require.NoError(t, err)
	require.Equal(t, d, after, "a check writes nothing")
}

// TestCrashReleasesNothing: a crashed runtime sends nothing more: the
// activity it was running stays locked (no abandon, unlike a forced
// Shutdown), so another runtime takes it only after its lock expires.
func TestCrashReleasesNothing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := memprovider.NewStore().Open()
	cli := runtime.NewClient(p)
	stuck := make(chan struct{})
	reg := runtime.NewRegistry()
	runtime.RegisterActivityRaw(reg, "Work", func(ctx context.Context, _ string) (string, error) {
		close(stuck)
		<-ctx.Done()
		return "", ctx.Err()
	})
	runtime.RegisterOrchestrationRaw(reg, "O", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		return ctx.CallActivityRaw("Work", "").AwaitRaw()
	})
	rt := start(t, p, reg, func(o *runtime.Options) { o.WorkerLockTimeout = time.Hour })
	require.NoError(t, cli.StartOrchestration(ctx, "crashed", "O", ""))
	<-stuck
	rt.Crash()
	require.Error(t, rt.Start(), "a crashed runtime cannot start again")

	item, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, durable.AnyTag())
	require.NoError(t, err)
	require.Nil(t, item, "the crashed runtime gave its activity back")
	st, err := cli.GetStatus(ctx, "crashed")
	require.NoError(t, err)
	require.Equal(t, runtime.StateRunning, st.State, "nothing was committed for the cut-off activity")
}
