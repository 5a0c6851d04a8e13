package knobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/stretchr/testify/require"
)

// env is one emulator with knobs, a client and container "db"/"c"
// partitioned on /pk.
type env struct {
	k      *knobs.Knobs
	srv    *cosmosemu.Server
	client *azcosmos.Client
	c      *azcosmos.ContainerClient
}

type envOptions struct {
	cfg knobs.Config
	// tls serves HTTPS (HTTP/2) instead of plain HTTP/1.1.
	tls bool
	// sdkRetries keeps azcore's default retry policy; otherwise the client
	// makes exactly one attempt per call (azcore retries disabled).
	sdkRetries bool
	// noKnobs starts the emulator without the knobs' middleware.
	noKnobs bool
}

// newEnvWithout starts an environment whose emulator has no middleware.
func newEnvWithout(tb testing.TB) *env { return newEnv(tb, envOptions{noKnobs: true}) }

func newEnv(tb testing.TB, o envOptions) *env {
	tb.Helper()
	k, err := knobs.New(o.cfg)
	require.NoError(tb, err)
	mws := k.Middleware()
	if o.noKnobs {
		mws = nil
	}
	srv, err := cosmosemu.Start(context.Background(), cosmosemu.Options{PlainHTTP: !o.tls, Middleware: mws})
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, srv.Close()) })

	opts := srv.ClientOptions()
	if !o.sdkRetries {
		opts.Retry = policy.RetryOptions{MaxRetries: -1}
	}
	if hc, ok := opts.Transport.(*http.Client); ok {
		// Closing idle client connections first lets an HTTP/2 server shut
		// down without waiting for its GOAWAY timeout.
		tb.Cleanup(hc.CloseIdleConnections)
	}
	cred, err := azcosmos.NewKeyCredential(srv.Key())
	require.NoError(tb, err)
	client, err := azcosmos.NewClientWithKey(srv.Endpoint(), cred, opts)
	require.NoError(tb, err)

	ctx := context.Background()
	_, err = client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "db"}, nil)
	require.NoError(tb, err)
	db, err := client.NewDatabase("db")
	require.NoError(tb, err)
	_, err = db.CreateContainer(ctx, azcosmos.ContainerProperties{
		ID:                     "c",
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}, Version: 2},
	}, nil)
	require.NoError(tb, err)
	c, err := db.NewContainer("c")
	require.NoError(tb, err)
	return &env{k: k, srv: srv, client: client, c: c}
}

func doc(tb testing.TB, id, pk string, extra map[string]any) []byte {
	tb.Helper()
	m := map[string]any{"id": id, "pk": pk}
	for k, v := range extra {
		m[k] = v
	}
	b, err := json.Marshal(m)
	require.NoError(tb, err)
	return b
}

func (e *env) create(tb testing.TB, id string) (azcosmos.ItemResponse, error) {
	tb.Helper()
	return e.c.CreateItem(context.Background(), azcosmos.NewPartitionKeyString("p"), doc(tb, id, "p", nil), nil)
}

func (e *env) read(id string) (azcosmos.ItemResponse, error) {
	return e.c.ReadItem(context.Background(), azcosmos.NewPartitionKeyString("p"), id, nil)
}

// responseError returns the *azcore.ResponseError in err, failing the test
// when there is none.
func responseError(tb testing.TB, err error) *azcore.ResponseError {
	tb.Helper()
	var re *azcore.ResponseError
	require.Truef(tb, errors.As(err, &re), "want *azcore.ResponseError, got %T: %v", err, err)
	return re
}

func statusOf(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}
