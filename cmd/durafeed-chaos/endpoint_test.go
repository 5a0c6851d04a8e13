package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/internal/emuproc"
)

func TestMain(m *testing.M) {
	code := m.Run()
	emuproc.Cleanup()
	os.Exit(code)
}

// smallCampaign is a short campaign in both modes, with client-side
// faults at the default rates and a replica killed midway.
var smallCampaign = []string{"-mode", "both", "-n", "16", "-rate", "0", "-latency", "0"}

// TestChaosOnAnEndpoint runs durafeed-chaos as a process against
// cmd/cosmosemu as another, reached over COSMOS_ENDPOINT as an account is,
// with the key and with Entra ID: faults injected on the client side, the
// split skipped, every check passed, the throwaway database deleted.
func TestChaosOnAnEndpoint(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		entra bool
	}{{"key", false}, {"Entra ID", true}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var emu emuproc.Emulator
			var env []string
			if tt.entra {
				emu = emuproc.Start(t, "../cosmosemu", emuproc.EntraFlags...)
				env = emu.EntraEnv()
			} else {
				emu = emuproc.Start(t, "../cosmosemu")
				env = emu.KeyEnv()
			}
			stdout, stderr, err := emuproc.Run(t, emuproc.Binary(t, "."), env, smallCampaign...)
			require.NoError(t, err, "%s\n%s", stdout, stderr)
			require.Contains(t, stdout, "account "+emu.Endpoint+" ("+tt.name+")")
			t.Log(stdout)
			require.Empty(t, emuproc.Databases(t, emu.Client(t, tt.entra)), "the throwaway database is deleted")
			require.Equal(t, 2, strings.Count(stdout, "ru="), "a summary line per mode with its spend")
		})
	}
}
