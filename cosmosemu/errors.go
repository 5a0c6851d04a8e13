package cosmosemu

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Sub-status codes the service attaches to some answers (x-ms-substatus).
const (
	subStatusNone                       = 0
	subStatusPartitionKeyRangeGone      = 1002
	subStatusOwnerResourceNotFound      = 1003
	subStatusCrossPartitionNotServable  = 1004
	subStatusPartitionKeyMismatch       = 1001
	subStatusInvalidContinuation        = 0
	subStatusWrongPartitionKeyComponent = 0
)

// Service messages, worded as the service words them.
const (
	msgNotFound            = "Resource Not Found. Learn more: https://aka.ms/cosmosdb-tsg-not-found"
	msgConflict            = "Entity with the specified id already exists in the system."
	msgPreconditionFailed  = "One of the specified pre-condition is not met. Learn more: https://aka.ms/CosmosDB/sql/errors/precondition-failed"
	msgTooLarge            = "Request size is too large"
	msgPKMismatch          = "PartitionKey extracted from document doesn't match the one specified in the header. Learn more: https://aka.ms/CosmosDB/sql/errors/wrong-pk-value"
	msgPKMissing           = "PartitionKey value must be supplied for this operation."
	msgMissingID           = "The input content is invalid because the required properties - 'id; ' - are missing"
	msgBatchTooMany        = "Batch request has more operations than what is supported."
	msgBatchEmpty          = "The batch request did not have any operations to be executed."
	msgCrossPartitionQuery = "The provided cross partition query can not be directly served by the gateway. This is a first chance (internal) exception that all newer clients will know how to handle gracefully. This exception is traced, but unless you see it bubble up as an exception (which only happens on older SDK clients), then you can safely ignore this message."
	msgCrossPartitionOff   = "Cross partition query is required but disabled. Please set x-ms-documentdb-query-enablecrosspartition to true, specify x-ms-documentdb-partitionkey, or revise your query to avoid this exception."
	msgAuthMissing         = "Required Header authorization is missing. Ensure a valid Authorization token is passed."
)

// apiError is an error that maps to one service answer.
type apiError struct {
	status int
	sub    int
	code   string
	msg    string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.status, e.code, e.msg)
}

// codeFor gives the service's error code name for an HTTP status.
func codeFor(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "BadRequest"
	case http.StatusUnauthorized:
		return "Unauthorized"
	case http.StatusForbidden:
		return "Forbidden"
	case http.StatusNotFound:
		return "NotFound"
	case http.StatusMethodNotAllowed:
		return "MethodNotAllowed"
	case http.StatusRequestTimeout:
		return "RequestTimeout"
	case http.StatusConflict:
		return "Conflict"
	case http.StatusGone:
		return "Gone"
	case http.StatusPreconditionFailed:
		return "PreconditionFailed"
	case http.StatusRequestEntityTooLarge:
		return "RequestEntityTooLarge"
	case http.StatusTooManyRequests:
		return "TooManyRequests"
	case http.StatusFailedDependency:
		return "FailedDependency"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailable"
	default:
		return "InternalServerError"
	}
}

func newErr(status int, msg string) *apiError {
	return &apiError{status: status, code: codeFor(status), msg: msg}
}

func newErrSub(status, sub int, msg string) *apiError {
	return &apiError{status: status, sub: sub, code: codeFor(status), msg: msg}
}

func errBadRequest(format string, args ...any) *apiError {
	return newErr(http.StatusBadRequest, fmt.Sprintf(format, args...))
}

func errNotFound() *apiError { return newErr(http.StatusNotFound, msgNotFound) }

// errOwnerNotFound answers an operation on a container's documents (or
// its partition key ranges) when the container or its database does not
// exist: 404 with sub-status 1003, as the service tells a missing owner
// resource from a missing document.
func errOwnerNotFound() *apiError {
	return newErrSub(http.StatusNotFound, subStatusOwnerResourceNotFound, msgNotFound)
}
func errConflict() *apiError { return newErr(http.StatusConflict, msgConflict) }
func errPrecondition() *apiError {
	return newErr(http.StatusPreconditionFailed, msgPreconditionFailed)
}
func errTooLarge() *apiError { return newErr(http.StatusRequestEntityTooLarge, msgTooLarge) }

// errorBody renders the JSON body the gateway sends with an error: the
// message embeds the backend's {"Errors":[...]} envelope and the activity id.
func errorBody(e *apiError, activityID string) []byte {
	inner, _ := json.Marshal(struct {
		Errors []string `json:"Errors"`
	}{Errors: []string{e.msg}})
	msg := "Message: " + string(inner) + "\r\nActivityId: " + activityID + ", Microsoft.Azure.Documents.Common/2.14.0"
	b, _ := json.Marshal(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{Code: e.code, Message: msg})
	return b
}
