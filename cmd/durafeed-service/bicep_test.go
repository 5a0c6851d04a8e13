package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/internal/bicep"
)

// TestBicepSetsWhatTheServiceReads holds the container app of
// infra/bicep to this service's configuration: every variable the app
// sets is one configFromEnv reads (recorded from its getenv), the
// deployment's four are set, no key is, and the grace period the Bicep
// defaults to is the service's.
func TestBicepSetsWhatTheServiceReads(t *testing.T) {
	read := map[string]bool{}
	_, err := configFromEnv(func(name string) string {
		read[name] = true
		return ""
	})
	require.NoError(t, err)
	require.True(t, read["AZURE_CLIENT_ID"], "the variable azidentity reads is recorded in the configuration too")

	d := readDeployment(t)
	var set []string
	values := map[string]string{}
	for _, kv := range d.appEnv(t, map[string]string{"identityClientId": "client-id", "cosmosEndpoint": "https://account/"}) {
		name, value, _ := strings.Cut(kv, "=")
		require.True(t, read[name], "the app sets %s, which the service does not read", name)
		set = append(set, name)
		values[name] = value
	}
	// The service starts on what the default deployment sets: :8080,
	// authentication off by an explicit opt-out (the ingress internal).
	c, err := configFromEnv(func(name string) string { return values[name] })
	require.NoError(t, err, "the default deployment's environment is refused: %v", values)
	require.Equal(t, "none", values["DURAFEED_AUTH"])
	require.Equal(t, ":8080", c.Listen)
	for _, need := range []string{"AZURE_CLIENT_ID", "COSMOS_ENDPOINT", "COSMOS_DATABASE", "COSMOS_CONTAINER"} {
		require.True(t, slices.Contains(set, need), "the app must set %s", need)
	}
	require.NotContains(t, set, "COSMOS_KEY", "the deployment has keys off")

	graceSeconds := fmt.Sprint(int64(defaultGrace.Seconds()))
	for _, f := range []*bicep.File{d.main, d.app} {
		p := f.Param("shutdownGraceSeconds")
		require.NotNil(t, p, f.Path)
		require.Equal(t, graceSeconds, fmt.Sprint(p.Default), "%s: the default grace period is the service's", f.Path)
	}
}

func mustGet(t *testing.T, v bicep.Value, path ...string) bicep.Value {
	t.Helper()
	o, ok := v.(bicep.Object)
	require.True(t, ok, "not an object: %#v", v)
	got, ok := o.Get(path...)
	require.True(t, ok, "no %v", path)
	return got
}

// deployment is what infra/bicep deploys, read from its files.
type deployment struct {
	main, cosmos, app   *bicep.File
	database, container string
}

func readDeployment(t *testing.T) *deployment {
	t.Helper()
	dir := filepath.Join("..", "..", "infra", "bicep")
	d := &deployment{}
	for _, f := range []struct {
		dst  **bicep.File
		path string
	}{{&d.main, "main.bicep"}, {&d.cosmos, "modules/cosmos.bicep"}, {&d.app, "modules/app.bicep"}} {
		file, err := bicep.ReadFile(filepath.Join(dir, f.path))
		require.NoError(t, err)
		*f.dst = file
	}
	d.database = literalString(t, d.main.Param("databaseName").Default)
	d.container = literalString(t, d.main.Param("containerName").Default)
	return d
}

func literalString(t *testing.T, v bicep.Value) string {
	t.Helper()
	s, ok := v.(string)
	require.True(t, ok, "not a literal string: %#v", v)
	return s
}

func oneResource(t *testing.T, f *bicep.File, typ string) *bicep.Resource {
	t.Helper()
	r, err := f.OnlyResourceOfType(typ)
	require.NoError(t, err)
	return r
}

