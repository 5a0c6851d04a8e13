package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
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
	const (
		tenant   = "11111111-1111-1111-1111-111111111111"
		clientID = "aaaaaaaa-0000-0000-0000-000000000001"
		objectID = "bbbbbbbb-0000-0000-0000-000000000002"
		secret   = "identity-header-secret"
	)
	emu, err := cosmosemu.Start(context.Background(), cosmosemu.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	d := deployOnEmulator(t, emu, tenant, objectID)
	cert := filepath.Join(t.TempDir(), "cosmosemu.pem")
	require.NoError(t, os.WriteFile(cert, emu.CertificatePEM(), 0o644))

	var tokens atomic.Int64
	identity := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.Header.Get("X-IDENTITY-HEADER") != secret || q.Get("client_id") != clientID {
			http.Error(w, `{"error":"unknown identity"}`, http.StatusBadRequest)
			return
		}
		tok, err := cosmosemu.TokenCredential{TenantID: tenant, ObjectID: objectID}.GetToken(r.Context(),
			policy.TokenRequestOptions{Scopes: []string{q.Get("resource") + "/.default"}})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		tokens.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"access_token": tok.Token, "token_type": "Bearer",
			"expires_on": strconv.FormatInt(tok.ExpiresOn.Unix(), 10), "resource": q.Get("resource"), "client_id": clientID})
	}))
	defer identity.Close()

	var env []string
	for _, kv := range d.appEnv(t, map[string]string{"identityClientId": clientID, "cosmosEndpoint": emu.Endpoint()}) {
		if !strings.HasPrefix(kv, "DURAFEED_LISTEN=") {
			env = append(env, kv)
		}
	}
	c := startChild(t, append(env, "DURAFEED_LISTEN=127.0.0.1:0", "IDENTITY_ENDPOINT="+identity.URL, "IDENTITY_HEADER="+secret,
		"SSL_CERT_FILE="+cert)...)
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
