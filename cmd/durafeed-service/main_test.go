package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/provider"
)

// hang bounds waits that only catch hangs.
const hang = 60 * time.Second

// TestMain runs the service itself when the test binary is started as
// the service's child process (TestSIGTERMExitsZero).
func TestMain(m *testing.M) {
	if os.Getenv("DURAFEED_SERVICE_CHILD") == "1" {
		os.Exit(realMain(os.Getenv, os.Stderr))
	}
	os.Exit(m.Run())
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	c, err := configFromEnv(env(nil))
	require.NoError(t, err)
	require.Equal(t, config{Listen: "127.0.0.1:8080", Database: "durafeed", Container: "durafeed", Mode: provider.ModeEventDriven,
		LogLevel: zapcore.InfoLevel, Grace: defaultGrace, Drain: defaultDrain, Orchestration: 2, Workers: 2}, c)

	c, err = configFromEnv(env(map[string]string{
		"DURAFEED_LISTEN": "127.0.0.1:9000", "COSMOS_ENDPOINT": "https://acct.documents.azure.com:443/", "COSMOS_DATABASE": "db",
		"COSMOS_CONTAINER": "c", "AZURE_CLIENT_ID": "id", "DURAFEED_MODE": "polling", "DURAFEED_LOG_LEVEL": "debug",
		"DURAFEED_GRACE": "10s", "DURAFEED_DRAIN": "2s", "DURAFEED_REPLICA_ID": "r1", "DURAFEED_ORCHESTRATION_CONCURRENCY": "4", "DURAFEED_WORKER_CONCURRENCY": "8",
	}))
	require.NoError(t, err)
	short, err := configFromEnv(env(map[string]string{"DURAFEED_GRACE": "3s"}))
	require.NoError(t, err)
	require.Equal(t, 600*time.Millisecond, short.Drain, "a fifth of a short grace period")
	require.Equal(t, config{Listen: "127.0.0.1:9000", Endpoint: "https://acct.documents.azure.com:443/", Database: "db", Container: "c",
		ClientID: "id", Mode: provider.ModePolling, LogLevel: zapcore.DebugLevel, Grace: 10 * time.Second, Drain: 2 * time.Second, ReplicaID: "r1",
		Orchestration: 4, Workers: 8}, c)

	for _, tc := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{"DURAFEED_MODE": "fast"}, "DURAFEED_MODE"},
		{map[string]string{"DURAFEED_LOG_LEVEL": "loud"}, "DURAFEED_LOG_LEVEL"},
		{map[string]string{"DURAFEED_GRACE": "-1s"}, "DURAFEED_GRACE"},
		{map[string]string{"DURAFEED_GRACE": "soon"}, "DURAFEED_GRACE"},
		{map[string]string{"DURAFEED_DRAIN": "-1s"}, "DURAFEED_DRAIN"},
		{map[string]string{"DURAFEED_DRAIN": "25s"}, "shorter than DURAFEED_GRACE"},
		{map[string]string{"DURAFEED_GRACE": "3s", "DURAFEED_DRAIN": "3s"}, "shorter than DURAFEED_GRACE"},
		{map[string]string{"DURAFEED_WORKER_CONCURRENCY": "0"}, "DURAFEED_WORKER_CONCURRENCY"},
		{map[string]string{"DURAFEED_ORCHESTRATION_CONCURRENCY": "x"}, "DURAFEED_ORCHESTRATION_CONCURRENCY"},
		{map[string]string{"DURAFEED_PEER_ADVERTISE": "h:1"}, "DURAFEED_PEER_ADVERTISE"},
		{map[string]string{"DURAFEED_PEER_LISTEN": ":7070", "DURAFEED_MODE": "polling"}, "DURAFEED_PEER_LISTEN"},
		{map[string]string{"DURAFEED_PEER_LISTEN": ":7070"}, "wildcard"},
		{map[string]string{"DURAFEED_PEER_LISTEN": ":7070", "DURAFEED_PEER_ADVERTISE": "127.0.0.1:7070"}, "loopback"},
		{map[string]string{"COSMOS_KEY": "secret"}, "COSMOS_KEY"},
	} {
		_, err := configFromEnv(env(tc.vars))
		require.ErrorContains(t, err, tc.want, "%v", tc.vars)
		require.NotContains(t, err.Error(), "secret", "no key in an error")
	}
}

