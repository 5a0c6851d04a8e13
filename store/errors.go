package store

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

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

// subStatusOwnerNotFound is the sub-status of a 404 that the service
// answers for an operation on documents when their container (or its
// database) does not exist, as opposed to a missing document.
const subStatusOwnerNotFound = "1003"

// ownerMissing reports a 404 for a missing container or database (not a
// missing document): every call on the container fails until it is
// created again, so this is never "not found".
func ownerMissing(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound && re.RawResponse != nil &&
		re.RawResponse.Header.Get("x-ms-substatus") == subStatusOwnerNotFound
}

// itemMissing reports a 404 for a missing document.
func itemMissing(err error) bool { return isStatus(err, http.StatusNotFound) && !ownerMissing(err) }

// ownerWatch is a request policy of the store's client that records
// whether the container was missing (404/1003) at the latest answer to a
// request on its documents, for the dispatchers whose waits do no
// request of their own (Store.ContainerGone). Every package sharing
// the client (leasestore, changefeed) feeds it.
type ownerWatch struct{ missing *atomic.Bool }

func (w ownerWatch) Do(req *policy.Request) (*http.Response, error) {
	resp, err := req.Next()
	path := req.Raw().URL.Path
	if err == nil && resp != nil && (strings.Contains(path, "/docs") || strings.Contains(path, "/pkranges")) {
		switch {
		case resp.StatusCode == http.StatusNotFound && resp.Header.Get("x-ms-substatus") == subStatusOwnerNotFound:
			w.missing.Store(true)
		case resp.StatusCode < http.StatusInternalServerError:
			w.missing.Store(false) // any other answer about documents: the container exists
		}
	}
	return resp, err
}

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
	if ownerMissing(err) {
		return durable.Permanent(op, err, "the container (or its database) does not exist: deleted, or not deployed")
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
	case status == http.StatusRequestEntityTooLarge:
		return durable.Permanent(op, fmt.Errorf("%w: %w", durable.ErrTooLarge, err), "cosmos status 413: a document or batch over the service's 2 MB limit")
	case status == http.StatusBadRequest, status == http.StatusNotFound,
		status == http.StatusUnauthorized, status == http.StatusForbidden:
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
