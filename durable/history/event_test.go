package history

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func strp(s string) *string { return &s }

// sampleKinds has one fully populated value of every kind, and a minimal one
// where optional fields exist.
func sampleKinds() map[string]EventKind {
	return map[string]EventKind{
		"started full": OrchestrationStarted{Name: "Order", Version: "1.2.0", Input: `{"id":1}`, ParentInstance: "parent", ParentExecutionID: 2,
			ParentID: 7, CarryForwardEvents: []QueuedEvent{{Name: "cfg", Data: "a"}, {Name: "cfg", Data: "b"}}, InitialCustomStatus: strp("")},
		"started minimal":           OrchestrationStarted{Name: "Order", Version: "1.0.0", Input: ""},
		"completed":                 OrchestrationCompleted{Output: "done"},
		"failed app":                OrchestrationFailed{Details: ApplicationError(AppOrchestrationFailed, "boom", false)},
		"failed poison":             OrchestrationFailed{Details: PoisonError(PoisonDetails{AttemptCount: 11, MaxAttempts: 10, Type: PoisonFailedDeserialization, Instance: "i", ExecutionID: 2, DecodeError: "bad"})},
		"activity scheduled":        ActivityScheduled{Name: "Charge", Input: "42", SessionID: "s1", Tag: "gpu"},
		"activity scheduled plain":  ActivityScheduled{Name: "Charge", Input: "42"},
		"activity completed":        ActivityCompleted{Result: "ok"},
		"activity failed":           ActivityFailed{Details: ApplicationError(AppActivityFailed, "declined", true)},
		"activity failed infra":     ActivityFailed{Details: InfrastructureError("ack_work_item", "lost", true)},
		"activity cancel requested": ActivityCancelRequested{Reason: "select loser"},
		"timer created":             TimerCreated{FireAtMS: 1_740_000_000_000},
		"timer fired":               TimerFired{FireAtMS: 1_740_000_000_000},
		"external subscribed":       ExternalSubscribed{Name: "approve"},
		"external event":            ExternalEvent{Name: "approve", Data: `{"by":"ann"}`},
		"external cancelled":        ExternalSubscribedCancelled{Reason: "timeout won"},
		"chained":                   OrchestrationChained{Name: "Audit", Instance: "audit-1", Input: "x", Version: "2.0.0"},
		"sub scheduled":             SubOrchestrationScheduled{Name: "Child", Instance: "p::sub::3", Input: "in"},
		"sub completed":             SubOrchestrationCompleted{Result: "r"},
		"sub failed":                SubOrchestrationFailed{Details: CancelledError("parent cancelled")},
		"sub cancel requested":      SubOrchestrationCancelRequested{Reason: "parent done"},
		"continued as new":          OrchestrationContinuedAsNew{Input: "next", Version: "1.1.0"},
		"cancel requested":          OrchestrationCancelRequested{Reason: "user"},
		"queue subscribed":          QueueSubscribed{Name: "cmd"},
		"queue delivered":           QueueEventDelivered{Name: "cmd", Data: "stop"},
		"queue cancelled":           QueueSubscriptionCancelled{Reason: "lost select"},
		"custom status set":         CustomStatusUpdated{Status: strp("50%")},
		"custom status cleared":     CustomStatusUpdated{Status: nil},
		"kv set":                    KeyValueSet{Key: "k", Value: "v", LastUpdatedAtMS: 99},
		"kv cleared":                KeyValueCleared{Key: "k"},
		"kvs cleared":               KeyValuesCleared{},
		"nondeterminism":            OrchestrationFailed{Details: ConfigurationError(ConfigNondeterminism, "Order", "expected activity A")},
	}
}

