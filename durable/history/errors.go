package history

import (
	"encoding/json"
	"fmt"
)

// ErrorCategory classifies an orchestration or activity failure.
type ErrorCategory string

// The failure categories. Only application errors reach orchestration code;
// the others abort the turn or the instance.
const (
	// CategoryInfrastructure is a provider failure or data corruption.
	CategoryInfrastructure ErrorCategory = "infrastructure"
	// CategoryConfiguration is a deployment problem: an unregistered
	// orchestration or activity, or code that no longer matches its history.
	CategoryConfiguration ErrorCategory = "configuration"
	// CategoryApplication is a business-logic failure returned or raised by
	// user code.
	CategoryApplication ErrorCategory = "application"
	// CategoryPoison is a message that exceeded its maximum fetch attempts.
	CategoryPoison ErrorCategory = "poison"
)

// ConfigErrorKind refines CategoryConfiguration.
type ConfigErrorKind string

// Configuration error kinds.
const (
	// ConfigNondeterminism: the orchestration code made different decisions
	// than its recorded history.
	ConfigNondeterminism ConfigErrorKind = "nondeterminism"
	// ConfigUnregistered: no orchestration or activity is registered under
	// the requested name and version.
	ConfigUnregistered ConfigErrorKind = "unregistered"
	// ConfigBadInput: an input or payload could not be decoded into the
	// handler's declared type.
	ConfigBadInput ConfigErrorKind = "bad_input"
)

// AppErrorKind refines CategoryApplication.
type AppErrorKind string

// Application error kinds.
const (
	// AppActivityFailed: an activity returned an error.
	AppActivityFailed AppErrorKind = "activity_failed"
	// AppOrchestrationFailed: an orchestration returned an error.
	AppOrchestrationFailed AppErrorKind = "orchestration_failed"
	// AppPanicked: user code panicked.
	AppPanicked AppErrorKind = "panicked"
	// AppCancelled: the work was cancelled; Reason says why.
	AppCancelled AppErrorKind = "cancelled"
)

// PoisonMessageType says what kind of message was poisoned.
type PoisonMessageType string

// Poison message types.
const (
	// PoisonOrchestration: an orchestration turn's message batch.
	PoisonOrchestration PoisonMessageType = "orchestration"
	// PoisonActivity: an activity execution.
	PoisonActivity PoisonMessageType = "activity"
	// PoisonFailedDeserialization: the instance's stored history could not
	// be decoded (for example events written by a newer runtime).
	PoisonFailedDeserialization PoisonMessageType = "failed_deserialization"
)

// PoisonDetails describes a poisoned message.
type PoisonDetails struct {
	// AttemptCount is how many times the message was fetched.
	AttemptCount uint32 `json:"attempt_count"`
	// MaxAttempts is the limit that was exceeded.
	MaxAttempts uint32 `json:"max_attempts"`
	// Type identifies the message kind.
	Type PoisonMessageType `json:"message_type"`
	// Instance and ExecutionID identify the orchestration.
	Instance    string `json:"instance"`
	ExecutionID uint64 `json:"execution_id"`
	// ActivityName and ActivityID identify the activity (PoisonActivity only).
	ActivityName string `json:"activity_name,omitempty"`
	ActivityID   uint64 `json:"activity_id,omitempty"`
	// DecodeError is the history decoding error (PoisonFailedDeserialization only).
	DecodeError string `json:"decode_error,omitempty"`
	// Message is the poisoned message's serialized content, for debugging.
	Message string `json:"message,omitempty"`
}

// ErrorDetails is the structured description of a failed activity,
// sub-orchestration or orchestration. It is part of the durable history, so
// its JSON form is stable. It implements error with DisplayMessage.
//
// Which fields are meaningful depends on Category: Operation for
// infrastructure; Kind and Resource for configuration; Kind, Reason for
// application (Reason for AppCancelled); Poison for poison. Message and
// Retryable apply to all but poison.
type ErrorDetails struct {
	Category  ErrorCategory  `json:"category"`
	Kind      string         `json:"kind,omitempty"`
	Operation string         `json:"operation,omitempty"`
	Resource  string         `json:"resource,omitempty"`
	Message   string         `json:"message,omitempty"`
	Reason    string         `json:"reason,omitempty"`
	Retryable bool           `json:"retryable,omitempty"`
	Poison    *PoisonDetails `json:"poison,omitempty"`
}

// InfrastructureError describes a provider failure in operation.
func InfrastructureError(operation, message string, retryable bool) ErrorDetails {
	return ErrorDetails{Category: CategoryInfrastructure, Operation: operation, Message: message, Retryable: retryable}
}

// ConfigurationError describes a deployment problem concerning resource
// (an orchestration or activity name).
func ConfigurationError(kind ConfigErrorKind, resource, message string) ErrorDetails {
	return ErrorDetails{Category: CategoryConfiguration, Kind: string(kind), Resource: resource, Message: message}
}

