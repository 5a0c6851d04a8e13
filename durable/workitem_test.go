package durable

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable/history"
)

func strp(s string) *string { return &s }

func sampleWorkItems() map[string]WorkItem {
	return map[string]WorkItem{
		"start full": StartOrchestration{Instance: "order/1", Orchestration: "Order", Input: `{"n":1}`, Version: "1.0.0",
			ParentInstance: "root", ParentExecutionID: 3, ParentID: 4, ExecutionID: 1},
		"start minimal":     StartOrchestration{Instance: "i", Orchestration: "O", Input: "", ExecutionID: 1},
		"activity execute":  ActivityExecute{Instance: "i", ExecutionID: 2, ID: 3, Name: "Charge", Input: "x", SessionID: "s", Tag: "gpu"},
		"activity plain":    ActivityExecute{Instance: "i", ExecutionID: 1, ID: 2, Name: "A", Input: ""},
		"activity done":     ActivityCompleted{Instance: "i", ExecutionID: 1, ID: 2, Result: "ok"},
		"activity failed":   ActivityFailed{Instance: "i", ExecutionID: 1, ID: 2, Details: history.ApplicationError(history.AppActivityFailed, "no", true)},
		"timer fired":       TimerFired{Instance: "i", ExecutionID: 1, ID: 5, FireAtMS: 1_740_000_000_000},
		"external raised":   ExternalRaised{Instance: "i", Name: "approve", Data: `{"ok":true}`},
		"sub completed":     SubOrchCompleted{ParentInstance: "p", ParentExecutionID: 1, ParentID: 3, Result: "r"},
		"sub failed":        SubOrchFailed{ParentInstance: "p", ParentExecutionID: 1, ParentID: 3, Details: history.CancelledError("x")},
		"cancel":            CancelInstance{Instance: "i", Reason: "user"},
		"continue as new":   ContinueAsNew{Instance: "i", Orchestration: "O", Input: "n", Version: "2.0.0", CarryForwardEvents: []history.QueuedEvent{{Name: "a", Data: "1"}}, InitialCustomStatus: strp("half")},
		"continue plain":    ContinueAsNew{Instance: "i", Orchestration: "O", Input: "n"},
		"queue message":     QueueMessage{Instance: "i", Name: "cmd", Data: "go"},
		"unicode instance":  ExternalRaised{Instance: "заказ #7 ?\\/", Name: "n", Data: "d"},
		"empty strings":     ExternalRaised{Instance: "i", Name: "", Data: ""},
		"max uint64 fields": TimerFired{Instance: "i", ExecutionID: ^uint64(0), ID: ^uint64(0), FireAtMS: ^uint64(0)},
	}
}

func TestEveryWorkItemVariantHasASample(t *testing.T) {
	seen := map[string]bool{}
	for _, w := range sampleWorkItems() {
		seen[w.Kind()] = true
	}
	for _, k := range []string{kindStartOrchestration, kindActivityExecute, kindActivityCompleted, kindActivityFailed,
		kindTimerFired, kindExternalRaised, kindSubOrchCompleted, kindSubOrchFailed, kindCancelInstance,
		kindContinueAsNew, kindQueueMessage} {
		require.True(t, seen[k], "no sample for %s", k)
	}
}

func TestWorkItemRoundTrip(t *testing.T) {
	for name, w := range sampleWorkItems() {
		t.Run(name, func(t *testing.T) {
			data, err := MarshalWorkItem(w)
			require.NoError(t, err)
			viaJSON, err := json.Marshal(w)
			require.NoError(t, err)
			require.Equal(t, string(data), string(viaJSON), "json.Marshal and MarshalWorkItem agree")

			got, err := UnmarshalWorkItem(data)
			require.NoError(t, err)
			require.Equal(t, w, got)
			require.Equal(t, w.Kind(), got.Kind())
			require.Equal(t, w.TargetInstance(), got.TargetInstance())
		})
	}
}

