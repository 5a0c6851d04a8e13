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
	require.Equal(t, "keyboard: shipped, tracking TRK-keyboard\n"+
		"monitor: backordered (monitor is out of stock)\n"+
		"mouse: shipped, tracking TRK-mouse\n"+
		"child instance <order>/mouse: Completed, parent <order>\n", out.String())
}
