package knobs_test

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type adminClient struct {
	tb   testing.TB
	base string
}

func (a adminClient) do(method, path, body string, want int, out any) {
	a.tb.Helper()
	req, err := http.NewRequest(method, a.base+path, strings.NewReader(body))
	require.NoError(a.tb, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(a.tb, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(a.tb, err)
	require.Equal(a.tb, want, resp.StatusCode, "%s %s: %s", method, path, b)
	if out != nil {
		require.NoError(a.tb, json.Unmarshal(b, out), string(b))
	}
}

// The admin handler round-trips every knob, mounted under a prefix.
func TestAdminHandlerRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	mux := http.NewServeMux()
	mux.Handle("/_knobs/", http.StripPrefix("/_knobs", e.k.AdminHandler()))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	a := adminClient{t, hs.URL + "/_knobs"}

	// Latency.
	var lat knobs.LatencyConfig
	a.do("POST", "/latency", `{"default":{"base":"2ms","jitter":"1ms","distribution":"normal"},"operations":{"Read":{"base":"5ms"}},"seed":3}`, 200, &lat)
	want := knobs.LatencyConfig{
		Default:      knobs.LatencySpec{Base: 2 * time.Millisecond, Jitter: time.Millisecond, Distribution: knobs.Normal},
		PerOperation: map[cosmosemu.OperationType]knobs.LatencySpec{cosmosemu.OpRead: {Base: 5 * time.Millisecond}},
		Seed:         3,
	}
	assert.Equal(t, want, lat)
	assert.Equal(t, want, e.k.Latency().Config())
	a.do("GET", "/latency", "", 200, &lat)
	assert.Equal(t, want, lat)
	a.do("POST", "/latency", `{"default":{"base":"-1ms"}}`, 400, nil)
	a.do("POST", "/latency", `{"default":{"bse":"1ms"}}`, 400, nil)
	a.do("POST", "/latency", `{}`, 200, &lat)

	// Faults: add, observe the fire count, remove.
	var st knobs.RuleStatus
	a.do("POST", "/faults", `{"kind":"gone","sub_status":1000,"operations":["Read"],"resource_types":["docs"],"count":1,"retry_after":"5ms"}`, 201, &st)
	require.NotEmpty(t, st.Rule.ID)
	assert.Equal(t, knobs.FaultGone, st.Rule.Kind)
	assert.Equal(t, 5*time.Millisecond, st.Rule.RetryAfter)
	assert.Equal(t, int64(1), st.Remaining)
	_, err := e.create(t, "a")
	require.NoError(t, err)
	_, err = e.read("a")
	assert.Equal(t, http.StatusGone, statusOf(err))
	a.do("GET", "/faults/"+st.Rule.ID, "", 200, &st)
	assert.Equal(t, int64(1), st.Fired)
	var list []knobs.RuleStatus
	a.do("GET", "/faults", "", 200, &list)
	require.Len(t, list, 1)
	a.do("POST", "/faults", `{"kind":"nope"}`, 400, nil)
	a.do("DELETE", "/faults/"+st.Rule.ID, "", 204, nil)
	a.do("DELETE", "/faults/"+st.Rule.ID, "", 404, nil)
	a.do("GET", "/faults/"+st.Rule.ID, "", 404, nil)
	a.do("POST", "/faults", `{"kind":"throttle"}`, 201, nil)
	a.do("DELETE", "/faults", "", 204, nil)
	assert.Empty(t, e.k.Faults().Rules())

	// Budget.
	var bs knobs.BudgetStatus
	a.do("POST", "/budget", `{"default_ru_per_second":400,"containers":{"db/c":50}}`, 200, &bs)
	assert.Equal(t, knobs.BudgetConfig{DefaultRUPerSecond: 400, Containers: map[string]float64{"db/c": 50}}, bs.Config)
	assert.Equal(t, bs.Config, e.k.Budget().Config())
	_, err = e.read("a")
	require.NoError(t, err)
	a.do("GET", "/budget", "", 200, &bs)
	assert.Contains(t, bs.Balances, "db/c")
	a.do("POST", "/budget", `{"containers":{"bad":1}}`, 400, nil)

	// Charges.
	var cs knobs.ChargesStatus
	a.do("GET", "/charges", "", 200, &cs)
	assert.False(t, cs.Simulated)
	a.do("POST", "/charges", `{"simulated":true,"model":{"write":7}}`, 200, &cs)
	require.True(t, cs.Simulated)
	assert.Equal(t, 7.0, cs.Model.Write)
	assert.Equal(t, 1.0, cs.Model.PointRead, "unspecified fields keep their defaults")
	cr, err := e.create(t, "b")
	require.NoError(t, err)
	assert.Equal(t, float32(7), cr.RequestCharge)
	a.do("POST", "/charges", `{"simulated":false}`, 200, &cs)
	assert.Nil(t, e.k.Charges().Model())

	// Counters.
	var snap knobs.Snapshot
	a.do("GET", "/counters", "", 200, &snap)
	assert.Equal(t, int64(4), snap.ByOperation[cosmosemu.OpCreate].Requests, "database, container and two items")
	assert.Equal(t, int64(1), snap.ByResource[cosmosemu.ResourceDocument].Faulted)
	a.do("POST", "/counters/reset", "", 204, nil)
	a.do("GET", "/counters", "", 200, &snap)
	assert.Zero(t, snap.Total.Requests)

	a.do("GET", "/nothing", "", 404, nil)
}

// Flags builds the knobs a command line describes.
func TestFlags(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("cosmosemu", flag.ContinueOnError)
	build := knobs.Flags(fs)
	require.NoError(t, fs.Parse([]string{
		"-latency", "2ms", "-latency-jitter", "1ms", "-latency-dist", "normal", "-latency-seed", "9",
		"-sim-charges", "-ru-budget", "400",
		"-fault", `{"kind":"throttle","operations":["Create"],"probability":0.1}`,
		"-fault", `{"id":"g","kind":"gone","count":2}`,
		"-fault-seed", "4",
	}))
	k, err := build()
	require.NoError(t, err)
	assert.Equal(t, knobs.LatencySpec{Base: 2 * time.Millisecond, Jitter: time.Millisecond, Distribution: knobs.Normal}, k.Latency().Config().Default)
	assert.Equal(t, uint64(9), k.Latency().Config().Seed)
	assert.Equal(t, knobs.DefaultChargeModel(), k.Charges().Model())
	assert.Equal(t, 400.0, k.Budget().Config().DefaultRUPerSecond)
	rules := k.Faults().Rules()
	require.Len(t, rules, 2)
	assert.Equal(t, knobs.FaultThrottle, rules[0].Rule.Kind)
	assert.Equal(t, "g", rules[1].Rule.ID)
	assert.Len(t, k.Middleware(), 5)

	// Defaults: nothing injected, the emulator's own charges.
	fs = flag.NewFlagSet("cosmosemu", flag.ContinueOnError)
	build = knobs.Flags(fs)
	require.NoError(t, fs.Parse(nil))
	k, err = build()
	require.NoError(t, err)
	assert.Nil(t, k.Charges().Model())
	assert.Empty(t, k.Faults().Rules())

	fs = flag.NewFlagSet("cosmosemu", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	knobs.Flags(fs)
	assert.Error(t, fs.Parse([]string{"-fault", `{"kind":"boom"}`}))
	fs = flag.NewFlagSet("cosmosemu", flag.ContinueOnError)
	build = knobs.Flags(fs)
	require.NoError(t, fs.Parse([]string{"-latency-dist", "zipf"}))
	_, err = build()
	assert.Error(t, err)
}

// Mounted by the emulator under its reserved admin prefix.
func TestAdminHandlerMountedByEmulator(t *testing.T) {
	t.Parallel()
	k := knobs.MustNew(knobs.Config{})
	srv, err := cosmosemu.Start(context.Background(), cosmosemu.Options{PlainHTTP: true, Middleware: k.Middleware(), Admin: k.AdminHandler()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	a := adminClient{t, strings.TrimSuffix(srv.Endpoint(), "/") + strings.TrimSuffix(cosmosemu.AdminPathPrefix, "/")}

	var st knobs.RuleStatus
	a.do("POST", "/faults", `{"kind":"unavailable","resource_types":[""],"count":1}`, 201, &st)
	client, err := srv.NewClient()
	require.NoError(t, err)
	_, err = client.CreateDatabase(context.Background(), azcosmos.DatabaseProperties{ID: "db"}, nil)
	require.NoError(t, err, "the SDK's account read absorbed the 503")
	a.do("GET", "/faults/"+st.Rule.ID, "", 200, &st)
	assert.Equal(t, int64(1), st.Fired)
	var snap knobs.Snapshot
	a.do("GET", "/counters", "", 200, &snap)
	assert.Equal(t, int64(1), snap.ByOperation[cosmosemu.OpCreate].Requests)
	assert.Equal(t, int64(1), snap.ByResource[cosmosemu.ResourceAccount].Faulted)
}
