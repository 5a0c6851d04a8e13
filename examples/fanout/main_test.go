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
	// Document i has 2i words: 2·(1+…+20) = 420.
	require.Equal(t, "counted 20 documents in parallel: first doc-01=2, last doc-20=40, total 420 words\n", out.String())
}
