package provider

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/engine"
	"github.com/durafeed/durafeed/leasestore"
	"github.com/durafeed/durafeed/peerwake"
	"github.com/durafeed/durafeed/slots"
)

// peerWakePair opens, on a fresh container, an owner replica (joined, every
// slot its own) and a client provider, both with the peer wake channel
// configured by ownerWake and clientWake; with pauseFeed the owner's
// change-feed readers read once when they start and then not for an hour,
// so only a wake can bring another process's write to it. It returns once
// the client's lease view names the owner for every lease.
func peerWakePair(t *testing.T, name string, ownerWake, clientWake *engine.PeerWakeOptions, pauseFeed bool) (owner, client *Provider) {
	t.Helper()
	cfg := replicaConfig(freshContainer(name))
	cfg.joinEagerly = true
	cfg.ReplicaID = "owner"
	cfg.peerWake = ownerWake
	if pauseFeed {
		cfg.FeedActiveDelay, cfg.FeedIdleCeiling, cfg.feedHold, cfg.FeedEmptyReadBudget = time.Hour, time.Hour, -1, -1
	}
	owner = openProvider(t, cfg)
	require.Eventually(t, func() bool { return ownedCount(owner) == slots.Count }, hang, 10*time.Millisecond, "the owner holds every slot")

	ccfg := cfg
	ccfg.joinEagerly, ccfg.ReplicaID, ccfg.peerWake = false, "client", clientWake
	client = openProvider(t, ccfg)
	leases := len(owner.ev().Ownership())
	if ownerWake != nil && clientWake != nil {
		// The client's first view (read at start) may predate the owner's
		// heartbeat with its endpoint: a write then kicks another read.
		require.Eventually(t, func() bool {
			if client.ev().PeerWakeStats().ViewOwners == leases {
				return true
			}
			_ = client.EnqueueForOrchestrator(context.Background(), durable.StartOrchestration{Instance: "primer", Orchestration: "O", Input: "{}", ExecutionID: 1}, 0)
			return false
		}, hang, 50*time.Millisecond, "the client's lease view knows the owner's endpoint")
	}
	return owner, client
}

// fetchInstance long-polls owner until it returns instance's item (other
// instances' items are abandoned for good), failing after hang.
func fetchInstance(t *testing.T, owner *Provider, instance string) *durable.OrchestrationItem {
	t.Helper()
	deadline := time.Now().Add(hang)
	for time.Now().Before(deadline) {
		item, err := owner.FetchOrchestrationItem(context.Background(), lockLong, time.Second, nil)
		require.NoError(t, err)
		if item == nil {
			continue
		}
		if item.Instance == instance {
			return item
		}
		require.NoError(t, owner.AbandonOrchestrationItem(context.Background(), item.LockToken, time.Hour, true))
	}
	t.Fatalf("%s was not fetched within %v", instance, hang)
	return nil
}

// TestPeerWakeBringsAnotherProcessWrite: with the owner's change feed
// paused, a start enqueued by a client in another provider reaches the
// owner's long-polling fetch through the peer wake alone.
func TestPeerWakeBringsAnotherProcessWrite(t *testing.T) {
	t.Parallel()
	owner, client := peerWakePair(t, "peerwake-deliver", &engine.PeerWakeOptions{}, &engine.PeerWakeOptions{}, true)
	before := owner.ev().PeerWakeStats().Received
	require.NoError(t, client.EnqueueForOrchestrator(context.Background(),
		durable.StartOrchestration{Instance: "woken", Orchestration: "O", Input: "{}", ExecutionID: 1}, 0))
	item := fetchInstance(t, owner, "woken")
	require.Len(t, item.Messages, 1)
	require.Greater(t, owner.ev().PeerWakeStats().Received, before, "the owner was woken by the channel")
	require.Positive(t, client.ev().PeerWakeStats().Sent)
}

