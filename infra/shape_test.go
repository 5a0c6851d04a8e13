// Package infra holds the tests that keep the Azure deployment under
// infra/bicep in step with the code it deploys: the container's shape is
// the store's, the app's probes and port are the service's, the role
// assignment is as narrow as the provider allows, the deploy-time order
// and switches hold (role assignments one at a time, AcrPull before the
// app, internal ingress unless authenticated, zone redundancy, backup,
// peer-traffic encryption), and every resource uses an API version
// checked against the Azure REST API specifications (DESIGN §6e). The environment variables are checked beside the service
// (cmd/durafeed-service), which owns them.
package infra

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/httpapi"
	"github.com/durafeed/durafeed/internal/bicep"
	"github.com/durafeed/durafeed/runtime"
	"github.com/durafeed/durafeed/store"
)

// checkedAPIVersions are the resource types and API versions whose
// properties were checked against the Azure REST API specifications, as
// DESIGN §6e records. A resource at another version fails
// TestAPIVersionsWereChecked until it is checked and recorded.
var checkedAPIVersions = map[string]string{
	"Microsoft.DocumentDB/databaseAccounts":                         "2025-04-15",
	"Microsoft.DocumentDB/databaseAccounts/sqlDatabases":            "2025-04-15",
	"Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers": "2025-04-15",
	"Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments":      "2025-04-15",
	"Microsoft.ManagedIdentity/userAssignedIdentities":              "2024-11-30",
	"Microsoft.OperationalInsights/workspaces":                      "2025-02-01",
	"Microsoft.App/managedEnvironments":                             "2025-07-01",
	"Microsoft.App/containerApps":                                   "2025-07-01",
	"Microsoft.Insights/diagnosticSettings":                         "2021-05-01-preview",
	"Microsoft.ContainerRegistry/registries":                        "2023-07-01",
	"Microsoft.Authorization/roleAssignments":                       "2022-04-01",
}

// dataContributorRole is Cosmos DB Built-in Data Contributor.
const dataContributorRole = "00000000-0000-0000-0000-000000000002"

func read(t *testing.T, name string) *bicep.File {
	t.Helper()
	f, err := bicep.ReadFile(filepath.Join("bicep", name))
	require.NoError(t, err)
	return f
}

// one returns the only resource of the type in f.
func one(t *testing.T, f *bicep.File, typ string) *bicep.Resource {
	t.Helper()
	r, err := f.OnlyResourceOfType(typ)
	require.NoError(t, err)
	return r
}

// at returns the value at path in v, which must be an object.
func at(t *testing.T, v bicep.Value, path ...string) bicep.Value {
	t.Helper()
	o, ok := v.(bicep.Object)
	require.True(t, ok, "not an object: %#v", v)
	got, ok := o.Get(path...)
	require.True(t, ok, "no %s", strings.Join(path, "."))
	return got
}

func literal(t *testing.T, v bicep.Value) any {
	t.Helper()
	got, err := bicep.Literal(v)
	require.NoError(t, err)
	return got
}

func expr(t *testing.T, v bicep.Value) string {
	t.Helper()
	e, ok := v.(bicep.Expr)
	require.True(t, ok, "not an expression: %#v", v)
	return e.Text
}

func bicepFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	require.NoError(t, filepath.WalkDir("bicep", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".bicep") {
			files = append(files, path)
		}
		return err
	}))
	require.NotEmpty(t, files)
	return files
}

// TestContainerShapeIsTheStores compares the container the Bicep
// deploys with store.ContainerProperties: partition key, indexing policy
// and time to live. Included and excluded paths compare as sets, and so
// do the composite indexes, each kept in its order; enum values compare
// without case (the SDK writes "Consistent", ARM documents "consistent").
func TestContainerShapeIsTheStores(t *testing.T) {
	c := one(t, read(t, "modules/cosmos.bicep"), "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers")
	res, ok := at(t, c.Body, "properties", "resource").(bicep.Object)
	require.True(t, ok)
	got := map[string]any{}
	for _, k := range res.Keys {
		if k != "id" {
			got[k] = literal(t, res.Values[k])
		}
	}

	raw, err := json.Marshal(store.ContainerProperties("x"))
	require.NoError(t, err)
	want := map[string]any{}
	require.NoError(t, json.Unmarshal(raw, &want))
	delete(want, "id")

	require.Equal(t, canonical(want), canonical(got))
}

