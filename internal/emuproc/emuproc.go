// Package emuproc runs cmd/cosmosemu as a process of its own for tests that
// reach it as a user reaches an account: over COSMOS_ENDPOINT, with the key
// or with Microsoft Entra ID through DefaultAzureCredential's
// managed-identity path, the emulator's certificate trusted through
// SSL_CERT_FILE. It also builds the commands under test.
package emuproc

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu"
)

// The Entra ID principal of EntraFlags: its tenant, object id and the
// identity endpoint's header secret.
const (
	Tenant    = "11111111-2222-4333-8444-555555555555"
	Principal = "99999999-8888-4777-8666-555555555555"
	Header    = "identity-header-secret"
)

// EntraFlags are cmd/cosmosemu's flags for an account with local
// authentication disabled, Principal a data contributor and a manager
// through Resource Manager, and the managed-identity endpoint issuing its
// tokens.
var EntraFlags = []string{"-disable-local-auth", "-entra-tenant", Tenant, "-data-contributor", Principal,
	"-manager", Principal, "-identity-header", Header, "-identity-oid", Principal}

var (
	buildMu sync.Mutex
	built   = map[string]string{}
)

// Binary builds the command in the package directory pkgDir (relative to
// the test's directory, e.g. "../cosmosemu") once per test binary and
// returns its path, in a temporary directory Cleanup removes.
func Binary(t *testing.T, pkgDir string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	abs, err := filepath.Abs(pkgDir)
	require.NoError(t, err)
	if bin, ok := built[abs]; ok {
		return bin
	}
	dir, err := os.MkdirTemp("", "durafeed-emuproc-")
	require.NoError(t, err)
	bin := filepath.Join(dir, filepath.Base(abs))
	out, err := exec.Command("go", "build", "-o", bin, abs).CombinedOutput()
	require.NoError(t, err, "go build %s: %s", pkgDir, out)
	built[abs] = bin
	return bin
}

// Cleanup removes what Binary built; call it from TestMain after the
// tests ran.
func Cleanup() {
	buildMu.Lock()
	defer buildMu.Unlock()
	for _, bin := range built {
		_ = os.RemoveAll(filepath.Dir(bin))
	}
	built = map[string]string{}
}

// Emulator is a running cmd/cosmosemu process.
type Emulator struct {
	// Endpoint is its endpoint (with a trailing slash); Cert the PEM file
	// of its certificate.
	Endpoint, Cert string
}

// Start builds and starts cmd/cosmosemu (cosmosemuDir is the path of
// cmd/cosmosemu relative to the test's directory) with extra flags, and
// stops it (SIGINT) when the test ends.
func Start(t *testing.T, cosmosemuDir string, extra ...string) Emulator {
	t.Helper()
	bin := Binary(t, cosmosemuDir)
	cert := filepath.Join(t.TempDir(), "cert.pem")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, append([]string{"-addr", "127.0.0.1:0", "-cert-out", cert}, extra...)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if ep, ok := strings.CutPrefix(lines.Text(), "cosmosemu listening on "); ok {
			go func() { // drain the rest until the process ends
				for lines.Scan() {
				}
			}()
			return Emulator{Endpoint: ep, Cert: cert}
		}
	}
	t.Fatalf("cosmosemu exited before listening: %v", lines.Err())
	return Emulator{}
}

// KeyEnv is the environment of a process reaching the emulator with its
// key.
func (e Emulator) KeyEnv() []string {
	return []string{"COSMOS_ENDPOINT=" + e.Endpoint, "COSMOS_KEY=" + cosmosemu.WellKnownKey, "SSL_CERT_FILE=" + e.Cert}
}

// EntraEnv is the environment of a process reaching an emulator started
// with EntraFlags through Entra ID: the account's Resource Manager id and
// endpoint, and the managed-identity endpoint DefaultAzureCredential
// uses.
func (e Emulator) EntraEnv() []string {
	base := strings.TrimSuffix(e.Endpoint, "/")
	return []string{"COSMOS_ENDPOINT=" + e.Endpoint, "SSL_CERT_FILE=" + e.Cert,
		"COSMOS_ACCOUNT_ID=/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/tests/providers/Microsoft.DocumentDB/databaseAccounts/" + cosmosemu.DefaultAccountName,
		"COSMOS_ARM_ENDPOINT=" + base + cosmosemu.ARMPathPrefix,
		"IDENTITY_ENDPOINT=" + base + cosmosemu.IdentityPath, "IDENTITY_HEADER=" + Header}
}

// Client returns a client of the test's own, trusting the emulator's
// certificate: with the key, or as Principal when entra is set.
func (e Emulator) Client(t *testing.T, entra bool) *azcosmos.Client {
	t.Helper()
	pem, err := os.ReadFile(e.Cert)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pem))
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	opts := &azcosmos.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}}}
	if entra {
		c, err := azcosmos.NewClient(e.Endpoint, cosmosemu.TokenCredential{TenantID: Tenant, ObjectID: Principal}, opts)
		require.NoError(t, err)
		return c
	}
	cred, err := azcosmos.NewKeyCredential(cosmosemu.WellKnownKey)
	require.NoError(t, err)
	c, err := azcosmos.NewClientWithKey(e.Endpoint, cred, opts)
	require.NoError(t, err)
	return c
}

// Databases lists the emulator's databases through client.
func Databases(t *testing.T, client *azcosmos.Client) []string {
	t.Helper()
	var ids []string
	pager := client.NewQueryDatabasesPager("SELECT * FROM c", nil)
	for pager.More() {
		page, err := pager.NextPage(t.Context())
		require.NoError(t, err)
		for _, d := range page.Databases {
			ids = append(ids, d.ID)
		}
	}
	return ids
}

// Run runs the binary bin with args and env (plus PATH and a fresh HOME)
// and returns its stdout, stderr and error.
func Run(t *testing.T, bin string, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s: %w", filepath.Base(bin), err)
	}
	return o.String(), e.String(), err
}
