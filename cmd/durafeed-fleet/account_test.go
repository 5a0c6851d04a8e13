package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/internal/account"
	"github.com/durafeed/durafeed/internal/emuproc"
)

// TestFleetOnAccount runs the fleet test and the sweep, each small, on
// cmd/cosmosemu started as a process of its own and reached as an account
// is: COSMOS_ENDPOINT and COSMOS_KEY in the fleet's environment, the
// emulator's certificate in SSL_CERT_FILE for the services and the
// fleet's own clients. A run estimated above -max-ru is refused before
// anything is sent or started; each run creates its throwaway database
// with a container per mode or cell, completes its orchestrations, reports
// the services' RU from their /metrics (matching what the emulator
// charged), and deletes the database at the end unless -keep.
func TestFleetOnAccount(t *testing.T) {
	t.Parallel()
	bins := testBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ps := newProcSet(ctx)
	defer ps.stop()
	cert := filepath.Join(t.TempDir(), "cosmosemu.pem")
	emu, err := startEmulator(ctx, ps, filepath.Join(bins, "cosmosemu"), cert, nil, defaultEnv(os.Environ()), io.Discard)
	require.NoError(t, err)
	endpoint := emu.address()
	env := append(defaultEnv(os.Environ()), "COSMOS_ENDPOINT="+endpoint, "COSMOS_KEY="+cosmosemu.WellKnownKey, "SSL_CERT_FILE="+cert)

	tr, err := ownTransport(env)
	require.NoError(t, err)
	hc := &http.Client{Transport: tr}
	key, err := azcosmos.NewKeyCredential(cosmosemu.WellKnownKey)
	require.NoError(t, err)
	cli, err := azcosmos.NewClientWithKey(endpoint, key, &azcosmos.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: hc}})
	require.NoError(t, err)
	databases := func() []string {
		var ids []string
		pager := cli.NewQueryDatabasesPager("SELECT * FROM d", nil)
		for pager.More() {
			page, err := pager.NextPage(ctx)
			require.NoError(t, err)
			for _, d := range page.Databases {
				ids = append(ids, d.ID)
			}
		}
		return ids
	}
	// charged returns what the emulator answered and charged since the
	// last call (its admin counters, reset).
	charged := func() (requests int64, ru float64) {
		admin := strings.TrimSuffix(endpoint, "/") + "/_emulator/counters"
		resp, err := hc.Get(admin)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var snap struct {
			Total struct {
				Requests      int64   `json:"requests"`
				RequestCharge float64 `json:"request_charge"`
			} `json:"total"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&snap))
		reset, err := hc.Post(admin+"/reset", "", nil)
		require.NoError(t, err)
		reset.Body.Close()
		return snap.Total.Requests, snap.Total.RequestCharge
	}
	// The services' and the fleet's meters saw every charge the
	// emulator made but those of the requests cut off by the SIGKILL or
	// sent after a service's last scrape, and the database's deletion.
	requireMatches := func(services, fleet, emulator float64) {
		t.Helper()
		t.Logf("services %.1f RU + the fleet's own %.1f RU; the emulator charged %.1f RU", services, fleet, emulator)
		require.Positive(t, services)
		require.Positive(t, fleet)
		require.LessOrEqual(t, services+fleet, emulator+0.01)
		require.GreaterOrEqual(t, services+fleet, 0.8*emulator, "services %.1f + fleet %.1f RU against the emulator's %.1f", services, fleet, emulator)
	}
	charged()

	t.Run("over the cap", func(t *testing.T) {
		for _, args := range [][]string{{"-n", "3000", "-max-ru", "100000"}, {"-sweep", "-max-ru", "100000"}} {
			var out, log bytes.Buffer
			// No binaries: a process started would fail otherwise.
			err := realMain(ctx, append(args, "-bin-dir", filepath.Join(t.TempDir(), "none")), env, &out, &log)
			require.ErrorIs(t, err, account.ErrOverCap, "%v", args)
			require.Contains(t, out.String(), "estimated", "%v", args)
			require.Contains(t, out.String(), "cap 100000 RU", "%v", args)
		}
		requests, _ := charged()
		require.Zero(t, requests, "a refused run sends the account nothing")
		require.Empty(t, databases())
	})

	t.Run("fleet", func(t *testing.T) {
		var out, log bytes.Buffer
		err := realMain(ctx, []string{"-n", "12", "-inflight", "4", "-modes", "event-driven", "-grace", "10s", "-timeout", "2m", "-bin-dir", bins},
			env, &out, &log)
		t.Log(out.String())
		require.NoError(t, err, "%s\n%s", out.String(), log.String())
		text := out.String()
		require.Contains(t, text, "account "+endpoint+" (key)")
		require.Contains(t, text, "container fleet-event-driven of "+endpoint+"'s database durafeed-fleet-")
		require.Contains(t, text, "completed     12 of 12")
		require.Contains(t, text, "checks        every orchestration completed once")
		require.Contains(t, text, "the account's own charges")
		m := regexp.MustCompile(`RU +([0-9.]+) per orchestration completed: ([0-9]+) RU`).FindStringSubmatch(text)
		require.NotNil(t, m, text)
		perOrch, _ := strconv.ParseFloat(m[1], 64)
		require.Positive(t, perOrch)
		m = regexp.MustCompile(`account spend: ([0-9]+) RU by the services .*, ([0-9]+) RU by the fleet's own clients`).FindStringSubmatch(text)
		require.NotNil(t, m, text)
		services, _ := strconv.ParseFloat(m[1], 64)
		fleet, _ := strconv.ParseFloat(m[2], 64)
		_, emulator := charged()
		requireMatches(services, fleet, emulator+1) // the line rounds to whole RU
		require.Regexp(t, `deleted the run's database "durafeed-fleet-[^"]+"`, text)
		require.Empty(t, databases(), "the run's database is deleted")
	})

	t.Run("sweep, kept", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "sweep.json")
		var stdout, log bytes.Buffer
		err := realMain(ctx, []string{"-sweep", "-sweep-loads", "300ms", "-sweep-samples", "3", "-sweep-settle", "0s", "-out", out, "-keep", "-bin-dir", bins},
			env, &stdout, &log)
		t.Log(stdout.String())
		require.NoError(t, err, "%s\n%s", stdout.String(), log.String())
		rep := readSweepReport(t, out)
		require.NotNil(t, rep.Settings.Account)
		require.Equal(t, endpoint, rep.Settings.Account.Endpoint)
		require.Equal(t, "key", rep.Settings.Account.Auth)
		require.Empty(t, rep.Settings.Emulator)
		require.Zero(t, rep.Settings.LatencyMS)
		require.Equal(t, costsOnAccount, rep.Settings.Costs)
		require.Len(t, rep.Cells, 2)
		var cellRU float64
		for _, c := range rep.Cells {
			require.Empty(t, c.Error, c.Mode)
			require.Empty(t, c.Failures, c.Mode)
			require.Equal(t, 6, c.Completed, c.Mode)
			require.Positive(t, c.RUPerOrch, c.Mode)
			require.Zero(t, c.Throttled, c.Mode)
			cellRU += c.RU
		}
		require.NotNil(t, rep.Spend)
		require.Positive(t, rep.Spend.EstimateRU)
		require.Equal(t, float64(defaultMaxRU), rep.Spend.MaxRU)
		require.Greater(t, rep.Spend.ServicesRU, cellRU, "the cells' measured periods are part of the services' spend")
		_, emulator := charged()
		requireMatches(rep.Spend.ServicesRU, rep.Spend.FleetRU, emulator)
		dbs := databases()
		require.Len(t, dbs, 1, "-keep keeps the run's database")
		require.Equal(t, rep.Settings.Account.Database, dbs[0])
		require.Contains(t, stdout.String(), "kept the run's database")
		db, err := cli.NewDatabase(dbs[0])
		require.NoError(t, err)
		_, err = db.Delete(ctx, nil)
		require.NoError(t, err)
	})
}