// TestStartLogNamesNoKey: the start-up line says how the service
// authenticates, never with what.
func TestStartLogNamesNoKey(t *testing.T) {
	t.Parallel()
	c, err := configFromEnv(env(map[string]string{"COSMOS_ENDPOINT": "https://acct.documents.azure.com:443/", "COSMOS_KEY": "s3cr3t-key"}))
	require.NoError(t, err)
	var buf bytes.Buffer
	newLogger(&buf, zapcore.InfoLevel).Info("starting", c.fields()...)
	require.Contains(t, buf.String(), `"auth":"account key"`)
	require.NotContains(t, buf.String(), "s3cr3t-key")
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func getJSON(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// startService runs the service in this process with the variables
// vars (listening on a free port) and waits until it is ready. It
// returns its base URL and a stop function (what SIGTERM does) that
// returns run's result.
func startService(t *testing.T, vars map[string]string, log *zap.Logger) (string, func() error) {
	t.Helper()
	return startServiceWith(t, vars, log, &hooks{})
}

// startServiceWith is startService with hooks h (its listening hook is
// the function's own).
func startServiceWith(t *testing.T, vars map[string]string, log *zap.Logger, h *hooks) (string, func() error) {
	t.Helper()
	base, stop := launchService(t, vars, log, h)
	require.Eventually(t, func() bool { s, _ := getJSON(t, base+"/readyz"); return s == http.StatusOK }, hang, 10*time.Millisecond)
	return base, stop
}

// launchService is startServiceWith without the wait for readiness: it
// returns once the service listens.
func launchService(t *testing.T, vars map[string]string, log *zap.Logger, h *hooks) (string, func() error) {
	t.Helper()
	vars["DURAFEED_LISTEN"] = "127.0.0.1:0"
	cfg, err := configFromEnv(env(vars))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	h.listening = func(a string) { addr <- a }
	go func() { done <- run(ctx, cfg, env(vars), log, h) }()
	stop := func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(hang):
			t.Fatal("the service did not stop")
			return nil
		}
	}
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-done:
		t.Fatalf("the service stopped: %v", err)
	case <-time.After(hang):
		t.Fatal("the service never listened")
	}
	t.Cleanup(func() { cancel() })
	return base, stop
}

