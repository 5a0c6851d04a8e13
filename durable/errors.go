package durable

import (
	"errors"
	"fmt"

	"github.com/durafeed/durafeed/durable/history"
)

// Sentinels for errors.Is on a *ProviderError: every provider error matches
// exactly one of ErrRetryable and ErrPermanent.
var (
	// ErrRetryable matches provider errors that may succeed if retried
	// (throttling, timeouts, transient unavailability, lost optimistic races).
	ErrRetryable = errors.New("retryable provider error")
	// ErrPermanent matches provider errors that will fail again (invalid or
	// expired lock tokens, duplicates, invalid input, corrupt data).
	ErrPermanent = errors.New("permanent provider error")
	// ErrRequestReused matches the permanent error of a client call whose
	// request id the provider has recorded on the instance for a
	// different call (another kind, or other arguments): nothing was
	// enqueued.
	ErrRequestReused = errors.New("request id already used for a different call")
	// ErrTooLarge matches the permanent error of a work item, history
	// event or turn whose documents exceed what the provider can write
	// (a document or a transactional batch over its limit): nothing was
	// written, and the same call fails again. The message names the size
	// and the limit, never the payload.
	ErrTooLarge = errors.New("too large for the store")
)

// ProviderError is the error every provider method returns. The runtime
// retries retryable errors with backoff and treats permanent ones as final.
// It wraps its cause, so errors.Is/As see through it (for example to
// context.Canceled).
type ProviderError struct {
	// Operation is the provider method or step that failed.
	Operation string
	// Message describes the failure; it never contains secrets or payloads.
	Message string
	// Retryable classifies the failure.
	Retryable bool
	// Cause is the underlying error, if any.
	Cause error
}

// Error implements error as "operation: message[: cause]".
func (e *ProviderError) Error() string {
	s := e.Operation + ": " + e.Message
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *ProviderError) Unwrap() error { return e.Cause }

// Is matches ErrRetryable or ErrPermanent according to the classification.
func (e *ProviderError) Is(target error) bool {
	switch target {
	case ErrRetryable:
		return e.Retryable
	case ErrPermanent:
		return !e.Retryable
	}
	return false
}

// InfrastructureDetails converts the error into the history's structured
// failure description.
func (e *ProviderError) InfrastructureDetails() history.ErrorDetails {
	return history.InfrastructureError(e.Operation, e.Message, e.Retryable)
}

// Retryable returns a retryable *ProviderError for operation, wrapping cause
// (which may be nil).
func Retryable(operation string, cause error, format string, args ...any) *ProviderError {
	return &ProviderError{Operation: operation, Message: fmt.Sprintf(format, args...), Retryable: true, Cause: cause}
}

// Permanent returns a permanent *ProviderError for operation, wrapping cause
// (which may be nil).
func Permanent(operation string, cause error, format string, args ...any) *ProviderError {
	return &ProviderError{Operation: operation, Message: fmt.Sprintf(format, args...), Retryable: false, Cause: cause}
}

// IsRetryable reports whether err is, or wraps, a retryable *ProviderError.
func IsRetryable(err error) bool { return errors.Is(err, ErrRetryable) }