// TestAccountEnv: on an account the services get the account's variables
// and, with Entra ID only, the credential's from the fleet's
// environment; on an emulator none of them.
func TestAccountEnv(t *testing.T) {
	t.Parallel()
	parent := []string{"PATH=/bin", "HOME=/home/u", "SSL_CERT_FILE=/c.pem", "COSMOS_ENDPOINT=https://a/", "COSMOS_KEY=k",
		"COSMOS_ACCOUNT_ID=/subscriptions/s", "COSMOS_ARM_ENDPOINT=https://arm/", "AZURE_CLIENT_ID=id", "AZURE_TENANT_ID=t",
		"IDENTITY_ENDPOINT=https://id/", "IDENTITY_HEADER=h", "MSI_ENDPOINT=https://msi/", "IMDS_ENDPOINT=https://imds/",
		"DURAFEED_MODE=polling", "OTEL_EXPORTER=x"}
	require.Equal(t, []string{"PATH=/bin", "HOME=/home/u", "SSL_CERT_FILE=/c.pem"}, defaultEnv(parent))

	key := accountServiceEnv(account.Options{Endpoint: "https://a/", Key: "k"}, "db", parent)
	require.Equal(t, []string{"COSMOS_ENDPOINT=https://a/", "COSMOS_DATABASE=db", "COSMOS_KEY=k"}, key)
	entra := accountServiceEnv(account.Options{Endpoint: "https://a/"}, "db", parent)
	require.Equal(t, []string{"COSMOS_ENDPOINT=https://a/", "COSMOS_DATABASE=db", "COSMOS_ACCOUNT_ID=/subscriptions/s",
		"COSMOS_ARM_ENDPOINT=https://arm/", "AZURE_CLIENT_ID=id", "AZURE_TENANT_ID=t", "IDENTITY_ENDPOINT=https://id/",
		"IDENTITY_HEADER=h", "MSI_ENDPOINT=https://msi/", "IMDS_ENDPOINT=https://imds/"}, entra)
	tg := (&accountRun{serviceEnv: key}).targetEnv("fleet-polling")
	require.Equal(t, append(slices.Clone(key), "COSMOS_CONTAINER=fleet-polling"), tg)

	require.Equal(t, "fleet-event-driven", containerName(modeEventDriven, ""))
	require.Equal(t, "sweep-event-driven-peer-100ms", containerName(modePeer, "100ms"))
	require.Equal(t, "/c.pem", lookup(parent, "SSL_CERT_FILE"))
	require.Empty(t, lookup(parent, "SSL_CERT_DIR"))
}

