package chaos

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
)

// stubProvider hands out the queued fetch results and answers acks with
// ackErr; every other durable.Provider method is absent (nil interface).
type stubProvider struct {
	durable.Provider
	items  []*durable.OrchestrationItem
	work   []*durable.LockedWorkItem
	ackErr error
}

func (s *stubProvider) FetchOrchestrationItem(context.Context, time.Duration, time.Duration, *durable.DispatcherCapabilityFilter) (*durable.OrchestrationItem, error) {
	it := s.items[0]
	s.items = s.items[1:]
	return it, nil
}

func (s *stubProvider) FetchWorkItem(context.Context, time.Duration, time.Duration, *durable.SessionFetchConfig, durable.TagFilter) (*durable.LockedWorkItem, error) {
	w := s.work[0]
	s.work = s.work[1:]
	return w, nil
}

func (s *stubProvider) AckOrchestrationItem(context.Context, string, durable.OrchestrationTurn) error {
	return s.ackErr
}

func (s *stubProvider) EnqueueForOrchestrator(context.Context, durable.WorkItem, time.Duration) error {
	return nil
}

func (s *stubProvider) AckWorkItem(context.Context, string, durable.WorkItem) error { return nil }

func (s *stubProvider) AbandonOrchestrationItem(context.Context, string, time.Duration, bool) error {
	return nil
}

func TestObserverLockStalls(t *testing.T) {
	raise := durable.ExternalRaised{Instance: "i", Name: "s", Data: `"a"`}
	done := durable.ActivityCompleted{Instance: "i", ExecutionID: 1, ID: 2, Result: "1"}
	act := durable.ActivityExecute{Instance: "i", ExecutionID: 1, ID: 2, Name: "step", Input: "0"}
	tests := []struct {
		name      string
		attempts  []uint32 // successive fetches of the same messages
		killed    []string // instances with writes in flight at a kill before the fetches
		stalls    int      // every stall, the kill's included
		killStall int
	}{
		{name: "first delivery", attempts: []uint32{1}},
		{name: "redelivery after a received lock", attempts: []uint32{1, 2, 3}},
		{name: "an abandon that did not count the attempt", attempts: []uint32{1, 1}},
		{name: "a lock nobody received before the first delivery", attempts: []uint32{2}, stalls: 1},
		{name: "a lock nobody received between deliveries", attempts: []uint32{1, 3}, stalls: 1},
		{name: "after a kill with a write to the instance in flight", attempts: []uint32{2, 4}, killed: []string{"h", "i"}, stalls: 2, killStall: 2},
		{name: "after a kill with writes to other instances in flight", attempts: []uint32{2}, killed: []string{"h"}, stalls: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, queue := range []string{"orchestrator", "worker"} {
				obs := newObserver()
				if tc.killed != nil {
					obs.killedWith(tc.killed)
				}
				stub := &stubProvider{}
				for _, a := range tc.attempts {
					stub.items = append(stub.items, &durable.OrchestrationItem{Instance: "i", Messages: []durable.WorkItem{raise, done}, AttemptCount: a, LockToken: "t"})
					stub.work = append(stub.work, &durable.LockedWorkItem{Item: act, AttemptCount: a, LockToken: "w"})
				}
				p := &observedProvider{Provider: stub, obs: obs, replica: 1}
				for range tc.attempts {
					if queue == "orchestrator" {
						_, err := p.FetchOrchestrationItem(t.Context(), time.Second, time.Second, nil)
						require.NoError(t, err)
					} else {
						_, err := p.FetchWorkItem(t.Context(), time.Second, time.Second, nil, durable.TagFilter{})
						require.NoError(t, err)
					}
				}
				_, stalls, _ := obs.results()
				kill := 0
				for _, s := range stalls {
					require.Equal(t, queue, s.Queue)
					require.Equal(t, "i", s.Instance)
					if s.Kill {
						kill++
					}
				}
				require.Len(t, stalls, tc.stalls, queue)
				require.Equal(t, tc.killStall, kill, queue)
			}
		})
	}
}

