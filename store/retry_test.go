package store

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSDKShouldRetry: the SDK's generic retries resend what the service
// refused and reads whose answer was lost, never a write whose outcome is
// unknown.
func TestSDKShouldRetry(t *testing.T) {
	answer := func(method string, status int) *http.Response {
		return &http.Response{StatusCode: status, Request: &http.Request{Method: method}}
	}
	lost := func(method string) error {
		return &url.Error{Op: method, URL: "https://account/docs", Err: io.ErrUnexpectedEOF}
	}
	for _, tc := range []struct {
		name  string
		resp  *http.Response
		err   error
		retry bool
	}{
		{"throttled write", answer(http.MethodPost, http.StatusTooManyRequests), nil, true},
		{"partition gone", answer(http.MethodPatch, http.StatusGone), nil, true},
		{"retry-with", answer(http.MethodPut, 449), nil, true},
		{"read timed out", answer(http.MethodGet, http.StatusRequestTimeout), nil, true},
		{"read unavailable", answer(http.MethodGet, http.StatusServiceUnavailable), nil, true},
		{"write timed out", answer(http.MethodPost, http.StatusRequestTimeout), nil, false},
		{"write unavailable", answer(http.MethodPatch, http.StatusServiceUnavailable), nil, false},
		{"write server error", answer(http.MethodPut, http.StatusInternalServerError), nil, false},
		{"conflict", answer(http.MethodPost, http.StatusConflict), nil, false},
		{"read connection lost", nil, lost("Get"), true},
		{"create connection lost", nil, lost("Post"), false},
		{"patch connection lost", nil, lost("Patch"), false},
		{"other error", nil, errors.New("boom"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.retry, sdkShouldRetry(tc.resp, tc.err))
		})
	}
}
