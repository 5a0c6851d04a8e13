package store

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/cenkalti/backoff/v4"
)

// retryPolicy bounds the retries of one Cosmos DB call: it is the only
// layer that resends a write whose outcome is unknown (the SDK's generic
// retries stop short of that; see sdkShouldRetry), and it does so only
// when repeating it is harmless. It honours the service's x-ms-retry-after-ms
// hint.
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

// sdkShouldRetry is the SDK client's retry predicate: its generic retry
// layer resends what the service refused before acting on it (429 with
// its retry-after hint, 449, 410), and a read (GET: point reads, change
// feed pages, lease reads) whose answer was lost. A write whose outcome is
// unknown (a transport failure, a timeout, a server error) is left to the
// SDK's Cosmos policy (which resends a write only when it was never sent)
// and to retryPolicy (which knows whether repeating the call is harmless):
// the SDK would otherwise resend a create whose answer was lost after it
// committed, for instance after an HTTP/2 stream reset.
func sdkShouldRetry(resp *http.Response, err error) bool {
	if err != nil {
		var ue *url.Error // net/http names the request's method in Op ("Get")
		return errors.As(err, &ue) && strings.EqualFold(ue.Op, http.MethodGet)
	}
	if resp == nil {
		return false
	}
	return refusedStatus(resp.StatusCode) ||
		(unknownStatus(resp.StatusCode) && resp.Request != nil && resp.Request.Method == http.MethodGet)
}

// shouldRetry: a request the service refused before acting on it is
// always resent; one whose outcome is unknown only when safe.
func shouldRetry(err error, safe bool) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if unknownOutcome(err) {
		return safe
	}
	return refusedStatus(statusOf(err))
}