// TestEstimate: the estimate's constants are docs/fleet-sweep's dearest
// mode plus half; the default fleet test fits the default cap, the
// default sweep does not; a bad -throughput or -max-ru is refused.
func TestEstimate(t *testing.T) {
	t.Parallel()
	require.InDelta(t, 279.6, estimateRUPerOrchestration, 0.01)
	require.InDelta(t, 66.4, estimateIdleRUPerReplicaSecond, 0.01)
	fleet := estimateFleet(defaultConfig(), 2)
	require.InDelta(t, 2*(100*fanOutWeight+200), fleet.Orchestrations, 1e-9)
	require.InDelta(t, 3*600+2*10, fleet.ReplicaSeconds, 1e-9)
	require.NoError(t, account.CheckEstimate(fleet.RU, defaultMaxRU))
	sc := defaultSweepConfig()
	var err error
	sc.Loads, err = parseLoads(defaultSweepLoads)
	require.NoError(t, err)
	sweep := estimateSweep(sc)
	require.InDelta(t, 2*(2*(300+60+12+12)+4*2), sweep.Orchestrations, 1e-9)
	require.ErrorIs(t, account.CheckEstimate(sweep.RU, defaultMaxRU), account.ErrOverCap)
	require.Contains(t, sweep.String(), "docs/fleet-sweep")

	for _, args := range [][]string{{"-throughput", "autoscale:1500"}, {"-throughput", "fast"}, {"-max-ru", "-1"}} {
		var out, log bytes.Buffer
		require.Error(t, realMain(context.Background(), args, defaultEnv(os.Environ()), &out, &log), "%v", args)
		require.Empty(t, out.String(), "%v", args)
	}
}

