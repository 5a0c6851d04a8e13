package knobs_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/stretchr/testify/require"
)

// chain wraps h in mws the way the emulator does (first = outermost).
func chain(h cosmosemu.Handler, mws []cosmosemu.Middleware) cosmosemu.Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// BenchmarkMiddlewareOverhead measures what the knobs add to one request,
// around a handler that does nothing (so the numbers are pure overhead).
func BenchmarkMiddlewareOverhead(b *testing.B) {
	body := make([]byte, 300)
	httpReq, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1/dbs/db/colls/c/docs/a", nil)
	handler := func(ctx context.Context, req *cosmosemu.Request) *cosmosemu.Response {
		return &cosmosemu.Response{Status: http.StatusOK, Body: body}
	}
	cases := []struct {
		name string
		mws  func(b *testing.B) []cosmosemu.Middleware
	}{
		{"bare", func(*testing.B) []cosmosemu.Middleware { return nil }},
		{"counters", func(*testing.B) []cosmosemu.Middleware {
			return []cosmosemu.Middleware{knobs.NewCounters().Middleware()}
		}},
		{"all-idle", func(b *testing.B) []cosmosemu.Middleware {
			k, err := knobs.New(knobs.Config{})
			require.NoError(b, err)
			return k.Middleware()
		}},
		{"all-charges-budget-rule", func(b *testing.B) []cosmosemu.Middleware {
			k, err := knobs.New(knobs.Config{
				Charges: knobs.DefaultChargeModel(),
				Budget:  knobs.BudgetConfig{DefaultRUPerSecond: 1e15},
				// A rule that matches nothing still gets evaluated.
				Faults: []knobs.FaultRule{{Kind: knobs.FaultUnavailable, Operations: []cosmosemu.OperationType{cosmosemu.OpDelete}}},
			})
			require.NoError(b, err)
			return k.Middleware()
		}},
	}
	for _, tc := range cases {
		h := chain(handler, tc.mws(b))
		b.Run(tc.name, func(b *testing.B) {
			req := &cosmosemu.Request{Operation: cosmosemu.OpRead, ResourceType: cosmosemu.ResourceDocument,
				Database: "db", Container: "c", PartitionKeyRangeIDs: []string{"0"}, HTTP: httpReq}
			b.ReportAllocs()
			for b.Loop() {
				h(context.Background(), req)
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req := &cosmosemu.Request{Operation: cosmosemu.OpRead, ResourceType: cosmosemu.ResourceDocument,
					Database: "db", Container: "c", PartitionKeyRangeIDs: []string{"0"}, HTTP: httpReq}
				for pb.Next() {
					h(context.Background(), req)
				}
			})
		})
	}
}

// BenchmarkSDKPointRead puts the overhead in proportion: a point read
// through the azcosmos SDK and the emulator, with and without the knobs.
func BenchmarkSDKPointRead(b *testing.B) {
	for _, withKnobs := range []bool{false, true} {
		name := "without-knobs"
		if withKnobs {
			name = "with-knobs"
		}
		b.Run(name, func(b *testing.B) {
			var e *env
			if withKnobs {
				e = newEnv(b, envOptions{cfg: knobs.Config{Charges: knobs.DefaultChargeModel(), Budget: knobs.BudgetConfig{DefaultRUPerSecond: 1e15}}})
			} else {
				e = newEnvWithout(b)
			}
			_, err := e.create(b, "a")
			require.NoError(b, err)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.read("a"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
