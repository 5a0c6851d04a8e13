package provider

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestLogLinesNameTheReplicaOnce: the engine and the lease store it
// builds each name the replica, and a line must carry the field once (a
// JSON line with a key twice is read differently by different tools).
func TestLogLinesNameTheReplicaOnce(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	cfg := replicaConfig(freshContainer("logfields"))
	cfg.ReplicaID = "r-logs"
	cfg.Logger = zap.New(core)
	p := openProvider(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	require.NoError(t, p.ev().Join(ctx))
	require.Eventually(t, func() bool { return logs.FilterMessage("registered").Len() > 0 }, hang, 10*time.Millisecond,
		"the lease store logs its registration")
	for _, e := range logs.All() {
		n := 0
		for _, f := range e.Context {
			if f.Key == "replica" {
				n++
				require.Equal(t, "r-logs", f.String, e.Message)
			}
		}
		require.LessOrEqual(t, n, 1, "%q (%s) names the replica %d times", e.Message, e.LoggerName, n)
	}
}
