package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	azruntime "github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/cosmosemu"
)

// modeEnv makes the test binary act as the command (server) or as a
// client process (client) instead of running tests.
const modeEnv = "COSMOSEMU_TEST_MODE"

func TestMain(m *testing.M) {
	switch os.Getenv(modeEnv) {
	case "server":
		main()
		os.Exit(0)
	case "client":
		if err := runClient(); err != nil {
			fmt.Fprintln(os.Stderr, "client:", err)
			os.Exit(1)
		}
		fmt.Println("client ok")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const (
	tenant  = "11111111-1111-1111-1111-111111111111"
	oid     = "22222222-2222-2222-2222-222222222222"
	another = "33333333-3333-3333-3333-333333333333"
)

func TestFlagsBadCombinations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"identity header alone", []string{"-identity-header", "s"}, "-identity-header and -identity-oid go together"},
		{"identity oid alone", []string{"-identity-oid", oid}, "-identity-header and -identity-oid go together"},
		{"certificate of plain HTTP", []string{"-http", "-cert-out", "x.pem"}, "-cert-out needs HTTPS"},
		{"account name", []string{"-account-name", "Bad_Name"}, "-account-name"},
		{"short account name", []string{"-account-name", "ab"}, "-account-name"},
		{"consistency", []string{"-consistency", "Linearizable"}, "-consistency"},
		{"empty region", []string{"-region", " "}, "-region"},
		{"empty principal", []string{"-manager", ""}, "object id"},
		{"arguments", []string{"extra"}, "unexpected arguments"},
	} {
		var stderr bytes.Buffer
		err := run(tc.args, io.Discard, &stderr)
		var usage usageError
		require.ErrorAs(t, err, &usage, tc.name)
		require.Contains(t, stderr.String(), tc.want, tc.name)
	}
}

func TestFlagsOptions(t *testing.T) {
	t.Parallel()
	parse := func(args ...string) cosmosemu.Options {
		fs, cfg := newFlags(io.Discard)
		require.NoError(t, fs.Parse(args))
		require.NoError(t, cfg.validate())
		opts, err := cfg.options(zap.NewNop())
		require.NoError(t, err)
		return opts
	}
	opts := parse()
	require.Nil(t, opts.Auth, "no auth flag, no enforcement")
	require.Nil(t, opts.Identity)
	require.Equal(t, "cosmosemu", opts.AccountName)
	require.Equal(t, cosmosemu.DefaultRegion, opts.Region)
	require.Equal(t, "Strong", opts.ConsistencyLevel)
	require.False(t, opts.Serverless)

	opts = parse("-account-name", "bench-acct", "-serverless", "-region", "West Europe", "-consistency", "session",
		"-entra-tenant", tenant, "-disable-local-auth", "-data-contributor", oid, "-data-contributor", another,
		"-manager", oid, "-identity-header", "s3cret", "-identity-oid", oid)
	require.Equal(t, "bench-acct", opts.AccountName)
	require.True(t, opts.Serverless)
	require.Equal(t, "West Europe", opts.Region)
	require.Equal(t, "Session", opts.ConsistencyLevel)
	require.Equal(t, &cosmosemu.AuthOptions{TenantID: tenant, DisableLocalAuth: true, ManagementPrincipals: []string{oid},
		RoleAssignments: []cosmosemu.RoleAssignment{
			{PrincipalID: oid, RoleDefinitionID: cosmosemu.DataContributorRole, Scope: "/"},
			{PrincipalID: another, RoleDefinitionID: cosmosemu.DataContributorRole, Scope: "/"},
		}}, opts.Auth)
	require.Equal(t, &cosmosemu.IdentityOptions{Header: "s3cret", ObjectID: oid}, opts.Identity)

	for _, flag := range [][]string{{"-entra-tenant", tenant}, {"-disable-local-auth"}, {"-data-contributor", oid}, {"-manager", oid}} {
		require.NotNil(t, parse(flag...).Auth, "%v creates Options.Auth", flag)
	}
	require.Nil(t, parse("-identity-header", "s", "-identity-oid", oid).Auth, "the identity endpoint alone enforces nothing")
}

// syncBuffer is a bytes.Buffer safe for a process's writes and the test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// emulator is cmd/cosmosemu running as a separate process.
type emulator struct {
	endpoint, arm, identity string
	cert                    string // its certificate's PEM file
}

