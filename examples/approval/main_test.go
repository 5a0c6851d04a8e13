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
	require.Equal(t, "expense of 120 EUR: approved by manager, reimbursed 120 EUR\n"+
		"expense of 80 EUR: no decision within 1s, escalated to finance\n", out.String())
}
