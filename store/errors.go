package store

import (
	"context"
	"errors"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/durafeed/durafeed/durable"
)

// statusOf returns the HTTP status of a Cosmos DB error, or 0 when err does
// not carry one (transport failures, cancellation).
func statusOf(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	var be *batchError
	if errors.As(err, &be) {
		return be.status
	}
	return 0
}

// isStatus reports whether err is a Cosmos DB error with the status.
func isStatus(err error, status int) bool { return statusOf(err) == status }

// retryableStatus classifies a status by itself: throttling, timeouts,
// transient unavailability and routing refreshes are worth retrying.
func retryableStatus(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, 449,
		http.StatusServiceUnavailable, http.StatusGone, http.StatusInternalServerError:
		return true
	}
	return false
}

// refusedStatus reports a status the service answers before acting on a
// request (throttled, routed to a partition that moved, asked to retry):
// resending any write is harmless.
func refusedStatus(status int) bool {
	switch status {
	case http.StatusTooManyRequests, 449, http.StatusGone:
		return true
	}
	return false
}

// unknownOutcome reports an error after which a write may or may not have
// been applied: a transport failure (a dropped or reset connection), a
// request timeout or a server error. The official SDKs resend no write
// then (nor does this package, unless repeating it is harmless); a caller
// that must know reads back what committed.
func unknownOutcome(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var be *batchError
	if errors.As(err, &be) {
		return false // the batch was answered: it failed as a whole
	}
	s := statusOf(err)
	return s == 0 || unknownStatus(s)
}

// unknownStatus reports a status after which the request may or may not
// have been applied: a timeout or a server error.
func unknownStatus(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// mapErr converts an error from a Cosmos DB call into a *durable.ProviderError.
// 409 and 412 have no meaning without context: callers that know what a
// conflict means (a lost race, a duplicate event) handle them before calling
// mapErr, which classifies what is left as retryable (an optimistic race).
func mapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var pe *durable.ProviderError
	if errors.As(err, &pe) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return durable.Retryable(op, err, "cancelled")
	}
	status := statusOf(err)
	switch {
	case status == 0:
		// Transport failure: the request may or may not have been applied;
		// every caller either is idempotent or checks before retrying.
		return durable.Retryable(op, err, "cosmos request failed")
	case retryableStatus(status):
		return durable.Retryable(op, err, "cosmos status %d", status)
	case status == http.StatusConflict, status == http.StatusPreconditionFailed:
		return durable.Retryable(op, err, "concurrent update (status %d)", status)
	case status == http.StatusBadRequest, status == http.StatusNotFound,
		status == http.StatusRequestEntityTooLarge, status == http.StatusUnauthorized,
		status == http.StatusForbidden:
		return durable.Permanent(op, err, "cosmos status %d", status)
	}
	return durable.Permanent(op, err, "cosmos status %d", status)
}

// batchError reports a transactional batch that the service rejected as a
// whole: status is the failing operation's status (not 424) and index its
// position in the batch.
type batchError struct {
	status int
	index  int
}

func (e *batchError) Error() string {
	return "transactional batch failed: operation " + itoa(e.index) + " returned status " + itoa(e.status)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	neg := n < 0
	if neg {
		n = -n
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}
