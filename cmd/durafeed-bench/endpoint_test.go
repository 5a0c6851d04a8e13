package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/bench"
	"github.com/durafeed/durafeed/internal/emuproc"
)

// The endpoint tests run the bench as a user does against an account:
// cmd/cosmosemu and durafeed-bench each a process of their own, the bench
// given nothing but COSMOS_* variables (and, for Entra ID, the managed
// identity endpoint's), the emulator's certificate trusted through
// SSL_CERT_FILE.

func TestMain(m *testing.M) {
	code := m.Run()
	emuproc.Cleanup()
	os.Exit(code)
}

// runBench runs the bench binary with env and returns its report (nil
// when it wrote none), stderr and error.
func runBench(t *testing.T, env []string, args ...string) (*bench.Report, string, error) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "r.json")
	_, stderr, err := emuproc.Run(t, emuproc.Binary(t, "."), env, append([]string{"-out", out, "-png", ""}, args...)...)
	b, rerr := os.ReadFile(out)
	if rerr != nil {
		return nil, stderr, err
	}
	var rep bench.Report
	require.NoError(t, json.Unmarshal(b, &rep))
	return &rep, stderr, err
}

// smallRun is a short run of both modes: one latency case, one idle
// scenario, no failover.
var smallRun = []string{"-modes", "event-driven,polling", "-cases", "wake-remote", "-samples", "3", "-warmup", "0",
	"-interval", "1ms-5ms", "-poll-interval", "20ms", "-replicas", "1", "-idle-warmup", "0s", "-idle-window", "500ms",
	"-idle-slices", "1", "-failover", "-1s"}

// checkRun checks a small run's report: it ran on the account, measured
// both modes and spent what the account charged, less than estimated.
func checkRun(t *testing.T, rep *bench.Report, endpoint, auth string) {
	t.Helper()
	require.Empty(t, rep.Errors)
	require.Len(t, rep.Environments, 1)
	acct := rep.Environments[0].Account
	require.Equal(t, endpoint, acct.Endpoint)
	require.Equal(t, auth, acct.Auth)
	require.False(t, acct.Serverless)
	require.NotEmpty(t, acct.Regions)
	require.NotEmpty(t, acct.Consistency)
	require.True(t, strings.HasPrefix(acct.Database, "durafeed-bench-"), acct.Database)
	require.Len(t, rep.Latency, 2)
	for _, l := range rep.Latency {
		require.Equal(t, 3, l.N, l.Mode)
		require.Positive(t, l.RUPerWake, l.Mode)
	}
	require.Positive(t, rep.SpentRU)
	require.Less(t, rep.SpentRU, rep.EstimateRU)
	require.Equal(t, "the account's own charges (x-ms-request-charge)", rep.Settings.ChargeModel)
}

// TestBenchOnAnEndpointWithAKey: a run over COSMOS_ENDPOINT and COSMOS_KEY
// measures both modes in a throwaway database and deletes it; a run whose
// estimate is above -max-ru creates nothing.
func TestBenchOnAnEndpointWithAKey(t *testing.T) {
	t.Parallel()
	emu := emuproc.Start(t, "../cosmosemu")
	rep, stderr, err := runBench(t, emu.KeyEnv(), smallRun...)
	require.NoError(t, err, stderr)
	checkRun(t, rep, emu.Endpoint, "key")
	require.Contains(t, stderr, "account "+emu.Endpoint+" (key)")
	client := emu.Client(t, false)
	require.Empty(t, emuproc.Databases(t, client), "the throwaway database is deleted")

	rep, stderr, err = runBench(t, emu.KeyEnv(), append(smallRun, "-max-ru", "1000")...)
	require.Error(t, err)
	require.Nil(t, rep)
	require.Contains(t, stderr, "over the RU cap")
	require.Empty(t, emuproc.Databases(t, client), "a refused run creates nothing")
}

// TestBenchOnAnEndpointWithEntraID: with local authentication disabled,
// a run authenticates through DefaultAzureCredential's managed-identity
// path (the emulator's IDENTITY_ENDPOINT), manages its throwaway database
// through the emulator's Resource Manager surface and the data plane by
// token, and deletes the database at the end.
func TestBenchOnAnEndpointWithEntraID(t *testing.T) {
	t.Parallel()
	emu := emuproc.Start(t, "../cosmosemu", emuproc.EntraFlags...)
	rep, stderr, err := runBench(t, emu.EntraEnv(), smallRun...)
	require.NoError(t, err, stderr)
	checkRun(t, rep, emu.Endpoint, "Entra ID")
	require.Empty(t, emuproc.Databases(t, emu.Client(t, true)), "the throwaway database is deleted")

	// Without the account's resource id the run cannot manage its
	// database, and says so before creating anything.
	_, stderr, err = runBench(t, emu.EntraEnv()[:2], smallRun...)
	require.Error(t, err)
	require.Contains(t, stderr, "COSMOS_ACCOUNT_ID")
}
