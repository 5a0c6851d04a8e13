package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

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

	dir := filepath.Join("..", "..", "infra", "bicep")
	app, err := bicep.ReadFile(filepath.Join(dir, "modules", "app.bicep"))
	require.NoError(t, err)
	apps := app.ResourcesOfType("Microsoft.App/containerApps")
	require.Len(t, apps, 1)
	containers, ok := mustGet(t, apps[0].Body, "properties", "template", "containers").(bicep.Array)
	require.True(t, ok)
	var set []string
	for _, c := range containers {
		env, ok := mustGet(t, c, "env").(bicep.Array)
		require.True(t, ok)
		for _, e := range env {
			name, ok := mustGet(t, e, "name").(string)
			require.True(t, ok, "an environment variable's name is a literal")
			require.True(t, read[name], "the app sets %s, which the service does not read", name)
			set = append(set, name)
		}
	}
	for _, need := range []string{"AZURE_CLIENT_ID", "COSMOS_ENDPOINT", "COSMOS_DATABASE", "COSMOS_CONTAINER"} {
		require.True(t, slices.Contains(set, need), "the app must set %s", need)
	}
	require.NotContains(t, set, "COSMOS_KEY", "the deployment has keys off")

	graceSeconds := fmt.Sprint(int64(defaultGrace.Seconds()))
	for _, f := range []string{filepath.Join(dir, "main.bicep"), filepath.Join(dir, "modules", "app.bicep")} {
		file, err := bicep.ReadFile(f)
		require.NoError(t, err)
		p := file.Param("shutdownGraceSeconds")
		require.NotNil(t, p, f)
		require.Equal(t, graceSeconds, fmt.Sprint(p.Default), "%s: the default grace period is the service's", f)
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