// ApplicationError describes a failure of user code.
func ApplicationError(kind AppErrorKind, message string, retryable bool) ErrorDetails {
	return ErrorDetails{Category: CategoryApplication, Kind: string(kind), Message: message, Retryable: retryable}
}

// CancelledError describes cancellation for the given reason.
func CancelledError(reason string) ErrorDetails {
	return ErrorDetails{Category: CategoryApplication, Kind: string(AppCancelled), Reason: reason}
}

// PoisonError describes a poisoned message.
func PoisonError(p PoisonDetails) ErrorDetails {
	return ErrorDetails{Category: CategoryPoison, Poison: &p}
}

// IsRetryable reports whether retrying the failed work could succeed.
// Configuration and poison failures never are.
func (d ErrorDetails) IsRetryable() bool {
	switch d.Category {
	case CategoryInfrastructure, CategoryApplication:
		return d.Retryable
	default:
		return false
	}
}

// DisplayMessage renders the failure for logs and status displays.
func (d ErrorDetails) DisplayMessage() string {
	switch d.Category {
	case CategoryInfrastructure:
		return fmt.Sprintf("infrastructure:%s: %s", d.Operation, d.Message)
	case CategoryConfiguration:
		switch ConfigErrorKind(d.Kind) {
		case ConfigNondeterminism:
			if d.Message != "" {
				return "nondeterministic: " + d.Message
			}
			return "nondeterministic in " + d.Resource
		case ConfigUnregistered:
			return "unregistered: " + d.Resource
		default:
			return fmt.Sprintf("configuration:%s: %s", d.Resource, d.Message)
		}
	case CategoryApplication:
		switch AppErrorKind(d.Kind) {
		case AppCancelled:
			return "canceled: " + d.Reason
		case AppPanicked:
			return "panicked: " + d.Message
		default:
			return d.Message
		}
	case CategoryPoison:
		if d.Poison == nil {
			return "poison"
		}
		p := d.Poison
		switch p.Type {
		case PoisonActivity:
			return fmt.Sprintf("poison: activity %s#%d exceeded %d attempts (max %d)", p.ActivityName, p.ActivityID, p.AttemptCount, p.MaxAttempts)
		case PoisonFailedDeserialization:
			return fmt.Sprintf("poison: orchestration %s history deserialization failed after %d attempts (max %d): %s", p.Instance, p.AttemptCount, p.MaxAttempts, p.DecodeError)
		default:
			return fmt.Sprintf("poison: orchestration %s exceeded %d attempts (max %d)", p.Instance, p.AttemptCount, p.MaxAttempts)
		}
	default:
		return d.Message
	}
}

// Error implements error.
func (d ErrorDetails) Error() string { return d.DisplayMessage() }

// Validate reports whether d is well formed: a known category, a kind that
// belongs to it, and poison details exactly for poison failures.
func (d ErrorDetails) Validate() error {
	switch d.Category {
	case CategoryInfrastructure:
		if d.Kind != "" {
			return fmt.Errorf("infrastructure error has kind %q", d.Kind)
		}
	case CategoryConfiguration:
		switch ConfigErrorKind(d.Kind) {
		case ConfigNondeterminism, ConfigUnregistered, ConfigBadInput:
		default:
			return fmt.Errorf("unknown configuration error kind %q", d.Kind)
		}
	case CategoryApplication:
		switch AppErrorKind(d.Kind) {
		case AppActivityFailed, AppOrchestrationFailed, AppPanicked, AppCancelled:
		default:
			return fmt.Errorf("unknown application error kind %q", d.Kind)
		}
	case CategoryPoison:
		if d.Poison == nil {
			return fmt.Errorf("poison error without poison details")
		}
		switch d.Poison.Type {
		case PoisonOrchestration, PoisonActivity, PoisonFailedDeserialization:
		default:
			return fmt.Errorf("unknown poison message type %q", d.Poison.Type)
		}
		return nil
	default:
		return fmt.Errorf("unknown error category %q", d.Category)
	}
	if d.Poison != nil {
		return fmt.Errorf("%s error carries poison details", d.Category)
	}
	return nil
}

// UnmarshalJSON decodes strictly (unknown members are errors) and validates.
func (d *ErrorDetails) UnmarshalJSON(data []byte) error {
	type plain ErrorDetails
	var p plain
	if err := decodeStrict(data, &p); err != nil {
		return fmt.Errorf("error details: %w", err)
	}
	if err := ErrorDetails(p).Validate(); err != nil {
		return fmt.Errorf("error details: %w", err)
	}
	*d = ErrorDetails(p)
	return nil
}

// UnmarshalJSON decodes strictly.
func (p *PoisonDetails) UnmarshalJSON(data []byte) error {
	type plain PoisonDetails
	var v plain
	if err := decodeStrict(data, &v); err != nil {
		return fmt.Errorf("poison details: %w", err)
	}
	*p = PoisonDetails(v)
	return nil
}

func decodeStrict(data []byte, v any) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	if m == nil {
		return fmt.Errorf("not a JSON object")
	}
	return decodeMembers("object", m, v)
}
