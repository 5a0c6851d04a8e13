package changefeed

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/cenkalti/backoff/v4"
)

// transient reports whether err is worth retrying soon: throttling (429),
// timeouts (408), 410 Gone (splits, stale caches), 449, 5xx, transport
// failures, a feed range the routing map cannot resolve yet, and anything
// else that is not a service answer. A client error answered by the service
// (400, 401, 403, 404, 413, ...) is permanent: the reader still retries
// it, at the longest pause, and logs it as an error.
func transient(err error) bool {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		switch re.StatusCode {
		case http.StatusTooManyRequests, http.StatusRequestTimeout, http.StatusGone, 449:
			return true
		}
		return re.StatusCode >= 500 || re.StatusCode < 400
	}
	return true
}

// retryAfter returns the service's x-ms-retry-after-ms of a throttled
// answer.
func retryAfter(err error) (time.Duration, bool) {
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.RawResponse == nil {
		return 0, false
	}
	v := re.RawResponse.Header.Get("x-ms-retry-after-ms")
	if v == "" {
		return 0, false
	}
	ms, perr := strconv.ParseFloat(v, 64)
	if perr != nil || ms < 0 {
		return 0, false
	}
	return time.Duration(ms * float64(time.Millisecond)), true
}

// retryDelay is the service's retry-after when it gave one, otherwise the
// next exponential backoff step; permanent errors wait the maximum.
func retryDelay(err error, bo *backoff.ExponentialBackOff) time.Duration {
	if d, ok := retryAfter(err); ok {
		return d
	}
	if !transient(err) {
		return bo.MaxInterval
	}
	return bo.NextBackOff()
}
