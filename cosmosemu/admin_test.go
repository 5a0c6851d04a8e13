package cosmosemu_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/stretchr/testify/require"
)

// adminCall sends an unauthenticated request to the admin surface.
func adminCall(t *testing.T, srv *cosmosemu.Server, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, strings.TrimSuffix(srv.Endpoint(), "/")+path, bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	resp, err := srv.HTTPClient().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

func TestAdminSplitAndDelegation(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var delegated []string
	extra := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		delegated = append(delegated, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.WriteHeader(http.StatusTeapot)
	})
	srv, _, c := newContainerWith(t, cosmosemu.Options{Admin: extra})
	ctx := context.Background()
	_, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString("a"), mustJSON(t, map[string]any{"id": "1", "pk": "a"}), nil)
	require.NoError(t, err)

	status, body := adminCall(t, srv, http.MethodPost, "/_emulator/split", `{"database":"db","container":"c","range":"3"}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var split struct {
		Parent   string   `json:"parent"`
		Children []string `json:"children"`
	}
	require.NoError(t, json.Unmarshal(body, &split))
	require.Equal(t, "3", split.Parent)
	require.Equal(t, []string{"4", "5"}, split.Children)

	status, body = adminCall(t, srv, http.MethodGet, "/_emulator/ranges?database=db&container=c", "")
	require.Equal(t, http.StatusOK, status, string(body))
	var ranges []cosmosemu.PartitionKeyRange
	require.NoError(t, json.Unmarshal(body, &ranges))
	require.Len(t, ranges, 5)
	require.Equal(t, []string{"3"}, ranges[4].Parents)

	for _, tc := range []struct {
		method, path, body string
		status             int
	}{
		{http.MethodPost, "/_emulator/split", `{"database":"db","container":"c","range":"3"}`, http.StatusNotFound},
		{http.MethodPost, "/_emulator/split", `{"database":"db","container":"zz","range":"0"}`, http.StatusNotFound},
		{http.MethodPost, "/_emulator/split", `{"database":"db"}`, http.StatusBadRequest},
		{http.MethodPost, "/_emulator/split", `{"database":"db","container":"c","range":"0","x":1}`, http.StatusBadRequest},
		{http.MethodGet, "/_emulator/split", "", http.StatusMethodNotAllowed},
		{http.MethodGet, "/_emulator/ranges?database=db&container=zz", "", http.StatusNotFound},
		{http.MethodPost, "/_emulator/knobs/faults", `{}`, http.StatusTeapot},
	} {
		status, body := adminCall(t, srv, tc.method, tc.path, tc.body)
		require.Equal(t, tc.status, status, "%s %s: %s", tc.method, tc.path, body)
	}
	mu.Lock()
	require.Equal(t, []string{"POST /knobs/faults"}, delegated, "prefix stripped")
	mu.Unlock()

	// The Cosmos DB surface still requires auth and works after the split.
	unauth := rawRequest(t, srv, http.MethodGet, "/dbs", "dbs", "", map[string]string{"Authorization": ""}, nil)
	require.Equal(t, http.StatusUnauthorized, unauth.Status)
	_, err = c.ReadItem(ctx, azcosmos.NewPartitionKeyString("a"), "1", nil)
	require.NoError(t, err)
}

func TestAdminWithoutDelegate(t *testing.T) {
	t.Parallel()
	srv := startServer(t, cosmosemu.Options{PlainHTTP: true})
	status, body := adminCall(t, srv, http.MethodGet, "/_emulator/counters", "")
	require.Equal(t, http.StatusNotFound, status)
	require.Contains(t, string(body), `"error"`)
	status, _ = adminCall(t, srv, http.MethodGet, "/_emulator", "")
	require.Equal(t, http.StatusNotFound, status)
}
