package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRun(t *testing.T) {
	t.Setenv("COSMOS_ENDPOINT", "") // always the embedded emulator
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out))
	require.Equal(t, "Completed: Hello, World!\n", out.String())
}