// canonical rewrites a container definition so that equal definitions
// are equal values: path lists sorted, enum strings in lower case.
func canonical(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			out[k] = canonical(x)
			if k == "includedPaths" || k == "excludedPaths" || k == "compositeIndexes" {
				out[k] = sortedByJSON(out[k])
			}
			if s, ok := x.(string); ok && (k == "indexingMode" || k == "order" || k == "kind") {
				out[k] = strings.ToLower(s)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = canonical(x)
		}
		return out
	}
	return v
}

func sortedByJSON(v any) any {
	xs, ok := v.([]any)
	if !ok {
		return v
	}
	keyed := make([]string, len(xs))
	for i, x := range xs {
		b, _ := json.Marshal(x)
		keyed[i] = string(b)
	}
	sort.Strings(keyed)
	out := make([]any, len(keyed))
	for i, k := range keyed {
		_ = json.Unmarshal([]byte(k), &out[i])
	}
	return out
}

// TestCanonicalTellsDefinitionsApart makes sure the comparison above can
// fail: a missing path, an extra composite index, a reordered composite
// index and another partition key all differ.
func TestCanonicalTellsDefinitionsApart(t *testing.T) {
	raw, err := json.Marshal(store.ContainerProperties("x"))
	require.NoError(t, err)
	base := func() map[string]any {
		m := map[string]any{}
		require.NoError(t, json.Unmarshal(raw, &m))
		return m
	}
	policy := func(m map[string]any) map[string]any { return m["indexingPolicy"].(map[string]any) }
	for name, change := range map[string]func(m map[string]any){
		"path dropped": func(m map[string]any) {
			p := policy(m)
			p["includedPaths"] = p["includedPaths"].([]any)[1:]
		},
		"composite added": func(m map[string]any) {
			p := policy(m)
			p["compositeIndexes"] = append(p["compositeIndexes"].([]any), []any{map[string]any{"path": "/x", "order": "ascending"}})
		},
		"composite reordered": func(m map[string]any) {
			first := policy(m)["compositeIndexes"].([]any)[0].([]any)
			first[0], first[1] = first[1], first[0]
		},
		"partition key": func(m map[string]any) { m["partitionKey"].(map[string]any)["paths"] = []any{"/id"} },
		"ttl off":       func(m map[string]any) { delete(m, "defaultTtl") },
	} {
		m := base()
		change(m)
		require.NotEqual(t, canonical(base()), canonical(m), name)
	}
}

// TestRoleAssignmentIsContainerScopedDataContributor checks that the
// service identity gets Data Contributor on its container and no wider
// scope, and that main.bicep hands the identity's principal to it.
func TestRoleAssignmentIsContainerScopedDataContributor(t *testing.T) {
	f := read(t, "modules/cosmos.bicep")
	ra := one(t, f, "Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments")
	require.NotNil(t, ra.Loop, "one assignment per principal")
	require.Equal(t, "principalId in dataContributorPrincipalIds", ra.Loop.Text)
	require.Equal(t, "'${account.id}/dbs/${database.name}/colls/${container.name}'", expr(t, at(t, ra.Body, "properties", "scope")))
	require.Equal(t, "'${account.id}/sqlRoleDefinitions/${dataContributorRoleId}'", expr(t, at(t, ra.Body, "properties", "roleDefinitionId")))
	require.Equal(t, "principalId", expr(t, at(t, ra.Body, "properties", "principalId")))
	require.Equal(t, dataContributorRole, f.Var("dataContributorRoleId").Value)
	require.Equal(t, "account", expr(t, at(t, ra.Body, "parent")))

	// The names in the scope are the deployed database's and container's.
	db := one(t, f, "Microsoft.DocumentDB/databaseAccounts/sqlDatabases")
	c := one(t, f, "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers")
	require.Equal(t, "database", db.Symbol)
	require.Equal(t, "container", c.Symbol)

	m := read(t, "main.bicep").Module("cosmos")
	require.NotNil(t, m)
	require.Equal(t, "concat([identity.outputs.principalId], additionalDataContributorPrincipalIds)",
		expr(t, at(t, m.Body, "params", "dataContributorPrincipalIds")))
}

