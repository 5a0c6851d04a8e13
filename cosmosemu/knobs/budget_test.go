package knobs_test

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The budget throttles a container that spends more than its RU/s, with the
// service's 429 shape, without executing or charging the request, and
// recovers after the advertised wait.
func TestBudgetThrottlesAndRecovers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: knobs.Config{Charges: knobs.DefaultChargeModel()}})
	require.NoError(t, e.k.Budget().SetContainer("db", "c", 10)) // two 5 RU creates per second

	var throttledAt int
	var retryAfter time.Duration
	for i := range 50 {
		_, err := e.create(t, fmt.Sprint("item", i))
		if err == nil {
			continue
		}
		re := responseError(t, err)
		require.Equal(t, http.StatusTooManyRequests, re.StatusCode)
		assert.Equal(t, "3200", re.RawResponse.Header.Get("x-ms-substatus"))
		assert.Equal(t, "0.00", re.RawResponse.Header.Get("x-ms-request-charge"))
		ms, err := strconv.Atoi(re.RawResponse.Header.Get("x-ms-retry-after-ms"))
		require.NoError(t, err)
		require.Positive(t, ms)
		retryAfter = time.Duration(ms) * time.Millisecond
		throttledAt = i
		break
	}
	require.NotZero(t, throttledAt, "the budget never throttled")
	// The balance admits requests while positive: a full 10 RU bucket
	// admits at least two 5 RU creates (a third once refill makes the
	// balance positive again).
	assert.GreaterOrEqual(t, throttledAt, 2)
	assert.Equal(t, int64(1), e.k.Budget().Throttled())

	// Waiting as advised is enough: the balance is positive again.
	time.Sleep(retryAfter)
	_, err := e.create(t, "after-wait")
	require.NoError(t, err, "recovered after the advertised wait")

	// The throttled create did not run (budget lifted to read freely).
	require.NoError(t, e.k.Budget().SetContainer("db", "c", 0))
	_, ok := e.k.Budget().Balance("db", "c")
	assert.False(t, ok, "unbudgeted")
	_, err = e.read(fmt.Sprint("item", throttledAt))
	assert.Equal(t, http.StatusNotFound, statusOf(err))

	snap := e.k.Counters().Snapshot()
	assert.Equal(t, int64(1), snap.ByContainer["db/c"].Throttled)
	assert.Equal(t, int64(1), snap.ByOperation[cosmosemu.OpCreate].Throttled)

	// Containers without a budget have no balance.
	_, ok = e.k.Budget().Balance("db", "other")
	assert.False(t, ok)
	assert.Equal(t, int64(1), e.k.Budget().Throttled())
}

// With the SDK's own retry policy, throttles are absorbed: every request
// eventually succeeds and the budget counts the throttles.
func TestBudgetWithSDKRetries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{sdkRetries: true, cfg: knobs.Config{
		Charges: knobs.DefaultChargeModel(),
		Budget:  knobs.BudgetConfig{DefaultRUPerSecond: 100},
	}})
	for i := range 30 { // 150 RU at 100 RU/s
		_, err := e.create(t, fmt.Sprint("item", i))
		require.NoError(t, err)
	}
	assert.Positive(t, e.k.Budget().Throttled())
	assert.Equal(t, e.k.Budget().Throttled(), e.k.Counters().Snapshot().Total.Throttled)
	st := e.k.Budget().Config()
	assert.Equal(t, 100.0, st.DefaultRUPerSecond)
}

func TestBudgetConfig(t *testing.T) {
	t.Parallel()
	b, err := knobs.NewBudget(knobs.BudgetConfig{DefaultRUPerSecond: 400, Containers: map[string]float64{"db/c": 0}})
	require.NoError(t, err)
	_, ok := b.Balance("db", "c")
	assert.False(t, ok, "0 overrides the default: unlimited")
	bal, ok := b.Balance("db", "d")
	assert.True(t, ok)
	assert.Equal(t, 400.0, bal, "a bucket starts full")
	require.NoError(t, b.SetDefault(100))
	bal, _ = b.Balance("db", "d")
	assert.Equal(t, 100.0, bal, "capped at the new capacity")
	_, err = knobs.NewBudget(knobs.BudgetConfig{Containers: map[string]float64{"nodb": 1}})
	assert.Error(t, err)
}
