package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
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
	require.Equal(t, config{Listen: ":8080", Database: "durafeed", Container: "durafeed", Mode: provider.ModeEventDriven,
		LogLevel: zapcore.InfoLevel, Grace: defaultGrace, Orchestration: 2, Workers: 2}, c)

	c, err = configFromEnv(env(map[string]string{
		"DURAFEED_LISTEN": "127.0.0.1:9000", "COSMOS_ENDPOINT": "https://acct.documents.azure.com:443/", "COSMOS_DATABASE": "db",
		"COSMOS_CONTAINER": "c", "AZURE_CLIENT_ID": "id", "DURAFEED_MODE": "polling", "DURAFEED_LOG_LEVEL": "debug",
		"DURAFEED_GRACE": "10s", "DURAFEED_REPLICA_ID": "r1", "DURAFEED_ORCHESTRATION_CONCURRENCY": "4", "DURAFEED_WORKER_CONCURRENCY": "8",
	}))
	require.NoError(t, err)
	require.Equal(t, config{Listen: "127.0.0.1:9000", Endpoint: "https://acct.documents.azure.com:443/", Database: "db", Container: "c",
		ClientID: "id", Mode: provider.ModePolling, LogLevel: zapcore.DebugLevel, Grace: 10 * time.Second, ReplicaID: "r1",
		Orchestration: 4, Workers: 8}, c)

	for _, tc := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{"DURAFEED_MODE": "fast"}, "DURAFEED_MODE"},
		{map[string]string{"DURAFEED_LOG_LEVEL": "loud"}, "DURAFEED_LOG_LEVEL"},
		{map[string]string{"DURAFEED_GRACE": "-1s"}, "DURAFEED_GRACE"},
		{map[string]string{"DURAFEED_GRACE": "soon"}, "DURAFEED_GRACE"},
		{map[string]string{"DURAFEED_WORKER_CONCURRENCY": "0"}, "DURAFEED_WORKER_CONCURRENCY"},
		{map[string]string{"DURAFEED_ORCHESTRATION_CONCURRENCY": "x"}, "DURAFEED_ORCHESTRATION_CONCURRENCY"},
		{map[string]string{"DURAFEED_PEER_ADVERTISE": "h:1"}, "DURAFEED_PEER_ADVERTISE"},
		{map[string]string{"DURAFEED_PEER_LISTEN": ":7070", "DURAFEED_MODE": "polling"}, "DURAFEED_PEER_LISTEN"},
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

// TestServiceServesAndStops runs the service on an embedded cosmosemu:
// it becomes ready, runs an orchestration started over HTTP, and on the
// end of its context (what SIGTERM does) stops cleanly, releasing its
// leases. Nothing it logs holds the emulator's key or a payload.
func TestServiceServesAndStops(t *testing.T) {
	t.Parallel()
	cfg, err := configFromEnv(env(map[string]string{"DURAFEED_LISTEN": "127.0.0.1:0", "DURAFEED_LOG_LEVEL": "debug"}))
	require.NoError(t, err)
	logs := &syncBuffer{}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(logs), zapcore.DebugLevel))
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, log, &hooks{listening: func(a string) { addr <- a }}) }()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-done:
		t.Fatalf("the service stopped: %v", err)
	case <-time.After(hang):
		t.Fatal("the service never listened")
	}
	require.Eventually(t, func() bool { s, _ := getJSON(t, base+"/readyz"); return s == http.StatusOK }, hang, 10*time.Millisecond)

	resp, err := http.Post(base+"/v1/instances", "application/json",
		strings.NewReader(`{"name":"FanOut","input":{"count":10},"instanceId":"svc-1"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	status, body := getJSON(t, base+"/v1/instances/svc-1?wait=50s")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "Completed", body["state"])
	require.Equal(t, 385.0, body["output"], "the sum of the squares of 1..10")

	stop()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(hang):
		t.Fatal("the service did not stop")
	}
	out := logs.String()
	require.Contains(t, out, `"msg":"stopped"`)
	require.Contains(t, out, `"msg":"released"`, "the leases were handed over")
	require.NotContains(t, out, cosmosemu.WellKnownKey)
	require.NotContains(t, out, `"count":10`, "no payload in the logs")
}

// TestSIGTERMExitsZero: the service as a process stops on SIGTERM within
// its grace period and exits 0; a bad configuration exits 2.
func TestSIGTERMExitsZero(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DURAFEED_SERVICE_CHILD=1", "DURAFEED_LISTEN=127.0.0.1:0", "DURAFEED_GRACE=20s")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var seen []string
	waitFor := func(msg string) {
		t.Helper()
		deadline := time.After(hang)
		for {
			select {
			case l, ok := <-lines:
				require.True(t, ok, "the service ended before %q: %s", msg, strings.Join(seen, "\n"))
				seen = append(seen, l)
				if strings.Contains(l, `"msg":"`+msg+`"`) {
					return
				}
			case <-deadline:
				_ = cmd.Process.Kill()
				t.Fatalf("no %q line: %s", msg, strings.Join(seen, "\n"))
			}
		}
	}
	waitFor("ready")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	waitFor("stopped")
	for range lines {
	}
	require.NoError(t, cmd.Wait(), "exit status 0")

	bad := exec.Command(os.Args[0], "-test.run=^$")
	bad.Env = append(os.Environ(), "DURAFEED_SERVICE_CHILD=1", "DURAFEED_MODE=fast")
	var errOut bytes.Buffer
	bad.Stderr = &errOut
	err = bad.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 2, exit.ExitCode())
	require.Contains(t, errOut.String(), "DURAFEED_MODE")
}
