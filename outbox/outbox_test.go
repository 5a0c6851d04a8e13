package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// memStore is an in-memory Store: documents by partition and id.
type memStore struct {
	mu       sync.Mutex
	docs     map[string]map[string]json.RawMessage
	failNext error
}

func newMemStore() *memStore { return &memStore{docs: map[string]map[string]json.RawMessage{}} }

func (m *memStore) Create(_ context.Context, partition string, doc json.RawMessage) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.failNext; err != nil {
		m.failNext = nil
		return err
	}
	var h struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(doc, &h); err != nil {
		return err
	}
	if m.docs[partition] == nil {
		m.docs[partition] = map[string]json.RawMessage{}
	}
	if _, ok := m.docs[partition][h.ID]; ok {
		return fmt.Errorf("409: %w", ErrExists)
	}
	m.docs[partition][h.ID] = doc
	return nil
}

func (m *memStore) Delete(_ context.Context, partition, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.docs[partition], id)
	return nil
}

func (m *memStore) count(partition string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.docs[partition])
}

func intent(id, target string) Intent {
	return Intent{ID: id, InstanceID: "source", Type: Type, TargetInstance: target,
		Payload: fmt.Sprintf(`{"id":"outbox:%s","instanceId":%q}`, id, target), IdempotencyKey: id}
}

func TestDeliverIsIdempotent(t *testing.T) {
	t.Parallel()
	s := newMemStore()
	o := New(s, nil)
	in := intent("k1", "target")
	require.NoError(t, s.Create(context.Background(), "source", mustJSON(t, in)))
	first, err := o.Deliver(context.Background(), in)
	require.NoError(t, err)
	again, err := o.Deliver(context.Background(), in)
	require.NoError(t, err, "a second delivery finds the target and succeeds")
	require.Equal(t, 1, s.count("target"), "one target document")
	require.Zero(t, s.count("source"), "the intent is deleted")
	require.JSONEq(t, in.Payload, string(first), "the caller hears of the target")
	require.JSONEq(t, in.Payload, string(again), "both times")
}

func TestDeliverFailureKeepsIntent(t *testing.T) {
	t.Parallel()
	s := newMemStore()
	o := New(s, nil)
	in := intent("k1", "target")
	require.NoError(t, s.Create(context.Background(), "source", mustJSON(t, in)))
	boom := errors.New("503")
	s.failNext = boom
	target, err := o.Deliver(context.Background(), in)
	require.ErrorIs(t, err, boom)
	require.Nil(t, target, "no target document exists")
	require.Equal(t, 1, s.count("source"), "the intent waits for the next delivery")
	require.Zero(t, s.count("target"))
	targets, n := o.DeliverAll(context.Background(), []Intent{in})
	require.Equal(t, 1, n)
	require.Len(t, targets, 1)
	require.Equal(t, 1, s.count("target"))
}

type finisher struct{ done, failed []string }

func (f *finisher) FinishInstance(_ context.Context, instance string) error {
	if instance == "bad" {
		f.failed = append(f.failed, instance)
		return errors.New("412")
	}
	f.done = append(f.done, instance)
	return nil
}

func TestRepair(t *testing.T) {
	t.Parallel()
	s := newMemStore()
	o := New(s, nil)
	f := &finisher{}
	r := o.Repair(context.Background(), Findings{
		Intents:   []Intent{intent("a", "t1"), intent("b", "t2"), intent("a", "t1")},
		Instances: []string{"x", "bad", "y"},
	}, f)
	require.Equal(t, 3, r.Delivered)
	require.Equal(t, 2, r.Finished)
	require.Len(t, r.Targets, 3, "each delivery's target, the repeat's too")
	require.Equal(t, []string{"x", "y"}, f.done)
	require.Equal(t, []string{"bad"}, f.failed, "a failure is left for the next pass, the rest go on")
	require.Equal(t, 1, s.count("t1"), "a repeated intent delivers once")
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