// startEmulator runs the command (this test binary in server mode) with
// args on a free loopback port and waits until it has printed its
// endpoints; the process is interrupted when the test ends.
func startEmulator(t *testing.T, args ...string) emulator {
	t.Helper()
	e := emulator{cert: filepath.Join(t.TempDir(), "cosmosemu.pem")}
	cmd := exec.Command(os.Args[0], append([]string{"-addr", "127.0.0.1:0", "-cert-out", e.cert}, args...)...)
	cmd.Env = append(os.Environ(), modeEnv+"=server")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			require.NoError(t, err, "the emulator exits cleanly on SIGINT: %s", stderr.String())
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("the emulator did not exit on SIGINT: %s", stderr.String())
		}
	})
	want := 2
	for i, a := range args {
		if a == "-identity-header" && i+1 < len(args) {
			want = 3
		}
	}
	deadline := time.After(time.Minute)
	for got := 0; got < want; got++ {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "the emulator exited: %s", stderr.String())
			switch {
			case strings.HasPrefix(line, "cosmosemu listening on "):
				e.endpoint = strings.TrimPrefix(line, "cosmosemu listening on ")
			case strings.HasPrefix(line, "cosmosemu ARM endpoint "):
				e.arm = strings.TrimPrefix(line, "cosmosemu ARM endpoint ")
			case strings.HasPrefix(line, "cosmosemu identity endpoint "):
				e.identity = strings.TrimPrefix(line, "cosmosemu identity endpoint ")
			default:
				t.Fatalf("unexpected output %q", line)
			}
		case <-deadline:
			t.Fatalf("the emulator printed no endpoints: %s", stderr.String())
		}
	}
	go func() {
		for range lines { // nothing more is printed; keep the pipe drained regardless
		}
	}()
	return e
}

// TestProcessBadFlagsExit2: the command exits with status 2 and says why.
func TestProcessBadFlagsExit2(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-identity-header", "s")
	cmd.Env = append(os.Environ(), modeEnv+"=server")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 2, exit.ExitCode())
	require.Contains(t, string(out), "-identity-header and -identity-oid go together")
}