// TestAccountRefusesKeys checks the account's settings the provider's
// Entra ID path depends on.
func TestAccountRefusesKeys(t *testing.T) {
	acct := one(t, read(t, "modules/cosmos.bicep"), "Microsoft.DocumentDB/databaseAccounts")
	for path, want := range map[string]any{
		"kind":                        "GlobalDocumentDB",
		"properties.disableLocalAuth": true,
		"properties.disableKeyBasedMetadataWriteAccess":        true,
		"properties.consistencyPolicy.defaultConsistencyLevel": "Session",
		"properties.minimalTlsVersion":                         "Tls12",
	} {
		require.Equal(t, want, at(t, acct.Body, strings.Split(path, ".")...), path)
	}
}

// TestAppProbesAndShutdown checks the container app against the
// service: ingress reaches the port the service listens on, the liveness
// probe asks a path that answers 200 while the replica is not ready and
// the readiness probe one that answers 503 then (both asked of the
// service's real handler), and the platform waits longer than the
// service's own grace period before SIGKILL.
func TestAppProbesAndShutdown(t *testing.T) {
	app := one(t, read(t, "modules/app.bicep"), "Microsoft.App/containerApps")
	port := literal(t, at(t, app.Body, "properties", "configuration", "ingress", "targetPort"))
	cs, ok := at(t, app.Body, "properties", "template", "containers").(bicep.Array)
	require.True(t, ok)
	require.Len(t, cs, 1)
	env := envOf(t, cs[0])
	require.Equal(t, fmt.Sprintf(":%v", port), env["DURAFEED_LISTEN"], "the service listens on the ingress target port")

	ready := false
	h, err := httpapi.New(runtime.NewClient(nil), httpapi.Options{Orchestrations: runtime.NewRegistry(), Ready: func() bool { return ready }})
	require.NoError(t, err)
	probes, ok := at(t, cs[0], "probes").(bicep.Array)
	require.True(t, ok)
	seen := map[string]bool{}
	for _, p := range probes {
		typ := literal(t, at(t, p, "type")).(string)
		path := literal(t, at(t, p, "httpGet", "path")).(string)
		require.Equal(t, port, literal(t, at(t, p, "httpGet", "port")), typ)
		threshold := literal(t, at(t, p, "failureThreshold")).(float64)
		period := literal(t, at(t, p, "periodSeconds")).(float64)
		require.True(t, threshold >= 1 && threshold <= 10 && period >= 1 && period <= 240, "%s: limits of the Container Apps probe", typ)
		seen[typ] = true
		ready = false
		code := get(t, h, path)
		switch typ {
		case "Liveness":
			require.Equal(t, http.StatusOK, code, "liveness %s must answer while not ready", path)
		case "Readiness":
			require.Equal(t, http.StatusServiceUnavailable, code, "readiness %s must refuse while not ready", path)
			ready = true
			require.Equal(t, http.StatusOK, get(t, h, path))
		default:
			t.Fatalf("unexpected probe %s", typ)
		}
	}
	require.Equal(t, map[string]bool{"Liveness": true, "Readiness": true}, seen)

	require.Equal(t, "'${shutdownGraceSeconds}s'", env["DURAFEED_GRACE"])
	grace := expr(t, at(t, app.Body, "properties", "template", "terminationGracePeriodSeconds"))
	var margin int
	_, err = fmt.Sscanf(grace, "shutdownGraceSeconds + %d", &margin)
	require.NoError(t, err, "terminationGracePeriodSeconds is %q", grace)
	require.Positive(t, margin, "the platform must wait longer than the service's grace period")

	scale := at(t, app.Body, "properties", "template", "scale")
	require.Equal(t, "minReplicas", expr(t, at(t, scale, "minReplicas")))
	rules, ok := at(t, scale, "rules").(bicep.Array)
	require.True(t, ok)
	require.Len(t, rules, 1)
	require.Equal(t, "string(httpConcurrentRequests)", expr(t, at(t, rules[0], "http", "metadata", "concurrentRequests")))
	for _, f := range []string{"modules/app.bicep", "main.bicep"} {
		p := read(t, f).Param("minReplicas")
		require.NotNil(t, p, f)
		require.Contains(t, p.Decorators, bicep.Decorator{Name: "minValue", Args: []bicep.Value{int64(2)}}, "%s: at least 2 replicas", f)
	}
	identity := at(t, app.Body, "identity")
	require.Equal(t, "UserAssigned", at(t, identity, "type"))
}

