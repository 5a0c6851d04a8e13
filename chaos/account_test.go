package chaos

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/internal/account"
	"github.com/durafeed/durafeed/internal/emuproc"
	"github.com/durafeed/durafeed/provider"
)

// endpoint starts an emulator over HTTPS (with middleware mw) and returns
// it with account options that reach it over its endpoint, as a real
// account is reached.
func endpoint(t *testing.T, mw ...cosmosemu.Middleware) (*cosmosemu.Server, *account.Options) {
	t.Helper()
	srv, err := cosmosemu.Start(t.Context(), cosmosemu.Options{Middleware: mw})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv, &account.Options{Endpoint: srv.Endpoint(), Key: srv.Key(), ClientOptions: srv.ClientOptions}
}

// databases lists the emulator's databases.
func databases(t *testing.T, srv *cosmosemu.Server) []string {
	t.Helper()
	cl, err := srv.NewClient()
	require.NoError(t, err)
	return emuproc.Databases(t, cl)
}

// TestChaosCampaignOnAccount runs a small campaign on an account reached
// over its endpoint (an emulator that injects nothing): the faults and
// latency are injected client side, the split is skipped, the kill still
// happens; the checker must find nothing, and the throwaway database is
// gone afterwards.
func TestChaosCampaignOnAccount(t *testing.T) {
	t.Parallel()
	for _, mode := range []provider.Mode{provider.ModeEventDriven, provider.ModePolling} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			srv, ao := endpoint(t)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			const n = 24 // four of each kind
			rates := FaultRates{Throttle: 0.05, ThrottleRetryAfter: 10 * time.Millisecond, Unavailable: 0.01,
				Drop: 0.01, TimeoutAfter: 0.005, Gone: 0.005}
			var progress bytes.Buffer
			c := Campaign{Mode: mode, Orchestrations: n, Account: ao, Faults: &rates, MaxRU: 1e9,
				Rate: 20, Timeout: 3 * time.Minute, SettleTimeout: time.Minute, Progress: &progress}
			res, err := c.Run(ctx)
			t.Log(progress.String())
			require.NoError(t, err)
			var details bytes.Buffer
			res.WriteDetails(&details)
			t.Log(res.Summary() + "\n" + details.String())

			rep := res.Report
			require.Equal(t, n, rep.Expected)
			require.Equal(t, n, rep.Completed, "roots completed with the expected output")
			require.Empty(t, rep.Findings)
			require.True(t, res.OK())
			require.Zero(t, res.Splits, "no split on an account")
			require.Equal(t, 1, res.Killed, "the kill is process-local: it still runs")
			require.Equal(t, 1, res.Joined)
			require.True(t, hasEvent(res.Events, "skipped 1 partition split"), "the skipped split is said")
			require.True(t, hasEvent(res.Events, "injected client side"))

			require.NotNil(t, res.Account)
			require.True(t, strings.HasPrefix(res.Account.Database, "durafeed-chaos-"), res.Account.Database)
			require.Positive(t, res.Faults, "client-side faults fired")
			require.Positive(t, res.FaultsByRule["throttle-429"])
			require.Positive(t, res.Requests)
			require.Positive(t, res.Spent.RequestCharge, "RU spent")
			require.GreaterOrEqual(t, res.Spent.Throttled, res.FaultsByRule["throttle-429"], "the meter saw the injected 429s")
			require.Contains(t, res.Summary(), " ru=")
			require.Contains(t, details.String(), "faults (client side)")
			require.NotContains(t, databases(t, srv), res.Account.Database, "the throwaway database was deleted")
		})
	}
}

func hasEvent(events []string, s string) bool {
	for _, e := range events {
		if strings.Contains(e, s) {
			return true
		}
	}
	return false
}

// TestChaosCampaignCap: a campaign estimated above its cap is refused
// before anything is created; one under it whose clients spend past it
// (the emulator charges 100 RU a request) is stopped and cleaned up.
func TestChaosCampaignCap(t *testing.T) {
	t.Parallel()
	t.Run("estimate over the cap", func(t *testing.T) {
		t.Parallel()
		srv, ao := endpoint(t)
		c := Campaign{Orchestrations: 24, Account: ao}
		c.MaxRU = c.EstimateRU() / 2
		res, err := c.Run(t.Context())
		require.Nil(t, res)
		require.True(t, errors.Is(err, account.ErrOverCap), "%v", err)
		require.Empty(t, databases(t, srv), "nothing was created")
	})
	t.Run("spent past the cap", func(t *testing.T) {
		t.Parallel()
		dear := func(next cosmosemu.Handler) cosmosemu.Handler {
			return func(ctx context.Context, req *cosmosemu.Request) *cosmosemu.Response {
				resp := next(ctx, req)
				resp.RequestCharge = 100
				return resp
			}
		}
		srv, ao := endpoint(t, dear)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		c := Campaign{Orchestrations: 24, Account: ao, Rate: 20}
		est := c.EstimateRU()
		c.MaxRU = 1.01 * est
		res, err := c.Run(ctx)
		require.Nil(t, res)
		require.True(t, errors.Is(err, account.ErrOverCap), "%v", err)
		require.NoError(t, ctx.Err(), "stopped by the cap, not the test's deadline")
		require.Empty(t, databases(t, srv), "the throwaway database was deleted")
	})
}