// TestPeerWakeCarriesAFutureVisibility: a message another process writes
// to become visible later (a timer's shape) reaches the owner, its feed
// paused, through the channel with its visible time: it is fetched, and
// not before that time.
func TestPeerWakeCarriesAFutureVisibility(t *testing.T) {
	t.Parallel()
	owner, client := peerWakePair(t, "peerwake-timer", &engine.PeerWakeOptions{}, &engine.PeerWakeOptions{}, true)
	const delay = 300 * time.Millisecond
	before := time.Now() // the visible time is at least this + delay, in whole milliseconds
	require.NoError(t, client.EnqueueForOrchestrator(context.Background(),
		durable.StartOrchestration{Instance: "later", Orchestration: "O", Input: "{}", ExecutionID: 1}, delay))
	item := fetchInstance(t, owner, "later")
	require.GreaterOrEqual(t, time.Since(before), delay-time.Millisecond, "fetched before it was visible")
	require.Len(t, item.Messages, 1)
	require.Positive(t, owner.ev().PeerWakeStats().Received)
}

// TestPeerWakeLostIsCoveredByTheFeed: the owner advertises an endpoint no
// one listens on, so every wake the client sends is dropped; the write
// still reaches the owner through its change feed.
func TestPeerWakeLostIsCoveredByTheFeed(t *testing.T) {
	t.Parallel()
	owner, client := peerWakePair(t, "peerwake-lost", &engine.PeerWakeOptions{Advertise: "127.0.0.1:1"}, &engine.PeerWakeOptions{}, false)
	require.NoError(t, client.EnqueueForOrchestrator(context.Background(),
		durable.StartOrchestration{Instance: "via-feed", Orchestration: "O", Input: "{}", ExecutionID: 1}, 0))
	item := fetchInstance(t, owner, "via-feed")
	require.Len(t, item.Messages, 1)
	require.Zero(t, owner.ev().PeerWakeStats().Received, "no wake arrived")
	require.Eventually(t, func() bool {
		st := client.ev().PeerWakeStats()
		return st.Sent > 0 && st.Sender.Dropped > 0
	}, hang, 10*time.Millisecond, "the client sent wakes, which were dropped")
}

// TestPeerWakeForgedIsRefused: wakes signed with a key other than the
// owner's published one are refused by its receiver and signal nothing:
// a forger causes no read.
func TestPeerWakeForgedIsRefused(t *testing.T) {
	t.Parallel()
	owner, _ := peerWakePair(t, "peerwake-forged", &engine.PeerWakeOptions{}, nil, true)
	view, err := leasestore.ReadView(context.Background(), owner.s.Container(), leasestore.DefaultPartitionKeyValue, len(owner.ev().Ownership()))
	require.NoError(t, err)
	ep, ok := view.Wake["owner"]
	require.True(t, ok, "the owner publishes its endpoint")

	forged, err := peerwake.NewSecret()
	require.NoError(t, err)
	snd, err := peerwake.NewSender(peerwake.SenderOptions{})
	require.NoError(t, err)
	defer func() { _ = snd.Close() }()
	for i := range 20 {
		require.NoError(t, snd.Send(peerwake.Peer{Addr: ep.Addr, Secret: forged},
			peerwake.Wake{Hub: peerwake.HubOrchestrator, Slot: i, Key: "wforged", VisibleAt: time.Now()}))
	}
	require.Eventually(t, func() bool {
		st := owner.ev().PeerWakeStats().Receiver
		return st.UnknownKey+st.BadMAC > 0
	}, hang, 10*time.Millisecond, "the receiver saw the forged wakes")
	st := owner.ev().PeerWakeStats()
	require.Zero(t, st.Received, "no forged wake was signalled")
	require.Zero(t, st.Receiver.Accepted)
	item, err := owner.FetchOrchestrationItem(context.Background(), lockLong, 0, nil)
	require.NoError(t, err)
	require.Nil(t, item)
}

