package cosmosemu_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/stretchr/testify/require"
)

type fakeToken struct{ exp time.Time }

func (f fakeToken) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	enc := base64.RawURLEncoding.EncodeToString
	tok := enc([]byte(`{"alg":"RS256","typ":"JWT"}`)) + "." +
		enc([]byte(`{"aud":"https://localhost","exp":`+strconv.FormatInt(f.exp.Unix(), 10)+`}`)) + "." + enc([]byte("sig"))
	return azcore.AccessToken{Token: tok, ExpiresOn: f.exp}, nil
}

func TestAuth(t *testing.T) {
	t.Parallel()
	srv, _, c := newContainer(t)
	ctx := context.Background()
	_, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString("p"), mustJSON(t, map[string]any{"id": "a", "pk": "p"}), nil)
	require.NoError(t, err)
	now := time.Now().UTC().Format(http.TimeFormat)
	otherKey := base64.StdEncoding.EncodeToString([]byte("not the key"))
	tests := []struct {
		name    string
		headers map[string]string
		status  int
	}{
		{"valid", nil, http.StatusOK},
		{"missing authorization", map[string]string{"Authorization": ""}, http.StatusUnauthorized},
		{"wrong key", map[string]string{"Authorization": signMaster(otherKey, "GET", "docs", "dbs/db/colls/c/docs/a", now)}, http.StatusUnauthorized},
		{"wrong link", map[string]string{"Authorization": signMaster(srv.Key(), "GET", "docs", "dbs/db/colls/c/docs/b", now)}, http.StatusUnauthorized},
		{"stale date", map[string]string{"x-ms-date": time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)}, http.StatusUnauthorized},
		{"garbage token", map[string]string{"Authorization": "type=aad&ver=1.0&sig=abc"}, http.StatusUnauthorized},
		{"unknown type", map[string]string{"Authorization": "type=resource&ver=1.0&sig=abc"}, http.StatusUnauthorized},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := map[string]string{"x-ms-documentdb-partitionkey": `["p"]`}
			for k, v := range tc.headers {
				h[k] = v
			}
			r := rawRequest(t, srv, http.MethodGet, "/dbs/db/colls/c/docs/a", "docs", "dbs/db/colls/c/docs/a", h, nil)
			require.Equal(t, tc.status, r.Status, string(r.Body))
			if tc.status == http.StatusUnauthorized {
				code, _ := errorCode(t, r.Body)
				require.Equal(t, "Unauthorized", code)
			}
		})
	}

	aad, err := azcosmos.NewClient(srv.Endpoint(), fakeToken{exp: time.Now().Add(time.Hour)}, srv.ClientOptions())
	require.NoError(t, err)
	ac, err := aad.NewContainer("db", "c")
	require.NoError(t, err)
	_, err = ac.ReadItem(ctx, azcosmos.NewPartitionKeyString("p"), "a", nil)
	require.NoError(t, err)
	expired, err := azcosmos.NewClient(srv.Endpoint(), fakeToken{exp: time.Now().Add(-time.Hour)}, srv.ClientOptions())
	require.NoError(t, err)
	ec, err := expired.NewContainer("db", "c")
	require.NoError(t, err)
	_, err = ec.ReadItem(ctx, azcosmos.NewPartitionKeyString("p"), "a", nil)
	require.Equal(t, http.StatusUnauthorized, statusOf(err))
}