func TestEveryKindHasASample(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range sampleKinds() {
		seen[k.KindName()] = true
	}
	// Every kind decodeKind knows must be covered by a round-trip sample.
	for _, name := range []string{
		kindOrchestrationStarted, kindOrchestrationCompleted, kindOrchestrationFailed, kindActivityScheduled,
		kindActivityCompleted, kindActivityFailed, kindActivityCancelRequested, kindTimerCreated, kindTimerFired,
		kindExternalSubscribed, kindExternalEvent, kindExternalSubscribedCancelled, kindOrchestrationChained,
		kindSubOrchestrationScheduled, kindSubOrchestrationCompleted, kindSubOrchestrationFailed,
		kindSubOrchestrationCancelRequested, kindOrchestrationContinuedAsNew, kindOrchestrationCancelRequested,
		kindQueueSubscribed, kindQueueEventDelivered, kindQueueSubscriptionCancelled, kindCustomStatusUpdated,
		kindKeyValueSet, kindKeyValueCleared, kindKeyValuesCleared,
	} {
		require.True(t, seen[name], "no sample for %s", name)
		_, err := decodeKind(name, nil)
		require.False(t, errors.Is(err, ErrUnknownKind), "decodeKind does not know %s", name)
	}
}

func TestEventRoundTrip(t *testing.T) {
	for name, kind := range sampleKinds() {
		t.Run(name, func(t *testing.T) {
			ev := Event{EventID: 5, SourceEventID: 3, InstanceID: "order/1#?", ExecutionID: 2,
				TimestampMS: 1_740_000_000_123, RuntimeVersion: "0.3.1", Kind: kind}
			data, err := json.Marshal(ev)
			require.NoError(t, err)
			require.True(t, strings.Contains(string(data), `"type":"`+kind.KindName()+`"`), string(data))

			got, err := Unmarshal(data)
			require.NoError(t, err)
			require.Equal(t, ev, got)

			// Encoding is deterministic.
			again, err := Marshal(got)
			require.NoError(t, err)
			require.Equal(t, string(data), string(again))
		})
	}
}

func TestEventSliceRoundTrip(t *testing.T) {
	var in []Event
	id := uint64(1)
	for _, k := range sampleKinds() {
		in = append(in, Event{EventID: id, InstanceID: "i", ExecutionID: 1, RuntimeVersion: "0.1.0", Kind: k})
		id++
	}
	data, err := json.Marshal(in)
	require.NoError(t, err)
	var out []Event
	require.NoError(t, json.Unmarshal(data, &out))
	require.Equal(t, in, out)
}

func TestEventWireShape(t *testing.T) {
	ev := Event{EventID: 1, InstanceID: "i", ExecutionID: 1, TimestampMS: 10, RuntimeVersion: "0.1.0",
		Kind: ActivityScheduled{Name: "A", Input: "x"}}
	data, err := Marshal(ev)
	require.NoError(t, err)
	require.JSONEq(t, `{"event_id":1,"instance_id":"i","execution_id":1,"timestamp_ms":10,"runtime_version":"0.1.0",
		"type":"ActivityScheduled","name":"A","input":"x"}`, string(data))
}

func TestEventDecodeRejectsBadInput(t *testing.T) {
	valid := `"event_id":1,"instance_id":"i","execution_id":1,"timestamp_ms":1,"runtime_version":"0.1.0"`
	tests := []struct {
		name, in, want string
		unknown        bool
	}{
		{name: "unknown kind", in: `{` + valid + `,"type":"QuantumEntangled","x":1}`, want: "QuantumEntangled", unknown: true},
		{name: "unknown member", in: `{` + valid + `,"type":"ActivityCompleted","result":"r","extra":true}`, want: `no field "extra"`},
		{name: "missing kind field", in: `{` + valid + `,"type":"ActivityCompleted"}`, want: `missing required field "result"`},
		{name: "missing header field", in: `{"event_id":1,"type":"KeyValuesCleared"}`, want: `missing required field`},
		{name: "custom status must be present", in: `{` + valid + `,"type":"CustomStatusUpdated"}`, want: `"status"`},
		{name: "bad error category", in: `{` + valid + `,"type":"ActivityFailed","details":{"category":"cosmic"}}`, want: "unknown error category"},
		{name: "bad app kind", in: `{` + valid + `,"type":"ActivityFailed","details":{"category":"application","kind":"sad"}}`, want: "unknown application error kind"},
		{name: "poison without details", in: `{` + valid + `,"type":"OrchestrationFailed","details":{"category":"poison"}}`, want: "without poison details"},
		{name: "unknown member in details", in: `{` + valid + `,"type":"ActivityFailed","details":{"category":"infrastructure","x":1}}`, want: `no field "x"`},
		{name: "no type", in: `{` + valid + `}`, want: `missing "type"`},
		{name: "truncated", in: `{` + valid + `,"type":"Activity`, want: "malformed"},
		{name: "array", in: `[1,2]`, want: "malformed"},
		{name: "negative id", in: `{"event_id":-1,"instance_id":"i","execution_id":1,"timestamp_ms":1,"runtime_version":"0.1.0","type":"KeyValuesCleared"}`, want: "event_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Unmarshal([]byte(tc.in))
			require.Error(t, err)
			require.ErrorIs(t, err, ErrMalformed)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, tc.unknown, errors.Is(err, ErrUnknownKind))
		})
	}
}

