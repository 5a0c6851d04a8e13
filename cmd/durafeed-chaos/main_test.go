package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/chaos"
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
			o, err := parseFlags(tc.args, &stderr)
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
	require.Equal(t, 2, realMain([]string{"-mode", "fast"}, &stdout, &stderr))
	require.Equal(t, 0, realMain([]string{"-h"}, &stdout, &stderr))
}