func TestDatabasesContainersOffers(t *testing.T) {
	t.Parallel()
	srv := startServer(t, cosmosemu.Options{PartitionCount: 2})
	client, err := srv.NewClient()
	require.NoError(t, err)
	ctx := context.Background()
	tp := azcosmos.NewManualThroughputProperties(400)
	_, err = client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "d1"}, &azcosmos.CreateDatabaseOptions{ThroughputProperties: &tp})
	require.NoError(t, err)
	_, err = client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "d1"}, nil)
	require.Equal(t, http.StatusConflict, statusOf(err))
	_, err = client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "bad/name"}, nil)
	require.Equal(t, http.StatusBadRequest, statusOf(err))

	pager := client.NewQueryDatabasesPager("SELECT * FROM r WHERE r.id = 'd1'", nil)
	page, err := pager.NextPage(ctx)
	require.NoError(t, err)
	require.Len(t, page.Databases, 1)

	db, _ := client.NewDatabase("d1")
	th, err := db.ReadThroughput(ctx, nil)
	require.NoError(t, err)
	mt, ok := th.ThroughputProperties.ManualThroughput()
	require.True(t, ok)
	require.Equal(t, int32(400), mt)

	auto := azcosmos.NewAutoscaleThroughputProperties(4000)
	props := azcosmos.ContainerProperties{
		ID:                     "c1",
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}, Version: 2},
		IndexingPolicy:         &azcosmos.IndexingPolicy{Automatic: true, IndexingMode: azcosmos.IndexingModeConsistent, IncludedPaths: []azcosmos.IncludedPath{{Path: "/*"}}, ExcludedPaths: []azcosmos.ExcludedPath{{Path: "/big/?"}}},
	}
	_, err = db.CreateContainer(ctx, props, &azcosmos.CreateContainerOptions{ThroughputProperties: &auto})
	require.NoError(t, err)
	_, err = db.CreateContainer(ctx, props, nil)
	require.Equal(t, http.StatusConflict, statusOf(err))
	c, _ := db.NewContainer("c1")
	read, err := c.Read(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, "/big/?", read.ContainerProperties.IndexingPolicy.ExcludedPaths[0].Path)
	require.NotEmpty(t, read.ContainerProperties.ResourceID)
	require.Equal(t, 2, read.ContainerProperties.PartitionKeyDefinition.Version)

	cth, err := c.ReadThroughput(ctx, nil)
	require.NoError(t, err)
	max, ok := cth.ThroughputProperties.AutoscaleMaxThroughput()
	require.True(t, ok)
	require.Equal(t, int32(4000), max)
	_, err = c.ReplaceThroughput(ctx, azcosmos.NewAutoscaleThroughputProperties(6000), nil)
	require.NoError(t, err)
	cth, err = c.ReadThroughput(ctx, nil)
	require.NoError(t, err)
	max, _ = cth.ThroughputProperties.AutoscaleMaxThroughput()
	require.Equal(t, int32(6000), max)

	ranges, err := c.ReadFeedRanges(ctx, nil)
	require.NoError(t, err)
	require.Len(t, ranges, 2)

	props.IndexingPolicy = &azcosmos.IndexingPolicy{IndexingMode: azcosmos.IndexingModeNone}
	_, err = c.Replace(ctx, props, nil)
	require.NoError(t, err)
	props.PartitionKeyDefinition.Paths = []string{"/other"}
	_, err = c.Replace(ctx, props, nil)
	require.Equal(t, http.StatusBadRequest, statusOf(err))

	_, err = c.Delete(ctx, nil)
	require.NoError(t, err)
	_, err = c.Read(ctx, nil)
	require.Equal(t, http.StatusNotFound, statusOf(err))
	_, err = db.Delete(ctx, nil)
	require.NoError(t, err)
	_, err = db.Read(ctx, nil)
	require.Equal(t, http.StatusNotFound, statusOf(err))
}

func TestMiddlewareSeam(t *testing.T) {
	t.Parallel()
	var seen []string
	inject := func(next cosmosemu.Handler) cosmosemu.Handler {
		return func(ctx context.Context, req *cosmosemu.Request) *cosmosemu.Response {
			seen = append(seen, string(req.Operation)+" "+string(req.ResourceType)+" "+strings.Join(req.PartitionKeyRangeIDs, ","))
			if req.Operation == cosmosemu.OpRead && req.ResourceType == cosmosemu.ResourceDocument {
				return cosmosemu.ErrorResponse(req, http.StatusTooManyRequests, 3200, "Request rate is large.")
			}
			return next(ctx, req)
		}
	}
	srv := startServer(t, cosmosemu.Options{Middleware: []cosmosemu.Middleware{inject}, PlainHTTP: true})
	client, err := srv.NewClient()
	require.NoError(t, err)
	ctx := context.Background()
	_, err = client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "d"}, nil)
	require.NoError(t, err)
	db, _ := client.NewDatabase("d")
	_, err = db.CreateContainer(ctx, azcosmos.ContainerProperties{ID: "c", PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}}}, nil)
	require.NoError(t, err)
	c, _ := db.NewContainer("c")
	_, err = c.CreateItem(ctx, azcosmos.NewPartitionKeyString("p"), mustJSON(t, map[string]any{"id": "a", "pk": "p"}), nil)
	require.NoError(t, err)
	require.Contains(t, strings.Join(seen, "\n"), "Create docs ")
	opts := srv.ClientOptions()
	opts.Retry.MaxRetries = -1
	cred, err := azcosmos.NewKeyCredential(srv.Key())
	require.NoError(t, err)
	noRetry, err := azcosmos.NewClientWithKey(srv.Endpoint(), cred, opts)
	require.NoError(t, err)
	nc, _ := noRetry.NewContainer("d", "c")
	_, err = nc.ReadItem(ctx, azcosmos.NewPartitionKeyString("p"), "a", nil)
	require.Equal(t, http.StatusTooManyRequests, statusOf(err))
}