// TestProcessEndToEnd runs the path a benchmark tool on Azure Container
// Apps takes, with every piece a separate process: the emulator
// (serverless, Entra ID only, the tool's identity a manager and a data
// contributor, the identity endpoint on) and the tool, which has nothing
// but IDENTITY_ENDPOINT, IDENTITY_HEADER and SSL_CERT_FILE: its
// DefaultAzureCredential gets tokens from the emulator, it creates its
// database and container through ARM, uses the container through the data
// plane and deletes the database through ARM.
func TestProcessEndToEnd(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "darwin" || runtime.GOOS == "windows" {
		t.Skip("Go honours SSL_CERT_FILE on Linux and the other Unix systems only")
	}
	e := startEmulator(t, "-account-name", "bench", "-serverless", "-entra-tenant", tenant, "-disable-local-auth",
		"-data-contributor", oid, "-manager", oid, "-identity-header", "s3cret", "-identity-oid", oid)
	require.Equal(t, strings.TrimSuffix(e.endpoint, "/")+"/_arm", e.arm)
	require.Equal(t, strings.TrimSuffix(e.endpoint, "/")+"/_emulator/identity/token", e.identity)

	client := func(header string) (string, error) {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(cleanEnv(), modeEnv+"=client", "IDENTITY_ENDPOINT="+e.identity, "IDENTITY_HEADER="+header,
			"SSL_CERT_FILE="+e.cert, "CLIENT_ENDPOINT="+e.endpoint, "CLIENT_ARM="+e.arm, "CLIENT_ACCOUNT=bench")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := client("s3cret")
	require.NoError(t, err, out)
	require.Contains(t, out, "client ok")

	out, err = client("wrong")
	require.Error(t, err, "a wrong IDENTITY_HEADER gets no token")
	require.Contains(t, out, "401", out)
}

// cleanEnv is this process's environment without what would select
// another credential, identity or trust store.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "AZURE_") || strings.HasPrefix(k, "IDENTITY_") || strings.HasPrefix(k, "MSI_") ||
			k == "IMDS_ENDPOINT" || k == "SSL_CERT_FILE" || k == "SSL_CERT_DIR" || k == modeEnv {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// runClient is the tool process of TestProcessEndToEnd.
func runClient() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	endpoint, account := os.Getenv("CLIENT_ENDPOINT"), os.Getenv("CLIENT_ACCOUNT")
	cred, err := azidentity.NewDefaultAzureCredential(nil)
	if err != nil {
		return err
	}
	// A token first, so that a refused identity fails here, plainly.
	if _, err := cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{"https://management.azure.com/.default"}}); err != nil {
		return err
	}
	mgr, err := arm.NewClient("cosmosemu.client", "v1.0.0", cred, &arm.ClientOptions{
		ClientOptions: policy.ClientOptions{Cloud: cloud.Configuration{
			ActiveDirectoryAuthorityHost: cloud.AzurePublic.ActiveDirectoryAuthorityHost,
			Services: map[cloud.ServiceName]cloud.ServiceConfiguration{
				cloud.ResourceManager: {Endpoint: os.Getenv("CLIENT_ARM"), Audience: "https://management.azure.com"},
			}}},
		DisableRPRegistration: true,
	})
	if err != nil {
		return err
	}
	dbPath := "/subscriptions/00000000-0000-0000-0000-00000000aaaa/resourceGroups/bench/providers/Microsoft.DocumentDB/databaseAccounts/" + account + "/sqlDatabases/bench"
	resource := func(id string, opts map[string]any) map[string]any {
		r := map[string]any{"id": id}
		if id == "c" {
			r["partitionKey"] = map[string]any{"paths": []string{"/pk"}, "kind": "Hash", "version": 2}
		}
		return map[string]any{"properties": map[string]any{"resource": r, "options": opts}}
	}
	if status, err := armCall(ctx, mgr, http.MethodPut, dbPath, resource("bench", nil)); err != nil || status != http.StatusOK {
		return fmt.Errorf("create the database: %d %v", status, err)
	}
	status, err := armCall(ctx, mgr, http.MethodPut, dbPath+"/containers/c", resource("c", map[string]any{"throughput": 400}))
	if status != http.StatusBadRequest || err == nil || !strings.Contains(err.Error(), "not supported for serverless accounts") {
		return fmt.Errorf("a serverless account takes no throughput: %d %v", status, err)
	}
	if status, err := armCall(ctx, mgr, http.MethodPut, dbPath+"/containers/c", resource("c", nil)); err != nil || status != http.StatusOK {
		return fmt.Errorf("create the container: %d %v", status, err)
	}

	client, err := azcosmos.NewClient(endpoint, cred, nil) // default transport: trust through SSL_CERT_FILE
	if err != nil {
		return err
	}
	c, err := client.NewContainer("bench", "c")
	if err != nil {
		return err
	}
	pk := azcosmos.NewPartitionKeyString("p")
	if _, err := c.CreateItem(ctx, pk, []byte(`{"id":"a","pk":"p"}`), nil); err != nil {
		return fmt.Errorf("create an item: %w", err)
	}
	if _, err := c.ReadItem(ctx, pk, "a", nil); err != nil {
		return fmt.Errorf("read the item: %w", err)
	}
	key, err := azcosmos.NewKeyCredential(cosmosemu.WellKnownKey)
	if err != nil {
		return err
	}
	keyClient, err := azcosmos.NewClientWithKey(endpoint, key, nil)
	if err != nil {
		return err
	}
	kc, err := keyClient.NewContainer("bench", "c")
	if err != nil {
		return err
	}
	var re *azcore.ResponseError
	if _, err := kc.ReadItem(ctx, pk, "a", nil); !errors.As(err, &re) || re.StatusCode != http.StatusUnauthorized {
		return fmt.Errorf("the key is refused when local auth is disabled: %v", err)
	}

	if status, err := armCall(ctx, mgr, http.MethodDelete, dbPath, nil); err != nil || status != http.StatusAccepted {
		return fmt.Errorf("delete the database: %d %v", status, err)
	}
	if _, err := c.Read(ctx, nil); !errors.As(err, &re) || re.StatusCode != http.StatusNotFound {
		return fmt.Errorf("the container is gone: %v", err)
	}
	return nil
}

// armCall sends a PUT or DELETE as a generated ARM client does and polls
// it to completion; it returns the first answer's status.
func armCall(ctx context.Context, c *arm.Client, method, path string, body any) (int, error) {
	req, err := azruntime.NewRequest(ctx, method, azruntime.JoinPaths(c.Endpoint(), path))
	if err != nil {
		return 0, err
	}
	q := req.Raw().URL.Query()
	q.Set("api-version", cosmosemu.ARMAPIVersion)
	req.Raw().URL.RawQuery = q.Encode()
	if body != nil {
		if err := azruntime.MarshalAsJSON(req, body); err != nil {
			return 0, err
		}
	}
	resp, err := c.Pipeline().Do(req)
	if err != nil {
		return 0, err
	}
	ok := []int{http.StatusOK, http.StatusAccepted}
	if method == http.MethodDelete {
		ok = []int{http.StatusAccepted, http.StatusNoContent}
	}
	if !azruntime.HasStatusCode(resp, ok...) {
		return resp.StatusCode, azruntime.NewResponseError(resp)
	}
	p, err := azruntime.NewPoller[map[string]any](resp, c.Pipeline(), nil)
	if err != nil {
		return resp.StatusCode, err
	}
	_, err = p.PollUntilDone(ctx, &azruntime.PollUntilDoneOptions{Frequency: time.Second})
	return resp.StatusCode, err
}