// envOf returns a container's environment: name to value (a literal
// string, or an expression's text).
func envOf(t *testing.T, container bicep.Value) map[string]string {
	t.Helper()
	list, ok := at(t, container, "env").(bicep.Array)
	require.True(t, ok)
	env := map[string]string{}
	for _, e := range list {
		name, ok := at(t, e, "name").(string)
		require.True(t, ok)
		require.NotContains(t, env, name)
		switch v := at(t, e, "value").(type) {
		case string:
			env[name] = v
		case bicep.Expr:
			env[name] = v.Text
		default:
			t.Fatalf("%s: value %#v", name, v)
		}
	}
	return env
}

func get(t *testing.T, h http.Handler, path string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code
}

// TestParametersFile checks main.parameters.json against main.bicep:
// every parameter it names exists, and every required one is given.
func TestParametersFile(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("bicep", "main.parameters.json"))
	require.NoError(t, err)
	var file struct {
		Schema     string                     `json:"$schema"`
		Parameters map[string]json.RawMessage `json:"parameters"`
	}
	require.NoError(t, json.Unmarshal(raw, &file))
	require.Contains(t, file.Schema, "deploymentParameters.json")
	main := read(t, "main.bicep")
	for name := range file.Parameters {
		require.NotNil(t, main.Param(name), "main.parameters.json sets %s, which main.bicep does not declare", name)
	}
	for _, p := range main.Params {
		if !p.HasDefault {
			require.Contains(t, file.Parameters, p.Name, "required parameter %s", p.Name)
		}
	}
}

// TestModulesGetTheirParameters checks each module call, in main.bicep
// and in the modules, against the called module's declarations: no
// unknown parameter, no required one missing.
func TestModulesGetTheirParameters(t *testing.T) {
	calls := 0
	for _, path := range bicepFiles(t) {
		f, err := bicep.ReadFile(path)
		require.NoError(t, err)
		for _, m := range f.Modules {
			calls++
			mod, err := bicep.ReadFile(filepath.Join(filepath.Dir(path), m.Path))
			require.NoError(t, err, "%s: module %s", path, m.Symbol)
			params, ok := at(t, m.Body, "params").(bicep.Object)
			require.True(t, ok, m.Symbol)
			for _, k := range params.Keys {
				require.NotNil(t, mod.Param(k), "%s: module %s passes %s, which %s does not declare", path, m.Symbol, k, m.Path)
			}
			for _, p := range mod.Params {
				if !p.HasDefault {
					require.Contains(t, params.Keys, p.Name, "%s: module %s misses required %s", path, m.Symbol, p.Name)
				}
			}
		}
	}
	require.GreaterOrEqual(t, calls, 5, "main.bicep's four modules and the app's registry access")
}

// TestAPIVersionsWereChecked fails for a resource whose type or API
// version is not one checked against the specifications, and for a
// checked version DESIGN does not record.
func TestAPIVersionsWereChecked(t *testing.T) {
	used := map[string]bool{}
	for _, path := range bicepFiles(t) {
		f, err := bicep.ReadFile(path)
		require.NoError(t, err)
		for _, r := range f.Resources {
			want, ok := checkedAPIVersions[r.Type]
			require.True(t, ok, "%s: resource %s has an unchecked type %s", path, r.Symbol, r.Type)
			require.Equal(t, want, r.APIVersion, "%s: resource %s", path, r.Symbol)
			used[r.Type] = true
		}
	}
	var unused []string
	for typ := range checkedAPIVersions {
		if !used[typ] {
			unused = append(unused, typ)
		}
	}
	require.Empty(t, unused, "checked but no longer used: drop them here and in DESIGN §6e")

	design, err := os.ReadFile(filepath.Join("..", "DESIGN.md"))
	require.NoError(t, err)
	versions := map[string]bool{}
	for _, v := range checkedAPIVersions {
		versions[v] = true
	}
	for _, v := range slices.Sorted(maps.Keys(versions)) {
		require.Contains(t, string(design), "| "+v+" |", "DESIGN §6e records version %s", v)
	}
}