// TestServiceServesAndStops runs the service on an embedded cosmosemu:
// it becomes ready, runs an orchestration started over HTTP, and on the
// end of its context (what SIGTERM does) stops cleanly, releasing its
// leases. Nothing it logs holds the emulator's key or a payload.
func TestServiceServesAndStops(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(logs), zapcore.DebugLevel))
	base, stop := startService(t, map[string]string{"DURAFEED_LOG_LEVEL": "debug"}, log)

	resp, err := http.Post(base+"/v1/instances", "application/json",
		strings.NewReader(`{"name":"FanOut","input":{"count":10},"instanceId":"svc-1"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	status, body := getJSON(t, base+"/v1/instances/svc-1?wait=50s")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "Completed", body["state"])
	require.Equal(t, 385.0, body["output"], "the sum of the squares of 1..10")

	// Metrics in the Prometheus format: the runtime's turns and activities.
	resp, err = http.Get(base + "/metrics")
	require.NoError(t, err)
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(metrics), "durafeed_orchestration_turns")
	require.Contains(t, string(metrics), `durafeed_activity_executions`)
	require.Contains(t, string(metrics), `durafeed_activity_name="Square"`)
	require.Contains(t, string(metrics), `durafeed_cosmos_requests`, "the provider's metrics")
	require.Contains(t, string(metrics), `db_operation_name="batch"`)
	require.Contains(t, string(metrics), `durafeed_engine_wake_latency`)

	require.NoError(t, stop())
	out := logs.String()
	require.Contains(t, out, `"msg":"stopped"`)
	require.Contains(t, out, `"msg":"released"`, "the leases were handed over")
	require.NotContains(t, out, cosmosemu.WellKnownKey)
	require.NotContains(t, out, `"count":10`, "no payload in the logs")
}

// child is the service as a process (the test binary run with
// DURAFEED_SERVICE_CHILD=1), its JSON log lines read from stderr as they
// come.
type child struct {
	cmd   *exec.Cmd
	lines chan string
	seen  []string
	addr  string // from the "listening" line, once seen
}

// startChild starts the service process with env added to the test's
// own environment; the test's cleanup kills it if it still runs.
func startChild(t *testing.T, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "DURAFEED_SERVICE_CHILD=1"), env...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	c := &child{cmd: cmd, lines: make(chan string, 1000)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	return c
}

// waitFor reads log lines until one whose message is msg. It fails the
// test when the process ends first, or when none comes within hang.
func (c *child) waitFor(t *testing.T, msg string) {
	t.Helper()
	deadline := time.After(hang)
	for {
		select {
		case l, ok := <-c.lines:
			require.True(t, ok, "the service ended before %q: %s", msg, strings.Join(c.seen, "\n"))
			c.seen = append(c.seen, l)
			if strings.Contains(l, `"msg":"listening"`) {
				var v struct{ Addr string }
				_ = json.Unmarshal([]byte(l), &v)
				c.addr = v.Addr
			}
			if strings.Contains(l, `"msg":"`+msg+`"`) {
				return
			}
		case <-deadline:
			_ = c.cmd.Process.Kill()
			t.Fatalf("no %q line: %s", msg, strings.Join(c.seen, "\n"))
		}
	}
}

// wait reads the rest of the log and waits for the process to end.
func (c *child) wait() error {
	for l := range c.lines {
		c.seen = append(c.seen, l)
	}
	return c.cmd.Wait()
}

// TestStopAnswersEveryone: a stopping service keeps its listener open
// while it drains, answering /readyz with 503 and every other request; a
// status request waiting for an instance gets the instance's current
// status at once instead of a cut connection; then it stops cleanly.
func TestStopAnswersEveryone(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	base, stop := startServiceWith(t, map[string]string{"DURAFEED_DRAIN": "0s"}, zap.NewNop(), &hooks{holdDrain: hold})
	resp, err := http.Post(base+"/v1/instances", "application/json",
		strings.NewReader(`{"name":"Approval","input":{"item":"x"},"instanceId":"drain-1"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Eventually(t, func() bool { s, _ := getJSON(t, base+"/v1/instances/drain-1"); return s == http.StatusOK }, hang, 10*time.Millisecond)

	type answer struct {
		status int
		body   map[string]any
	}
	waited := make(chan answer, 1)
	go func() {
		s, b := getJSON(t, base+"/v1/instances/drain-1?wait=60s")
		waited <- answer{s, b}
	}()
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()

	a := <-waited
	require.Equal(t, http.StatusOK, a.status, "the waiting request is answered")
	require.Equal(t, "Running", a.body["state"], "with the instance as it is")
	require.Eventually(t, func() bool { s, _ := getJSON(t, base+"/readyz"); return s == http.StatusServiceUnavailable }, hang, 10*time.Millisecond,
		"readiness answers 503 while the listener is open")
	s, b := getJSON(t, base+"/v1/instances/drain-1?wait=30s")
	require.Equal(t, http.StatusOK, s, "requests are still answered while draining, without waiting")
	require.Equal(t, "Running", b["state"])
	close(hold)
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(hang):
		t.Fatal("the service did not stop")
	}
	_, err = http.Get(base + "/readyz")
	require.Error(t, err, "the listener is closed once the drain is over")
}

// TestSIGTERMExitsZero: the service as a process stops on SIGTERM within
// its grace period and exits 0; a bad configuration exits 2.
func TestSIGTERMExitsZero(t *testing.T) {
	t.Parallel()
	c := startChild(t, "DURAFEED_LISTEN=127.0.0.1:0", "DURAFEED_GRACE=20s")
	c.waitFor(t, "ready")
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	c.waitFor(t, "stopped")
	require.NoError(t, c.wait(), "exit status 0")

	bad := exec.Command(os.Args[0], "-test.run=^$")
	bad.Env = append(os.Environ(), "DURAFEED_SERVICE_CHILD=1", "DURAFEED_MODE=fast")
	var errOut bytes.Buffer
	bad.Stderr = &errOut
	err := bad.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 2, exit.ExitCode())
	require.Contains(t, errOut.String(), "DURAFEED_MODE")
}

// TestOTLPExport: with OTEL_EXPORTER_OTLP_ENDPOINT set, the service sends
// its traces and metrics over OTLP/HTTP (here to a stand-in collector
// that counts the posts by path); they are flushed at the stop.
func TestOTLPExport(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	posts := map[string]int{}
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		posts[r.Method+" "+r.URL.Path]++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	base, stop := startService(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL}, zap.NewNop())
	resp, err := http.Post(base+"/v1/instances", "application/json", strings.NewReader(`{"name":"Greet","instanceId":"otlp-1"}`))
	require.NoError(t, err)
	resp.Body.Close()
	status, body := getJSON(t, base+"/v1/instances/otlp-1?wait=50s")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "Completed", body["state"])
	require.NoError(t, stop())
	mu.Lock()
	defer mu.Unlock()
	require.Positive(t, posts["POST /v1/traces"], "%v", posts)
	require.Positive(t, posts["POST /v1/metrics"], "%v", posts)
}

func TestOTLPURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		vars   map[string]string
		traces string
	}{
		{nil, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}, "http://c:4318/v1/traces"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/x"}, "http://t:1/x"},
	} {
		require.Equal(t, tc.traces, otlpURL(env(tc.vars), "TRACES", "/v1/traces"), "%v", tc.vars)
	}
}