func TestWorkItemRouting(t *testing.T) {
	for name, w := range sampleWorkItems() {
		want := OrchestratorQueue
		if _, ok := w.(ActivityExecute); ok {
			want = WorkerQueue
		}
		require.Equal(t, want, w.Queue(), name)
	}
	require.Equal(t, "p", SubOrchCompleted{ParentInstance: "p"}.TargetInstance())
	require.Equal(t, "p", SubOrchFailed{ParentInstance: "p"}.TargetInstance())
	require.Equal(t, "worker", WorkerQueue.String())
	require.Equal(t, "orchestrator", OrchestratorQueue.String())
}

func TestWorkItemWireShape(t *testing.T) {
	data, err := MarshalWorkItem(ActivityExecute{Instance: "i", ExecutionID: 1, ID: 2, Name: "A", Input: "x"})
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"ActivityExecute","instance":"i","execution_id":1,"id":2,"name":"A","input":"x"}`, string(data))
}

func TestWorkItemDecodeRejectsBadInput(t *testing.T) {
	tests := []struct {
		name, in, want string
		unknown        bool
	}{
		{name: "unknown variant", in: `{"type":"TeleportInstance","instance":"i"}`, want: "TeleportInstance", unknown: true},
		{name: "unknown member", in: `{"type":"CancelInstance","instance":"i","reason":"r","force":true}`, want: `no field "force"`},
		{name: "missing member", in: `{"type":"CancelInstance","instance":"i"}`, want: `missing required field "reason"`},
		{name: "null string", in: `{"type":"CancelInstance","instance":null,"reason":"r"}`, want: "must not be null"},
		{name: "string for number", in: `{"type":"TimerFired","instance":"i","execution_id":"1","id":1,"fire_at_ms":1}`, want: "execution_id"},
		{name: "bad details", in: `{"type":"ActivityFailed","instance":"i","execution_id":1,"id":1,"details":{"category":"?"}}`, want: "unknown error category"},
		{name: "not json", in: `StartOrchestration`, want: "malformed"},
		{name: "empty", in: ``, want: "malformed"},
		{name: "no type", in: `{"instance":"i"}`, want: `missing "type"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := UnmarshalWorkItem([]byte(tc.in))
			require.Nil(t, w)
			require.ErrorIs(t, err, ErrMalformed)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, tc.unknown, errors.Is(err, ErrUnknownKind))
		})
	}
}

func TestValidateWorkItem(t *testing.T) {
	require.Error(t, ValidateWorkItem(nil))
	require.ErrorContains(t, ValidateWorkItem(ExternalRaised{Name: "x"}), "empty target instance")
	require.ErrorContains(t, ValidateWorkItem(SubOrchCompleted{}), "SubOrchCompleted")
	require.NoError(t, ValidateWorkItem(CancelInstance{Instance: "i"}))
	_, err := MarshalWorkItem(nil)
	require.Error(t, err)
}

// FuzzDecodeWorkItem feeds arbitrary bytes to the decoder: it must never
// panic, every failure wraps ErrMalformed, and whatever it accepts survives a
// re-encode unchanged.
func FuzzDecodeWorkItem(f *testing.F) {
	for _, w := range sampleWorkItems() {
		data, err := MarshalWorkItem(w)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"type":"StartOrchestration"}`))
	f.Add([]byte(`{"type":1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := UnmarshalWorkItem(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("decode error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		again, err := MarshalWorkItem(w)
		if err != nil {
			t.Fatalf("accepted item does not re-encode: %v", err)
		}
		back, err := UnmarshalWorkItem(again)
		if err != nil {
			t.Fatalf("re-encoded item does not decode: %v", err)
		}
		if !reflect.DeepEqual(normalizeItem(w), normalizeItem(back)) {
			t.Fatalf("round trip changed the item:\n%#v\n%#v", w, back)
		}
	})
}

// normalizeItem maps empty slices to nil, which JSON cannot tell apart.
func normalizeItem(w WorkItem) WorkItem {
	if c, ok := w.(ContinueAsNew); ok && len(c.CarryForwardEvents) == 0 {
		c.CarryForwardEvents = nil
		return c
	}
	return w
}
