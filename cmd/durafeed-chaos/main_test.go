package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/chaos"
	"github.com/durafeed/durafeed/internal/account"
	"github.com/durafeed/durafeed/provider"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		check func(t *testing.T, o options)
		bad   bool
	}{
		{name: "defaults: both modes at full scale", check: func(t *testing.T, o options) {
			require.Equal(t, []provider.Mode{provider.ModeEventDriven, provider.ModePolling}, o.modes)
			require.Equal(t, 1000, o.campaign.Orchestrations)
			require.Equal(t, 3, o.campaign.Replicas)
			require.Equal(t, 2*time.Millisecond, o.campaign.Latency)
			require.Equal(t, chaos.DefaultFaultRates(), *o.campaign.Faults)
			require.Equal(t, 0.4, o.campaign.KillAt)
			require.Equal(t, 1, o.campaign.Splits)
		}},
		{name: "one mode, smaller, other faults", args: []string{"-mode", "polling", "-n", "60", "-seed", "9", "-drop", "0.05", "-throttle", "0"},
			check: func(t *testing.T, o options) {
				require.Equal(t, []provider.Mode{provider.ModePolling}, o.modes)
				require.Equal(t, 60, o.campaign.Orchestrations)
				require.Equal(t, uint64(9), o.campaign.Seed)
				require.Equal(t, 0.05, o.campaign.Faults.Drop)
				require.Zero(t, o.campaign.Faults.Throttle)
			}},
		{name: "zero turns things off", args: []string{"-latency", "0", "-splits", "0", "-kill-at", "0", "-rate", "0"},
			check: func(t *testing.T, o options) {
				require.Negative(t, o.campaign.Latency)
				require.Negative(t, o.campaign.Splits)
				require.Negative(t, o.campaign.KillAt)
				require.Negative(t, o.campaign.Rate)
			}},
		{name: "unknown mode", args: []string{"-mode", "fast"}, bad: true},
		{name: "stray argument", args: []string{"extra"}, bad: true},
		{name: "unknown flag", args: []string{"-nope"}, bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			o, err := parseFlags(tc.args, noEnv, &stderr)
			if tc.bad {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			tc.check(t, o)
		})
	}
}

func TestBadFlagsExitTwo(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Equal(t, 2, realMain([]string{"-mode", "fast"}, noEnv, &stdout, &stderr))
	require.Equal(t, 0, realMain([]string{"-h"}, noEnv, &stdout, &stderr))
	require.Equal(t, 2, realMain([]string{"-throughput", "lots"}, accountEnv, &stdout, &stderr))
}

func noEnv(string) string { return "" }

// accountEnv names an account nobody listens at: a run that reached it
// would fail.
func accountEnv(k string) string {
	return map[string]string{"COSMOS_ENDPOINT": "https://127.0.0.1:1/", "COSMOS_KEY": "a2V5"}[k]
}

func TestAccountFlags(t *testing.T) {
	var stderr bytes.Buffer
	o, err := parseFlags(nil, noEnv, &stderr)
	require.NoError(t, err)
	require.Nil(t, o.campaign.Account, "no COSMOS_ENDPOINT: the embedded emulator")
	caps, err := splitCap(o)
	require.NoError(t, err)
	require.Equal(t, []float64{0, 0}, caps, "no cap on the emulator")

	// docs/BENCHMARKING.md's example fits the default cap.
	o, err = parseFlags([]string{"-n", "200"}, accountEnv, &stderr)
	require.NoError(t, err)
	require.NotNil(t, o.campaign.Account)
	require.Equal(t, "https://127.0.0.1:1/", o.campaign.Account.Endpoint)
	require.Equal(t, "a2V5", o.campaign.Account.Key)
	require.False(t, o.campaign.Account.Keep)
	require.Zero(t, o.campaign.Account.Throughput, "the account package's default")
	require.Equal(t, float64(defaultMaxRU), o.maxRU)
	caps, err = splitCap(o)
	require.NoError(t, err)
	sum := 0.0
	for i, m := range o.modes {
		c := o.campaign
		c.Mode = m
		require.GreaterOrEqual(t, caps[i], c.EstimateRU(), "each mode's share covers its estimate")
		sum += caps[i]
	}
	require.InDelta(t, defaultMaxRU, sum, 1e-6, "the shares sum to the cap")

	o, err = parseFlags([]string{"-keep", "-throughput", "manual:400", "-max-ru", "0"}, accountEnv, &stderr)
	require.NoError(t, err)
	require.True(t, o.campaign.Account.Keep)
	require.Equal(t, account.Throughput{Manual: 400}, o.campaign.Account.Throughput)
	caps, err = splitCap(o)
	require.NoError(t, err)
	require.Equal(t, []float64{0, 0}, caps, "-max-ru 0: no cap")

	_, err = parseFlags([]string{"-max-ru", "-1"}, accountEnv, &stderr)
	require.Error(t, err)
}

// TestCapRefusesBeforeConnecting: a campaign estimated above the cap is
// refused before the account (here nobody) is contacted; the default
// 1000 roots in both modes are above the default cap.
func TestCapRefusesBeforeConnecting(t *testing.T) {
	for args, cap := range map[string]string{"-max-ru 1000": "1000", "": "1000000"} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 1, realMain(strings.Fields(args), accountEnv, &stdout, &stderr), args)
		require.Contains(t, stderr.String(), "above the cap of "+cap+" RU", args)
		require.Empty(t, stdout.String(), args)
	}
}