func TestMarshalNilKindFails(t *testing.T) {
	_, err := Marshal(Event{EventID: 1})
	require.ErrorContains(t, err, "nil kind")
}

func TestIsTerminal(t *testing.T) {
	for name, k := range sampleKinds() {
		want := false
		switch k.(type) {
		case OrchestrationCompleted, OrchestrationFailed, OrchestrationContinuedAsNew:
			want = true
		}
		require.Equal(t, want, Event{Kind: k}.IsTerminal(), name)
	}
}

func TestErrorDetails(t *testing.T) {
	tests := []struct {
		d         ErrorDetails
		display   string
		retryable bool
	}{
		{InfrastructureError("fetch", "busy", true), "infrastructure:fetch: busy", true},
		{ConfigurationError(ConfigNondeterminism, "Order", "expected A"), "nondeterministic: expected A", false},
		{ConfigurationError(ConfigNondeterminism, "Order", ""), "nondeterministic in Order", false},
		{ConfigurationError(ConfigUnregistered, "Missing", ""), "unregistered: Missing", false},
		{ApplicationError(AppActivityFailed, "declined", true), "declined", true},
		{ApplicationError(AppPanicked, "nil map", false), "panicked: nil map", false},
		{CancelledError("user"), "canceled: user", false},
		{PoisonError(PoisonDetails{AttemptCount: 4, MaxAttempts: 3, Type: PoisonActivity, ActivityName: "A", ActivityID: 2}),
			"poison: activity A#2 exceeded 4 attempts (max 3)", false},
		{PoisonError(PoisonDetails{AttemptCount: 4, MaxAttempts: 3, Type: PoisonOrchestration, Instance: "i"}),
			"poison: orchestration i exceeded 4 attempts (max 3)", false},
	}
	for _, tc := range tests {
		require.NoError(t, tc.d.Validate())
		require.Equal(t, tc.display, tc.d.DisplayMessage())
		require.Equal(t, tc.display, tc.d.Error())
		require.Equal(t, tc.retryable, tc.d.IsRetryable())
		var err error = tc.d
		var got ErrorDetails
		require.True(t, errors.As(err, &got))
	}
	require.Error(t, ErrorDetails{Category: CategoryInfrastructure, Poison: &PoisonDetails{}}.Validate())
	require.Error(t, ErrorDetails{Category: CategoryInfrastructure, Kind: "x"}.Validate())
}

// FuzzDecodeEvent feeds arbitrary bytes to the decoder: it must never panic,
// and whatever it accepts must re-encode and decode to the same event.
func FuzzDecodeEvent(f *testing.F) {
	for _, k := range sampleKinds() {
		data, err := Marshal(Event{EventID: 1, InstanceID: "i", ExecutionID: 1, RuntimeVersion: "0.1.0", Kind: k})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"type":"Nope"}`))
	f.Add([]byte(`{`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := Unmarshal(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("decode error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		again, err := Marshal(ev)
		if err != nil {
			t.Fatalf("accepted event does not re-encode: %v", err)
		}
		back, err := Unmarshal(again)
		if err != nil {
			t.Fatalf("re-encoded event does not decode: %v", err)
		}
		if !reflect.DeepEqual(normalize(ev), normalize(back)) {
			t.Fatalf("round trip changed the event:\n%#v\n%#v", ev, back)
		}
	})
}

// normalize maps empty and nil slices to nil, which JSON cannot tell apart.
func normalize(e Event) Event {
	if s, ok := e.Kind.(OrchestrationStarted); ok && len(s.CarryForwardEvents) == 0 {
		s.CarryForwardEvents = nil
		e.Kind = s
	}
	return e
}