// TestSpendCap: the spend sums each service's counters as last scraped,
// by group, keeps a service's last figures once it has exited, and stops
// the run with an error wrapping account.ErrOverCap once the services'
// and the fleet's own charges pass the cap.
func TestSpendCap(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	ru := 20.0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "durafeed_cosmos_request_units_total{db_operation_name=\"read\"} %g\ndurafeed_cosmos_requests_total 3\ndurafeed_cosmos_throttles_total 1\n", ru)
	}))
	defer srv.Close()
	setRU := func(v float64) {
		mu.Lock()
		defer mu.Unlock()
		ru = v
	}
	addr := strings.TrimPrefix(srv.URL, "http://")
	a := &proc{addr: addr, exited: make(chan struct{})}
	b := &proc{addr: addr, exited: make(chan struct{})}
	ctx, stop := context.WithCancelCause(context.Background())
	defer stop(nil)
	s := newSpend(func() float64 { return 10 }, 100, stop)
	s.add("x", a)
	s.add("y", b)
	s.scrapeGroup(ctx, "")
	require.Equal(t, costs{RU: 40, Requests: 6, Throttled: 2}, s.services(""))
	require.Equal(t, costs{RU: 20, Requests: 3, Throttled: 1}, s.services("x"))
	require.NoError(t, ctx.Err())

	close(b.exited) // gone: its last figures stand
	setRU(50)
	s.scrapeGroup(ctx, "")
	require.Equal(t, 70.0, s.services("").RU)
	require.NoError(t, ctx.Err(), "70 + 10 RU is within the cap")

	setRU(75)
	s.scrape(ctx, a)
	require.Error(t, ctx.Err(), "75 + 20 + 10 RU is past the cap")
	require.ErrorIs(t, context.Cause(ctx), account.ErrOverCap)
	err := overCap(ctx, fmt.Errorf("event-driven: %w", context.Canceled))
	require.ErrorIs(t, err, account.ErrOverCap)
	require.Contains(t, err.Error(), "the services have spent 95 RU and the fleet's own clients 10 RU")
	require.Contains(t, err.Error(), "context canceled")
	require.ErrorIs(t, overCap(ctx, nil), account.ErrOverCap, "passed at the very end: still over")
	other := errors.New("other")
	require.Equal(t, other, overCap(context.Background(), other))
	require.NoError(t, overCap(context.Background(), nil))
}

// TestFleetOnAccountWithEntraID: with local authentication disabled, the
// fleet manages its database through the emulator's Resource Manager
// surface and its services reach the data plane with tokens from the
// managed-identity endpoint, all through DefaultAzureCredential. Not
// parallel: the fleet's own credential reads IDENTITY_ENDPOINT from the
// process environment.
func TestFleetOnAccountWithEntraID(t *testing.T) {
	bins := testBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ps := newProcSet(ctx)
	defer ps.stop()
	cert := filepath.Join(t.TempDir(), "cosmosemu.pem")
	emu, err := startEmulator(ctx, ps, filepath.Join(bins, "cosmosemu"), cert, emuproc.EntraFlags, defaultEnv(os.Environ()), io.Discard)
	require.NoError(t, err)
	endpoint := emu.address()
	entra := emuproc.Emulator{Endpoint: endpoint, Cert: cert}.EntraEnv()
	for _, kv := range entra {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "IDENTITY_") {
			t.Setenv(k, v)
		}
	}
	env := append(defaultEnv(os.Environ()), entra...)

	var out, log bytes.Buffer
	err = realMain(ctx, []string{"-n", "12", "-inflight", "4", "-modes", "event-driven", "-grace", "10s", "-timeout", "2m", "-bin-dir", bins},
		env, &out, &log)
	t.Log(out.String())
	require.NoError(t, err, "%s\n%s", out.String(), log.String())
	text := out.String()
	require.Contains(t, text, "account "+endpoint+" (Entra ID)")
	require.Contains(t, text, "completed     12 of 12")
	require.Contains(t, text, "checks        every orchestration completed once")
	require.Regexp(t, `deleted the run's database "durafeed-fleet-[^"]+"`, text)

	require.Empty(t, emuproc.Databases(t, emuproc.Emulator{Endpoint: endpoint, Cert: cert}.Client(t, true)), "the run's database is deleted")
}
