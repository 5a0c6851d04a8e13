package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/durafeed/durafeed/durable"
)

// apiError is an error answer's body, {"error": {...}}, and its status.
type apiError struct {
	status  int
	Code    string `json:"code"`
	Message string `json:"message"`
	// Limit is the limit a too-large request went over, in bytes.
	Limit int `json:"limit,omitempty"`
}

func badRequest(code, format string, args ...any) apiError {
	return apiError{status: http.StatusBadRequest, Code: code, Message: fmt.Sprintf(format, args...)}
}

func notFound(id string) apiError {
	return apiError{status: http.StatusNotFound, Code: "instance_not_found",
		Message: fmt.Sprintf("instance %q not found (an instance becomes visible once its first turn has run)", id)}
}

// bodyError maps a body read or decode failure.
func bodyError(err error) *apiError {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return &apiError{status: http.StatusRequestEntityTooLarge, Code: "body_too_large",
			Message: fmt.Sprintf("the request body is over the limit of %d bytes", tooLarge.Limit), Limit: int(tooLarge.Limit)}
	}
	return &apiError{status: http.StatusBadRequest, Code: "bad_json", Message: "the body is not valid JSON of the expected shape: " + err.Error()}
}

// providerError maps an error of the client or provider: permanent ones
// are the request's fault (400: nothing was written), retryable ones the
// store's moment (503).
func providerError(err error) apiError {
	switch {
	case errors.Is(err, durable.ErrRequestReused):
		return keyReused()
	case errors.Is(err, durable.ErrTooLarge):
		return apiError{status: http.StatusBadRequest, Code: "input_too_large", Message: err.Error()}
	case errors.Is(err, durable.ErrPermanent):
		return apiError{status: http.StatusBadRequest, Code: "rejected", Message: err.Error()}
	case durable.IsRetryable(err):
		return apiError{status: http.StatusServiceUnavailable, Code: "unavailable", Message: err.Error()}
	default:
		return apiError{status: http.StatusInternalServerError, Code: "internal", Message: err.Error()}
	}
}

func writeError(w http.ResponseWriter, e apiError) {
	if e.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.status, struct {
		Error apiError `json:"error"`
	}{e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"encoding the answer failed"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