// TestPeerWakeCarriesHandOffs: with the lease watch's ceiling an hour
// (and its safety re-read minutes away), a newcomer's steal requests, the
// owner's hand-offs and a graceful leave are announced over the channel
// (kicks sent and received) and ownership converges each time. A freshly
// started watch still reads often while its pause doubles towards the
// ceiling, so this shows that the kicks arrive, not the wait they save.
func TestPeerWakeCarriesHandOffs(t *testing.T) {
	t.Parallel()
	cfg := replicaConfig(freshContainer("peerwake-handoff"))
	cfg.joinEagerly = true
	cfg.LeaseExpiry, cfg.HeartbeatInterval = 5*time.Minute, time.Minute
	cfg.WatchIdleCeiling = time.Hour
	cfg.peerWake = &engine.PeerWakeOptions{}
	acfg, bcfg := cfg, cfg
	acfg.ReplicaID, bcfg.ReplicaID = "a", "b"
	a := openProvider(t, acfg)
	require.Eventually(t, func() bool { return ownedCount(a) == slots.Count }, hang, 10*time.Millisecond, "a holds every slot")
	b := openProvider(t, bcfg)
	require.Eventually(t, func() bool {
		return ownedCount(b) > 0 && ownedOnce(a, b)
	}, hang, 10*time.Millisecond, "b gets a share from a")
	require.Positive(t, b.ev().PeerWakeStats().LeaseKicksSent, "b asked for leases")
	require.Positive(t, a.ev().PeerWakeStats().LeaseKicksReceived)

	require.NoError(t, a.Close())
	require.Eventually(t, func() bool { return ownedCount(b) == slots.Count }, hang, 10*time.Millisecond, "b takes a's leases")
	require.Positive(t, b.ev().PeerWakeStats().LeaseKicksReceived)
}

// TestPeerWakeReportsChangesToWatchers: a client in another provider that
// watches an instance hears of each turn its owner commits through the
// channel (the owner's feed paused: nothing else could tell it), and its
// watch is renewed after each report.
func TestPeerWakeReportsChangesToWatchers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner, client := peerWakePair(t, "peerwake-watch", &engine.PeerWakeOptions{}, &engine.PeerWakeOptions{}, true)
	w, err := client.WatchInstance(ctx, "watched")
	require.NoError(t, err)
	defer w.Close()
	// The owner registered the watch before the turn commits.
	until(t, "the owner holds the watch", func() bool { return owner.ev().PeerWakeStats().Received > 0 && watchersOf(owner, "watched") == 1 })

	heard := func(what string) {
		t.Helper()
		select {
		case <-w.Changed():
		case <-time.After(hang):
			require.FailNow(t, "not reported", what)
		}
	}
	require.NoError(t, client.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: "watched", Orchestration: "O", Input: "{}", ExecutionID: 1}, 0))
	item := fetchInstance(t, owner, "watched")
	require.NoError(t, owner.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{ev("watched", 1, 1, history.OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "{}"})},
		Metadata:     durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0", Status: durable.StatusRunning}}))
	heard("the first turn")

	until(t, "the watch is renewed at the owner", func() bool { return watchersOf(owner, "watched") == 1 })
	require.NoError(t, client.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: "watched", Name: "go", Data: "{}"}, 0))
	item = fetchInstance(t, owner, "watched")
	require.NoError(t, owner.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{ev("watched", 1, 2, history.ExternalEvent{Name: "go", Data: "{}"})}}))
	heard("the second turn")

	st := owner.ev().PeerWakeStats()
	require.GreaterOrEqual(t, st.ChangesSent, int64(2))
	cst := client.ev().PeerWakeStats()
	require.GreaterOrEqual(t, cst.ChangesReceived, int64(2))
	require.GreaterOrEqual(t, cst.WatchesSent, int64(2))
}

// watchersOf returns how many peers' watches of instance p's engine holds.
func watchersOf(p *Provider, instance string) int { return p.ev().Watchers(instance) }