// deployOnEmulator makes on emu what the Bicep's Cosmos DB module makes on
// Azure, read from the module itself: the database, and the container with
// the module's definition (made with the key, as ARM makes it outside the
// data plane); then keys refused, as the account's disableLocalAuth has
// it, and principal holding the module's role on the module's scope.
func deployOnEmulator(t *testing.T, emu *cosmosemu.Server, tenant, principal string) *deployment {
	t.Helper()
	d := readDeployment(t)
	acct := oneResource(t, d.cosmos, "Microsoft.DocumentDB/databaseAccounts")
	require.Equal(t, true, mustGet(t, acct.Body, "properties", "disableLocalAuth"))

	res, ok := mustGet(t, oneResource(t, d.cosmos, "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers").Body,
		"properties", "resource").(bicep.Object)
	require.True(t, ok)
	def := map[string]any{"id": d.container}
	for _, k := range res.Keys {
		if k != "id" {
			v, err := bicep.Literal(res.Values[k])
			require.NoError(t, err)
			def[k] = v
		}
	}
	raw, err := json.Marshal(def)
	require.NoError(t, err)
	var props azcosmos.ContainerProperties
	require.NoError(t, json.Unmarshal(raw, &props))
	key, err := azcosmos.NewKeyCredential(emu.Key())
	require.NoError(t, err)
	client, err := azcosmos.NewClientWithKey(emu.Endpoint(), key, emu.ClientOptions())
	require.NoError(t, err)
	ctx := context.Background()
	_, err = client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: d.database}, nil)
	require.NoError(t, err)
	db, err := client.NewDatabase(d.database)
	require.NoError(t, err)
	_, err = db.CreateContainer(ctx, props, nil)
	require.NoError(t, err)

	ra := oneResource(t, d.cosmos, "Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments")
	scope, ok := mustGet(t, ra.Body, "properties", "scope").(bicep.Expr)
	require.True(t, ok)
	// The scope is the account's resource id followed by the data-plane
	// path; the emulator's scopes are the path alone.
	path := strings.NewReplacer("${account.id}", "", "${database.name}", d.database, "${container.name}", d.container).
		Replace(strings.Trim(scope.Text, "'"))
	require.NotContains(t, path, "${", "a scope the emulator cannot follow: %s", scope.Text)
	role := literalString(t, d.cosmos.Var("dataContributorRoleId").Value)
	emu.SetAuth(&cosmosemu.AuthOptions{DisableLocalAuth: true, TenantID: tenant,
		RoleAssignments: []cosmosemu.RoleAssignment{{PrincipalID: principal, RoleDefinitionID: role, Scope: path}}})
	return d
}

// appEnv returns the environment the Bicep's container app sets, as
// NAME=value lines. A value is a literal, an app parameter that main.bicep
// passes on (its literal, one of its own parameters' defaults, or the
// Cosmos DB module's database and container names), one named in given
// (what Azure decides: the identity's client id, the account endpoint), or
// such a parameter inside an interpolated string. Anything else fails the
// test, which then needs a rule here.
func (d *deployment) appEnv(t *testing.T, given map[string]string) []string {
	t.Helper()
	appModule := d.main.Module("app")
	require.NotNil(t, appModule)
	passed, ok := mustGet(t, appModule.Body, "params").(bicep.Object)
	require.True(t, ok)
	param := func(name string) string {
		if v, ok := given[name]; ok {
			return v
		}
		v, ok := passed.Values[name]
		if !ok {
			p := d.app.Param(name)
			require.NotNil(t, p, "the app module has no parameter %s", name)
			v = p.Default
		}
		switch v := v.(type) {
		case string:
			return v
		case int64:
			return fmt.Sprint(v)
		case bicep.Expr:
			switch {
			case v.Text == "cosmos.outputs.databaseName":
				return d.database
			case v.Text == "cosmos.outputs.containerName":
				return d.container
			case d.main.Param(v.Text) != nil:
				return fmt.Sprint(d.main.Param(v.Text).Default)
			}
		}
		t.Fatalf("no value for the app's parameter %s (%#v)", name, v)
		return ""
	}
	// value is an env value's expression: an app parameter, or the
	// authentication opt-out variable under the default parameters.
	value := func(name string) string {
		if name == "authOptOut" {
			v := d.app.Var(name)
			require.NotNil(t, v)
			require.Equal(t, "(empty(authTenantId) || empty(authAudience)) ? 'none' : ''", v.Value.(bicep.Expr).Text,
				"a new rule here if the opt-out changes")
			if param("authTenantId") == "" || param("authAudience") == "" {
				return "none"
			}
			return ""
		}
		return param(name)
	}
	interpolated := regexp.MustCompile(`^'\$\{(\w+)\}([^$']*)'$`)
	app := oneResource(t, d.app, "Microsoft.App/containerApps")
	containers, ok := mustGet(t, app.Body, "properties", "template", "containers").(bicep.Array)
	require.True(t, ok)
	var env []string
	for _, c := range containers {
		list, ok := mustGet(t, c, "env").(bicep.Array)
		require.True(t, ok)
		for _, e := range list {
			name := literalString(t, mustGet(t, e, "name"))
			var val string
			switch v := mustGet(t, e, "value").(type) {
			case string:
				val = v
			case bicep.Expr:
				if m := interpolated.FindStringSubmatch(v.Text); m != nil {
					val = param(m[1]) + m[2]
				} else {
					val = value(v.Text)
				}
			default:
				t.Fatalf("%s: value %#v", name, v)
			}
			env = append(env, name+"="+val)
		}
	}
	return env
}
