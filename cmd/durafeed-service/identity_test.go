package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu"
)

// TestServiceWithManagedIdentity runs the service as infra/bicep deploys
// it, on the emulator: the database and container made beforehand from
// the Bicep's container definition, keys disabled as the Bicep's account
// disables them, the identity's principal holding the Bicep's role on the
// Bicep's scope, and the process given the environment the Bicep's
// container app sets (bar the listen address, a free port here). Its
// tokens come as a user-assigned managed identity's do: AZURE_CLIENT_ID
// names it and DefaultAzureCredential asks the platform's identity
// endpoint (IDENTITY_ENDPOINT and IDENTITY_HEADER, as Container Apps sets
// them; here a stand-in that mints the emulator's tokens for the
// identity's principal). The service serves an orchestration and stops
// cleanly.
func TestServiceWithManagedIdentity(t *testing.T) {
	t.Parallel()
	c, tokens := startDeployed(t, identityObjectID)
	c.waitFor(t, "ready")
	require.Contains(t, strings.Join(c.seen, "\n"), `"auth":"Entra ID, user-assigned managed identity"`)
	base := "http://" + c.addr
	resp, err := http.Post(base+"/v1/instances", "application/json", strings.NewReader(`{"name":"Greet","input":{"name":"MI"},"instanceId":"mi-1"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	status, body := getJSON(t, base+"/v1/instances/mi-1?wait=50s")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "Hello, MI!", body["output"])
	require.Positive(t, tokens.Load(), "the tokens came from the identity endpoint")
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	c.waitFor(t, "stopped")
	require.NoError(t, c.wait())
	for _, l := range c.seen {
		require.NotContains(t, l, "eyJ", "no token in the logs")
	}
}

const (
	identityTenant   = "11111111-1111-1111-1111-111111111111"
	identityClientID = "aaaaaaaa-0000-0000-0000-000000000001"
	identityObjectID = "bbbbbbbb-0000-0000-0000-000000000002"
	identitySecret   = "identity-header-secret"
)

// startDeployed applies infra/bicep to a new emulator, with the role the
// Bicep assigns held by roleHolder, and starts the service process as the
// Bicep's container app runs it, under a user-assigned identity whose
// principal is identityObjectID. tokens counts the tokens the identity
// endpoint handed out.
func startDeployed(t *testing.T, roleHolder string) (c *child, tokens *atomic.Int64) {
	t.Helper()
	emu, err := cosmosemu.Start(context.Background(), cosmosemu.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	d := deployOnEmulator(t, emu, identityTenant, roleHolder)
	cert := filepath.Join(t.TempDir(), "cosmosemu.pem")
	require.NoError(t, os.WriteFile(cert, emu.CertificatePEM(), 0o644))

	tokens = new(atomic.Int64)
	identity := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.Header.Get("X-IDENTITY-HEADER") != identitySecret || q.Get("client_id") != identityClientID {
			http.Error(w, `{"error":"unknown identity"}`, http.StatusBadRequest)
			return
		}
		tok, err := cosmosemu.TokenCredential{TenantID: identityTenant, ObjectID: identityObjectID}.GetToken(r.Context(),
			policy.TokenRequestOptions{Scopes: []string{q.Get("resource") + "/.default"}})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		tokens.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"access_token": tok.Token, "token_type": "Bearer",
			"expires_on": strconv.FormatInt(tok.ExpiresOn.Unix(), 10), "resource": q.Get("resource"), "client_id": identityClientID})
	}))
	t.Cleanup(identity.Close)

	var env []string
	for _, kv := range d.appEnv(t, map[string]string{"identityClientId": identityClientID, "cosmosEndpoint": emu.Endpoint()}) {
		if !strings.HasPrefix(kv, "DURAFEED_LISTEN=") {
			env = append(env, kv)
		}
	}
	return startChild(t, append(env, "DURAFEED_LISTEN=127.0.0.1:0", "IDENTITY_ENDPOINT="+identity.URL,
		"IDENTITY_HEADER="+identitySecret, "SSL_CERT_FILE="+cert)...), tokens
}

// TestServiceWithoutItsRoleExits: deployed with the role assignment on
// another principal (as before an assignment applies), the service fails
// at start with the store's message naming the container and the missing
// action, and exits with status 1 for the platform to restart it.
func TestServiceWithoutItsRoleExits(t *testing.T) {
	t.Parallel()
	c, _ := startDeployed(t, "cccccccc-0000-0000-0000-000000000003")
	c.waitFor(t, "durafeed-service failed")
	err := c.wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 1, exit.ExitCode())
	log := strings.Join(c.seen, "\n")
	require.Contains(t, log, `the identity may not read container \"durafeed\" in database \"durafeed\"`)
	require.Contains(t, log, "Microsoft.DocumentDB/databaseAccounts/readMetadata")
	require.NotContains(t, log, "eyJ", "no token in the logs")
}
