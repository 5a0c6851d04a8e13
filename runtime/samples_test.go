package runtime_test

import (
	"testing"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/internal/memprovider"
	"github.com/durafeed/durafeed/runtime/runtimetest"
)

// memFactory opens handles on a fresh memprovider store.
func memFactory(testing.TB) func() durable.Provider { return memprovider.NewStore().Open }

func TestSamples(t *testing.T) {
	t.Parallel()
	runtimetest.RunSamples(t, memFactory)
}