// param returns the parameter of f, which must exist.
func param(t *testing.T, f *bicep.File, name string) *bicep.Param {
	t.Helper()
	p := f.Param(name)
	require.NotNil(t, p, "%s declares no parameter %s", f.Path, name)
	return p
}

// moduleParams returns what main.bicep passes to its module symbol.
func moduleParams(t *testing.T, symbol string) bicep.Object {
	t.Helper()
	m := read(t, "main.bicep").Module(symbol)
	require.NotNil(t, m, "main.bicep has no module %s", symbol)
	params, ok := at(t, m.Body, "params").(bicep.Object)
	require.True(t, ok)
	return params
}

// TestCosmosAccountWritesAreSerialized checks that every loop writing
// resources under a Cosmos DB account, the data-plane role assignments
// among them, runs one at a time (@batchSize(1)): the account refuses a
// role assignment written while another holds its lock with 412
// (hashicorp/terraform-provider-azurerm#15842).
func TestCosmosAccountWritesAreSerialized(t *testing.T) {
	var loops []string
	for _, path := range bicepFiles(t) {
		f, err := bicep.ReadFile(path)
		require.NoError(t, err)
		for _, r := range f.Resources {
			if r.Loop == nil || !strings.HasPrefix(strings.ToLower(r.Type), "microsoft.documentdb/databaseaccounts/") {
				continue
			}
			loops = append(loops, r.Type)
			require.Contains(t, r.Decorators, bicep.Decorator{Name: "batchSize", Args: []bicep.Value{int64(1)}},
				"%s: resource %s loops over account writes in parallel", path, r.Symbol)
		}
	}
	require.Contains(t, loops, "Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments")
}

// TestAccountHasContinuousBackup checks the account's backup policy:
// continuous, its tier a parameter of 7 or 30 days, 30 by default in the
// module and in main.bicep, which passes it on.
func TestAccountHasContinuousBackup(t *testing.T) {
	cosmos := read(t, "modules/cosmos.bicep")
	acct := one(t, cosmos, "Microsoft.DocumentDB/databaseAccounts")
	require.Equal(t, "Continuous", at(t, acct.Body, "properties", "backupPolicy", "type"))
	require.Equal(t, "continuousBackupTier", expr(t, at(t, acct.Body, "properties", "backupPolicy", "continuousModeProperties", "tier")))
	for _, f := range []*bicep.File{cosmos, read(t, "main.bicep")} {
		p := param(t, f, "continuousBackupTier")
		require.Equal(t, "Continuous30Days", p.Default, f.Path)
		require.Contains(t, p.Decorators, bicep.Decorator{Name: "allowed", Args: []bicep.Value{bicep.Array{"Continuous7Days", "Continuous30Days"}}}, f.Path)
	}
	require.Equal(t, "continuousBackupTier", expr(t, moduleParams(t, "cosmos").Values["continuousBackupTier"]))
}

// TestEnvironmentEncryptsPeerTraffic checks that traffic inside the
// Container Apps environment is encrypted.
func TestEnvironmentEncryptsPeerTraffic(t *testing.T) {
	env := one(t, read(t, "modules/app.bicep"), "Microsoft.App/managedEnvironments")
	require.Equal(t, true, at(t, env.Body, "properties", "peerTrafficConfiguration", "encryption", "enabled"))
}

