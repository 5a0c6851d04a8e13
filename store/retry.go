package store

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/cenkalti/backoff/v4"
)

// retryPolicy bounds the retries of one Cosmos DB call. The SDK already
// retries 429 itself; this layer adds bounded retries for the other
// transient statuses and for transport failures, honouring the service's
// x-ms-retry-after-ms hint.
type retryPolicy struct {
	initial  time.Duration
	max      time.Duration
	attempts int
}

var defaultRetry = retryPolicy{initial: 50 * time.Millisecond, max: 2 * time.Second, attempts: 5}

// retryAfter extracts the service's retry hint, if any.
func retryAfter(err error) time.Duration {
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.RawResponse == nil {
		return 0
	}
	v := re.RawResponse.Header.Get("x-ms-retry-after-ms")
	if v == "" {
		return 0
	}
	ms, perr := strconv.ParseFloat(v, 64)
	if perr != nil || ms < 0 {
		return 0
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// do runs f until it succeeds, fails with a non-retryable error, runs out of
// attempts, or ctx ends. safe says whether f may be repeated after a
// transport failure whose outcome is unknown (reads, idempotent writes).
func (p retryPolicy) do(ctx context.Context, safe bool, f func() error) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = p.initial
	b.MaxInterval = p.max
	b.MaxElapsedTime = 0
	b.Reset()
	var err error
	for attempt := 1; ; attempt++ {
		err = f()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || attempt >= p.attempts || !shouldRetry(err, safe) {
			return err
		}
		wait := b.NextBackOff()
		if ra := retryAfter(err); ra > wait {
			wait = ra
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

func shouldRetry(err error, safe bool) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	s := statusOf(err)
	if s == 0 {
		return safe
	}
	return retryableStatus(s)
}
