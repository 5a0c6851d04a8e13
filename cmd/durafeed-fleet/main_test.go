package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable/history"
)

// TestFleet runs the multi-process test at a small scale: the emulator
// and the services as processes, a service killed, another stopped by
// SIGTERM and replaced, and every history checked.
func TestFleet(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out, log bytes.Buffer
	err := realMain(ctx, []string{"-n", "60", "-inflight", "10", "-grace", "15s"}, &out, &log)
	t.Log(out.String())
	require.NoError(t, err, "%s\n%s", out.String(), log.String())
	require.Contains(t, out.String(), "completed     60 of 60")
	require.Contains(t, out.String(), "status 0: true, leases handed over: true")
}

// TestCheckHistory: the checker tells a right history from each kind of
// wrong one.
func TestCheckHistory(t *testing.T) {
	t.Parallel()
	ev := func(id, src uint64, k history.EventKind) history.Event {
		return history.Event{EventID: id, SourceEventID: src, Kind: k}
	}
	right := []history.Event{
		ev(1, 0, history.OrchestrationStarted{Name: "Greet"}),
		ev(2, 0, history.ActivityScheduled{Name: "SayHello"}),
		ev(3, 2, history.ActivityCompleted{Result: `"Hello, g!"`}),
		ev(4, 0, history.OrchestrationCompleted{Output: `"Hello, g!"`}),
	}
	require.Empty(t, checkHistory("g", "Greet", right))
	twice := append(append([]history.Event{}, right[:3]...), ev(5, 2, history.ActivityCompleted{Result: `"x"`}), right[3])
	require.Contains(t, checkHistory("g", "Greet", twice), "completed 2 times")
	require.Contains(t, checkHistory("g", "Greet", right[:3]), "completed 0 times")
	wrong := append(append([]history.Event{}, right[:3]...), ev(4, 0, history.OrchestrationCompleted{Output: `"Hi"`}))
	require.Contains(t, checkHistory("g", "Greet", wrong), "output")
	approval := []history.Event{
		ev(1, 0, history.OrchestrationStarted{Name: "Approval"}),
		ev(2, 0, history.OrchestrationCompleted{Output: `{"item":"a","approved":true,"by":"fleet"}`}),
	}
	require.Contains(t, checkHistory("a", "Approval", approval), "received 0 times")
}