// TestZoneRedundancyReachesBothResources checks that main.bicep's one
// zoneRedundant parameter, off by default, reaches the Cosmos DB account's
// location and the Container Apps environment, and that asking for it
// without the subnet the environment then needs fails the deployment.
func TestZoneRedundancyReachesBothResources(t *testing.T) {
	main := read(t, "main.bicep")
	require.Equal(t, false, param(t, main, "zoneRedundant").Default)
	require.Equal(t, "", param(t, main, "infrastructureSubnetId").Default)
	checked := main.Var("zoneRedundantChecked")
	require.NotNil(t, checked)
	const subnet = "/subscriptions/s/resourceGroups/g/providers/Microsoft.Network/virtualNetworks/v/subnets/aca"
	for _, tc := range []struct {
		name    string
		zones   bool
		subnet  string
		want    bool
		failure string
	}{
		{name: "default", want: false},
		{name: "subnet without zones", subnet: subnet, want: false},
		{name: "zones in a subnet", zones: true, subnet: subnet, want: true},
		{name: "zones without a subnet", zones: true, failure: "needs infrastructureSubnetId"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := evalExpr(expr(t, checked.Value), map[string]any{"zoneRedundant": tc.zones, "infrastructureSubnetId": tc.subnet})
			if tc.failure != "" {
				require.ErrorIs(t, err, errFail)
				require.ErrorContains(t, err, tc.failure)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}

	// Both modules get the checked value; the app its subnet too.
	require.Equal(t, "zoneRedundantChecked", expr(t, moduleParams(t, "cosmos").Values["zoneRedundant"]))
	app := moduleParams(t, "app")
	require.Equal(t, "zoneRedundantChecked", expr(t, app.Values["zoneRedundant"]))
	require.Equal(t, "infrastructureSubnetId", expr(t, app.Values["infrastructureSubnetId"]))

	cosmos := read(t, "modules/cosmos.bicep")
	require.Equal(t, false, param(t, cosmos, "zoneRedundant").Default)
	locations, ok := at(t, one(t, cosmos, "Microsoft.DocumentDB/databaseAccounts").Body, "properties", "locations").(bicep.Array)
	require.True(t, ok)
	require.Len(t, locations, 1)
	require.Equal(t, "zoneRedundant", expr(t, at(t, locations[0], "isZoneRedundant")))

	appFile := read(t, "modules/app.bicep")
	require.Equal(t, false, param(t, appFile, "zoneRedundant").Default)
	require.Equal(t, "", param(t, appFile, "infrastructureSubnetId").Default)
	env := one(t, appFile, "Microsoft.App/managedEnvironments")
	require.Equal(t, "zoneRedundant", expr(t, at(t, env.Body, "properties", "zoneRedundant")))
	require.Equal(t, "empty(infrastructureSubnetId) ? null : { infrastructureSubnetId: infrastructureSubnetId }",
		expr(t, at(t, env.Body, "properties", "vnetConfiguration")))
}

// TestAppPullsAfterItsAcrPullAssignment checks the image pull of the
// first revision: the app pulls from the registry as the user-assigned
// identity it runs under, that identity holds AcrPull on the registry, and
// the container app depends on that assignment explicitly, so it is
// created first (microsoft/azure-container-apps#646).
func TestAppPullsAfterItsAcrPullAssignment(t *testing.T) {
	appFile := read(t, "modules/app.bicep")
	access := appFile.Module("registryAccess")
	require.NotNil(t, access)
	require.Equal(t, "registry-access.bicep", access.Path)
	require.Equal(t, &bicep.Expr{Text: "!empty(containerRegistryName)"}, access.Condition)
	require.Equal(t, "identityPrincipalId", expr(t, at(t, access.Body, "params", "principalId")))
	require.Equal(t, "containerRegistryName", expr(t, at(t, access.Body, "params", "containerRegistryName")))

	// The module assigns AcrPull on the registry to that principal.
	regAccess := read(t, "modules/registry-access.bicep")
	ra := one(t, regAccess, "Microsoft.Authorization/roleAssignments")
	require.Equal(t, "principalId", expr(t, at(t, ra.Body, "properties", "principalId")))
	require.Equal(t, "subscriptionResourceId('Microsoft.Authorization/roleDefinitions', acrPullRoleId)", expr(t, at(t, ra.Body, "properties", "roleDefinitionId")))
	require.Equal(t, "7f951dda-4ed3-4680-a7ca-43fe172d538d", regAccess.Var("acrPullRoleId").Value, "AcrPull")
	require.Equal(t, "registry", expr(t, at(t, ra.Body, "scope")))

	app := one(t, appFile, "Microsoft.App/containerApps")
	deps, ok := at(t, app.Body, "dependsOn").(bicep.Array)
	require.True(t, ok)
	require.Contains(t, deps, bicep.Expr{Text: "registryAccess"}, "the app is created after the AcrPull assignment")
	require.Equal(t, "UserAssigned", at(t, app.Body, "identity", "type"))
	require.Equal(t, "{ '${identityResourceId}': {} }", expr(t, at(t, app.Body, "identity", "userAssignedIdentities")))
	require.Equal(t, "empty(containerRegistryName) ? [] : [{ server: registryAccess!.outputs.loginServer, identity: identityResourceId }]",
		expr(t, at(t, app.Body, "properties", "configuration", "registries")), "the pull is the user-assigned identity's")

	// main.bicep hands the app one identity: the one it runs under, pulls
	// with and whose principal gets AcrPull.
	params := moduleParams(t, "app")
	for name, want := range map[string]string{
		"identityResourceId":    "identity.outputs.resourceId",
		"identityPrincipalId":   "identity.outputs.principalId",
		"identityClientId":      "identity.outputs.clientId",
		"containerRegistryName": "containerRegistryName",
	} {
		require.Equal(t, want, expr(t, params.Values[name]), name)
	}
}

// TestIngressIsInternalUnlessAuthenticated checks who can reach the API:
// the ingress is internal unless ingressExternal is set and both auth
// parameters are; ingressExternal without them fails the deployment in
// main.bicep, and the app module on its own never opens without them. The
// auth parameters reach the service's environment.
func TestIngressIsInternalUnlessAuthenticated(t *testing.T) {
	main := read(t, "main.bicep")
	appFile := read(t, "modules/app.bicep")
	for _, f := range []*bicep.File{main, appFile} {
		require.Equal(t, false, param(t, f, "ingressExternal").Default, f.Path)
		require.Equal(t, "", param(t, f, "authTenantId").Default, f.Path)
		require.Equal(t, "", param(t, f, "authAudience").Default, f.Path)
	}
	checked := main.Var("ingressExternalChecked")
	require.NotNil(t, checked)
	params := moduleParams(t, "app")
	require.Equal(t, "ingressExternalChecked", expr(t, params.Values["ingressExternal"]))
	require.Equal(t, "authTenantId", expr(t, params.Values["authTenantId"]))
	require.Equal(t, "authAudience", expr(t, params.Values["authAudience"]))

	app := one(t, appFile, "Microsoft.App/containerApps")
	ingress := at(t, app.Body, "properties", "configuration", "ingress")
	require.Equal(t, false, at(t, ingress, "allowInsecure"))
	external := expr(t, at(t, ingress, "external"))
	if v := appFile.Var(external); v != nil {
		external = expr(t, v.Value)
	}

	for _, tc := range []struct {
		name             string
		external         bool
		tenant, audience string
		want             bool
		failure          bool
	}{
		{name: "default"},
		{name: "auth, internal", tenant: "t", audience: "a"},
		{name: "external with auth", external: true, tenant: "t", audience: "a", want: true},
		{name: "external without auth", external: true, failure: true},
		{name: "external, tenant only", external: true, tenant: "t", failure: true},
		{name: "external, audience only", external: true, audience: "a", failure: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]any{"ingressExternal": tc.external, "authTenantId": tc.tenant, "authAudience": tc.audience}
			passed, err := evalExpr(expr(t, checked.Value), env)
			if tc.failure {
				require.ErrorIs(t, err, errFail)
				require.ErrorContains(t, err, "needs authTenantId and authAudience")
			} else {
				require.NoError(t, err)
				env["ingressExternal"] = passed
				got, err := evalExpr(external, env)
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
			}
			// The module alone: asked for external, open only with auth.
			env["ingressExternal"] = true
			got, err := evalExpr(external, env)
			require.NoError(t, err)
			require.Equal(t, tc.tenant != "" && tc.audience != "", got)
		})
	}

	cs, ok := at(t, app.Body, "properties", "template", "containers").(bicep.Array)
	require.True(t, ok)
	env := envOf(t, cs[0])
	require.Equal(t, "authTenantId", env["DURAFEED_AUTH_TENANT_ID"])
	require.Equal(t, "authAudience", env["DURAFEED_AUTH_AUDIENCE"])
	// The service refuses :8080 without authentication unless told
	// DURAFEED_AUTH=none, and refuses "none" beside a tenant: the opt-out
	// is set exactly when authentication is not configured.
	optOut := appFile.Var(env["DURAFEED_AUTH"])
	require.NotNil(t, optOut, "DURAFEED_AUTH is a variable of the app module")
	for _, tc := range []struct {
		tenant, audience, want string
	}{{"", "", "none"}, {"t", "", "none"}, {"", "a", "none"}, {"t", "a", ""}} {
		got, err := evalExpr(expr(t, optOut.Value), map[string]any{"authTenantId": tc.tenant, "authAudience": tc.audience})
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "tenant %q, audience %q", tc.tenant, tc.audience)
	}
}
