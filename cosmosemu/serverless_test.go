package cosmosemu_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu"
)

const (
	msgServerlessContainer = "Setting offer throughput or autopilot on container is not supported for serverless accounts."
	msgServerlessDatabase  = "Setting offer throughput or autopilot on database is not supported for serverless accounts."
	msgServerlessOffers    = "Reading or replacing offers is not supported for serverless accounts."
)

func TestServerlessDataPlane(t *testing.T) {
	t.Parallel()
	srv := startServer(t, cosmosemu.Options{Serverless: true})
	client, err := srv.NewClient()
	require.NoError(t, err)
	ctx := context.Background()
	manual := azcosmos.NewManualThroughputProperties(400)
	auto := azcosmos.NewAutoscaleThroughputProperties(4000)

	_, err = client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "db"}, &azcosmos.CreateDatabaseOptions{ThroughputProperties: &manual})
	status, _, msg := refusal(t, err)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, msg, msgServerlessDatabase)
	_, err = client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "db"}, nil)
	require.NoError(t, err)
	db, err := client.NewDatabase("db")
	require.NoError(t, err)

	props := azcosmos.ContainerProperties{ID: "c", PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}, Version: 2}}
	for name, tp := range map[string]*azcosmos.ThroughputProperties{"manual": &manual, "autoscale": &auto} {
		_, err = db.CreateContainer(ctx, props, &azcosmos.CreateContainerOptions{ThroughputProperties: tp})
		status, _, msg := refusal(t, err)
		require.Equal(t, http.StatusBadRequest, status, name)
		require.Contains(t, msg, msgServerlessContainer, name)
	}
	_, err = db.CreateContainer(ctx, props, nil)
	require.NoError(t, err)
	c, err := db.NewContainer("c")
	require.NoError(t, err)
	_, err = c.CreateItem(ctx, azcosmos.NewPartitionKeyString("p"), []byte(`{"id":"a","pk":"p"}`), nil)
	require.NoError(t, err)

	// Offers can be neither read nor replaced (the SDK reads them first).
	_, err = c.ReadThroughput(ctx, nil)
	status, _, msg = refusal(t, err)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, msg, msgServerlessOffers)
	_, err = c.ReplaceThroughput(ctx, manual, nil)
	status, _, _ = refusal(t, err)
	require.Equal(t, http.StatusBadRequest, status)
	resp := rawRequest(t, srv, http.MethodGet, "/offers", "offers", "", nil, nil)
	require.Equal(t, http.StatusBadRequest, resp.Status)
	_, m := errorCode(t, resp.Body)
	require.Contains(t, m, msgServerlessOffers)

	// The data plane's account resource does not tell serverless from
	// provisioned, as the service's does not.
	plain := startServer(t, cosmosemu.Options{})
	account := func(s *cosmosemu.Server) map[string]any {
		r := rawRequest(t, s, http.MethodGet, "/", "", "", nil, nil)
		require.Equal(t, http.StatusOK, r.Status)
		var v map[string]any
		require.NoError(t, json.Unmarshal(r.Body, &v))
		delete(v, "writableLocations")
		delete(v, "readableLocations")
		return v
	}
	require.Equal(t, account(plain), account(srv))
}

func TestServerlessARM(t *testing.T) {
	t.Parallel()
	srv := startServer(t, cosmosemu.Options{Serverless: true})
	mgr := armClient(t, srv, cosmosemu.TokenCredential{TenantID: tenant, ObjectID: manager})
	ctx := context.Background()

	acct, err := armGet(ctx, mgr, armPath("cosmosemu", "", ""))
	require.NoError(t, err)
	require.Equal(t, []any{map[string]any{"name": "EnableServerless"}}, dig(acct, "properties", "capabilities"))

	_, err = armPut(ctx, mgr, armPath("cosmosemu", "db", ""), map[string]any{"properties": map[string]any{"resource": map[string]any{"id": "db"}, "options": map[string]any{"throughput": 400}}})
	status, code := armCode(t, err)
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "BadRequest", code)
	require.Contains(t, err.Error(), msgServerlessDatabase)
	_, err = armPut(ctx, mgr, armPath("cosmosemu", "db", ""), map[string]any{"properties": map[string]any{"resource": map[string]any{"id": "db"}}})
	require.NoError(t, err)
	for name, opts := range map[string]map[string]any{
		"manual":    {"throughput": 400},
		"autoscale": {"autoscaleSettings": map[string]any{"maxThroughput": 4000}},
	} {
		_, err = armPut(ctx, mgr, armPath("cosmosemu", "db", "c"), containerBody("c", opts))
		status, _ := armCode(t, err)
		require.Equal(t, http.StatusBadRequest, status, name)
		require.Contains(t, err.Error(), msgServerlessContainer, name)
	}
	got, err := armPut(ctx, mgr, armPath("cosmosemu", "db", "c"), containerBody("c", nil))
	require.NoError(t, err)
	require.Nil(t, dig(got, "properties", "options"), "no offer")
	// An update asking for throughput is refused too.
	_, err = armPut(ctx, mgr, armPath("cosmosemu", "db", "c"), containerBody("c", map[string]any{"throughput": 400}))
	status, _ = armCode(t, err)
	require.Equal(t, http.StatusBadRequest, status)
}
