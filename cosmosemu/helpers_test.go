package cosmosemu_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/stretchr/testify/require"
)

// startServer starts an emulator for one test and closes it on cleanup.
func startServer(tb testing.TB, opts cosmosemu.Options) *cosmosemu.Server {
	tb.Helper()
	srv, err := cosmosemu.Start(context.Background(), opts)
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, srv.Close()) })
	return srv
}

// newContainer starts a server and creates database "db" and a container
// partitioned on pkPaths (MultiHash when more than one).
func newContainer(tb testing.TB, pkPaths ...string) (*cosmosemu.Server, *azcosmos.Client, *azcosmos.ContainerClient) {
	tb.Helper()
	return newContainerWith(tb, cosmosemu.Options{}, pkPaths...)
}

// newContainerWith is newContainer with explicit server options.
func newContainerWith(tb testing.TB, opts cosmosemu.Options, pkPaths ...string) (*cosmosemu.Server, *azcosmos.Client, *azcosmos.ContainerClient) {
	tb.Helper()
	srv := startServer(tb, opts)
	client, err := srv.NewClient()
	require.NoError(tb, err)
	ctx := context.Background()
	_, err = client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "db"}, nil)
	require.NoError(tb, err)
	db, err := client.NewDatabase("db")
	require.NoError(tb, err)
	if len(pkPaths) == 0 {
		pkPaths = []string{"/pk"}
	}
	def := azcosmos.PartitionKeyDefinition{Paths: pkPaths, Version: 2}
	if len(pkPaths) > 1 {
		def.Kind = azcosmos.PartitionKeyKindMultiHash
	}
	_, err = db.CreateContainer(ctx, azcosmos.ContainerProperties{ID: "c", PartitionKeyDefinition: def}, nil)
	require.NoError(tb, err)
	c, err := db.NewContainer("c")
	require.NoError(tb, err)
	return srv, client, c
}

func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := json.Marshal(v)
	require.NoError(tb, err)
	return b
}

func statusOf(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

// rawResponse is a decoded answer of a raw request.
type rawResponse struct {
	Status int
	Header http.Header
	Body   []byte
}

// rawRequest sends a request signed with the master key the way the SDK
// does (resource type and link given explicitly) and returns the answer.
func rawRequest(tb testing.TB, srv *cosmosemu.Server, method, path, rtype, link string, headers map[string]string, body []byte) rawResponse {
	tb.Helper()
	date := time.Now().UTC().Format(http.TimeFormat)
	req, err := http.NewRequest(method, strings.TrimSuffix(srv.Endpoint(), "/")+path, bytes.NewReader(body))
	require.NoError(tb, err)
	req.Header.Set("x-ms-date", date)
	req.Header.Set("x-ms-version", "2020-11-05")
	req.Header.Set("Authorization", signMaster(srv.Key(), method, rtype, link, date))
	for k, v := range headers {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := srv.HTTPClient().Do(req)
	require.NoError(tb, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(tb, err)
	return rawResponse{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

func signMaster(key, method, rtype, link, date string) string {
	k, _ := base64.StdEncoding.DecodeString(key)
	mac := hmac.New(sha256.New, k)
	mac.Write([]byte(strings.ToLower(method) + "\n" + strings.ToLower(rtype) + "\n" + link + "\n" + strings.ToLower(date) + "\n\n"))
	return url.QueryEscape("type=master&ver=1.0&sig=" + base64.StdEncoding.EncodeToString(mac.Sum(nil)))
}

// errorCode decodes the {"code","message"} body of an error answer.
func errorCode(tb testing.TB, body []byte) (string, string) {
	tb.Helper()
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	require.NoError(tb, json.Unmarshal(body, &e), string(body))
	return e.Code, e.Message
}