func TestObserverConsumption(t *testing.T) {
	start := durable.StartOrchestration{Instance: "i", Orchestration: "o", Input: "1", ExecutionID: 1}
	child := durable.StartOrchestration{Instance: "c", Orchestration: "o", Input: "2", ExecutionID: 1, ParentInstance: "i", ParentID: 2}
	raise := durable.ExternalRaised{Instance: "i", Name: "s", Data: `"a"`}
	queued := durable.QueueMessage{Instance: "i", Name: "q", Data: `"p"`}
	done := durable.ActivityCompleted{Instance: "i", ExecutionID: 1, ID: 2}
	msgs := []durable.WorkItem{start, child, raise, queued, done}
	tests := []struct {
		name     string
		ackErr   error
		abandon  bool
		consumed []ConsumedMessage
	}{
		{name: "a committed turn consumes the client's messages", consumed: []ConsumedMessage{
			{Kind: "StartOrchestration", Instance: "i", Name: "o", Data: "1", Replica: 2},
			{Kind: "ExternalRaised", Instance: "i", Name: "s", Data: `"a"`, Replica: 2},
			{Kind: "QueueMessage", Instance: "i", Name: "q", Data: `"p"`, Replica: 2},
		}},
		{name: "a failed ack consumes nothing", ackErr: durable.Permanent("ack", errors.New("lock lost"), "lost")},
		{name: "a retryable ack failure consumes nothing (yet)", ackErr: durable.Retryable("ack", errors.New("503"), "busy")},
		{name: "an abandoned turn consumes nothing", abandon: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obs := newObserver()
			stub := &stubProvider{items: []*durable.OrchestrationItem{{Instance: "i", Messages: msgs, AttemptCount: 1, LockToken: "t"}}, ackErr: tc.ackErr}
			p := &observedProvider{Provider: stub, obs: obs, replica: 2}
			item, err := p.FetchOrchestrationItem(t.Context(), time.Second, time.Second, nil)
			require.NoError(t, err)
			if tc.abandon {
				require.NoError(t, p.AbandonOrchestrationItem(t.Context(), item.LockToken, 0, false))
				require.NoError(t, p.AckOrchestrationItem(t.Context(), item.LockToken, durable.OrchestrationTurn{}))
			} else {
				_ = p.AckOrchestrationItem(t.Context(), item.LockToken, durable.OrchestrationTurn{})
			}
			consumed, _, _ := obs.results()
			require.Equal(t, tc.consumed, consumed)
		})
	}
}

func TestCaptureCore(t *testing.T) {
	obs := newObserver()
	log := obs.providerLogger(zap.NewNop(), 3)
	log.Info("the answer to an enqueue was lost; read back", zap.String("instance", "i"), zap.Bool("found", false))
	log.Info("an unrelated line", zap.String("instance", "j"))
	log.Debug("a work item lock whose answer was lost did not land", zap.String("instance", "k"))
	_, _, rb := obs.results()
	require.Len(t, rb, 2)
	require.Equal(t, 3, rb[0].Replica)
	require.Equal(t, "i", rb[0].Fields["instance"])
	require.Equal(t, false, rb[0].Fields["found"])
	require.Equal(t, 3, int(rb[0].Fields["node"].(int64)))
	require.Equal(t, "found=false", readBackOutcome(rb[0]))
	require.Equal(t, "k", rb[1].Fields["instance"])
}

func TestKillableTransport(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(partitionKeyHeader) == `["slow"]` {
			close(arrived)
			<-release
		}
	}))
	defer srv.Close()
	tr := &killableTransport{inner: srv.Client()}
	post := func(pk string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, nil)
		require.NoError(t, err)
		req.Header.Set(partitionKeyHeader, pk)
		return tr.Do(req)
	}
	resp, err := post(`["fast"]`)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	// A write in flight at the kill: its partition key is reported and
	// its answer discarded.
	done := make(chan error, 1)
	go func() {
		_, err := post(`["slow"]`)
		done <- err
	}()
	select {
	case <-arrived:
	case <-time.After(time.Minute):
		t.Fatal("the slow request never arrived")
	}
	require.Equal(t, []string{"slow"}, tr.kill())
	close(release)
	select {
	case err := <-done:
		require.ErrorIs(t, err, errKilled)
	case <-time.After(time.Minute):
		t.Fatal("the slow request never returned")
	}
	_, err = post(`["fast"]`)
	require.ErrorIs(t, err, errKilled)
}

func TestObserverWaited(t *testing.T) {
	raise := durable.ExternalRaised{Instance: "i", Name: "s", Data: `"a"`}
	done := durable.ActivityCompleted{Instance: "i", ExecutionID: 1, ID: 2, Result: "1"}
	tests := []struct {
		name    string
		enqueue func(p *observedProvider)
		msg     durable.WorkItem
		waited  bool
	}{
		{name: "a client's event", msg: raise, waited: true, enqueue: func(p *observedProvider) {
			require.NoError(t, p.EnqueueForOrchestrator(t.Context(), raise, 0))
		}},
		{name: "an activity's completion", msg: done, waited: true, enqueue: func(p *observedProvider) {
			require.NoError(t, p.AckWorkItem(t.Context(), "w", done))
		}},
		{name: "a message the wrapper never saw written", msg: raise, enqueue: func(*observedProvider) {}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obs := newObserver()
			stub := &stubProvider{items: []*durable.OrchestrationItem{{Instance: "i", Messages: []durable.WorkItem{tc.msg}, AttemptCount: 2, LockToken: "t"}}}
			p := &observedProvider{Provider: stub, obs: obs, replica: 1}
			tc.enqueue(p)
			time.Sleep(20 * time.Millisecond)
			_, err := p.FetchOrchestrationItem(t.Context(), time.Second, time.Second, nil)
			require.NoError(t, err)
			_, stalls, _ := obs.results()
			require.Len(t, stalls, 1)
			if tc.waited {
				require.GreaterOrEqual(t, stalls[0].Waited, 20*time.Millisecond)
			} else {
				require.Zero(t, stalls[0].Waited)
			}
		})
	}
}
