package peerwake

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// senderProbe records a sender's test hooks.
type senderProbe struct {
	batches chan string // one per batch written or dropped
	exits   chan string // one per peer goroutine that ended
	replies chan string // one per reply frame read and delivered or refused
}

// startSender starts a sender with hooks; Close is registered as cleanup.
func startSender(t testing.TB, opts SenderOptions) (*Sender, *senderProbe) {
	t.Helper()
	p := &senderProbe{batches: make(chan string, 1<<14), exits: make(chan string, 1<<10), replies: make(chan string, 1<<14)}
	opts.hooks = &senderHooks{
		afterBatch: func(addr string) { p.batches <- addr },
		peerExit:   func(addr string) { p.exits <- addr },
		afterReply: func(addr string) { p.replies <- addr },
	}
	s, err := NewSender(opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s, p
}

func waitFor[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(hangDeadline):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

func peerOf(r *Receiver, s Secret) Peer { return Peer{Addr: r.Addr().String(), Secret: s} }

func TestNewSenderOptions(t *testing.T) {
	tests := []struct {
		name string
		opts SenderOptions
		ok   bool
	}{
		{"zero", SenderOptions{}, true},
		{"min backoff above default max", SenderOptions{MinBackoff: time.Minute}, true},
		{"negative queue", SenderOptions{QueueLen: -1}, false},
		{"negative dial timeout", SenderOptions{DialTimeout: -1}, false},
		{"negative write timeout", SenderOptions{WriteTimeout: -1}, false},
		{"negative idle", SenderOptions{IdleTimeout: -1}, false},
		{"negative backoff", SenderOptions{MinBackoff: -1}, false},
		{"max below min", SenderOptions{MinBackoff: time.Second, MaxBackoff: time.Millisecond}, false},
		{"reply window", SenderOptions{ReplyWindow: time.Minute}, true},
		{"negative reply window", SenderOptions{ReplyWindow: -time.Second}, false},
		{"sub-ms reply window", SenderOptions{ReplyWindow: time.Microsecond}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewSender(tt.opts)
			if !tt.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.GreaterOrEqual(t, s.opts.MaxBackoff, s.opts.MinBackoff)
			require.GreaterOrEqual(t, s.opts.ReplyWindow, time.Millisecond)
			require.NoError(t, s.Close())
		})
	}
}

func TestSenderDelivers(t *testing.T) {
	secret := mustSecret(t)
	r, sink := startReceiver(t, ReceiverOptions{Secret: secret})
	s, probe := startSender(t, SenderOptions{})
	tests := []Wake{
		{Hub: HubOrchestrator, Slot: 42, Key: "instance-1", VisibleAt: t0.Add(1500 * time.Microsecond)},
		{Hub: HubWorker, Slot: 0, Key: "instance-2"},
		{Hub: HubWorker, Slot: 255, Key: string(make([]byte, MaxKeyBytes))},
		{Hub: HubLeases, Slot: 0, Key: "replica-a"},
	}
	for i, w := range tests {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			require.NoError(t, s.Send(peerOf(r, secret), w))
			got := sink.next(t)
			require.Equal(t, w.Hub, got.Hub)
			require.Equal(t, w.Slot, got.Slot)
			require.Equal(t, w.Key, got.Key)
			require.True(t, got.VisibleAt.Equal(time.UnixMilli(msCeil(w.VisibleAt))), "got %v", got.VisibleAt)
			waitFor(t, probe.batches, "batch")
		})
	}
	st := s.Stats()
	require.Equal(t, uint64(len(tests)), st.Sent)
	require.Zero(t, st.Dropped)
	require.Equal(t, 1, st.Peers)
	require.Equal(t, uint64(1), r.Stats().ConnsAccepted, "one connection carries them all")
}

// TestSenderDrain: Drain returns once what was queued has been written
// (the receiver has every wake), at once when nothing is queued, and
// with ctx's error when a wake cannot leave in time.
func TestSenderDrain(t *testing.T) {
	secret := mustSecret(t)
	r, sink := startReceiver(t, ReceiverOptions{Secret: secret})
	s, _ := startSender(t, SenderOptions{})
	ctx := context.Background()
	require.NoError(t, s.Drain(ctx), "nothing queued")
	for i := range 50 {
		require.NoError(t, s.Send(peerOf(r, secret), wake(fmt.Sprint("k", i))))
	}
	require.NoError(t, s.Drain(ctx))
	require.Equal(t, uint64(50), s.Stats().Sent+s.Stats().Dropped)
	for range 50 {
		sink.next(t)
	}

	// A peer that accepts nothing: the dial hangs until DialTimeout.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	blocked, _ := startSender(t, SenderOptions{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}, DialTimeout: time.Hour})
	require.NoError(t, blocked.Send(Peer{Addr: ln.Addr().String(), Secret: secret}, wake("stuck")))
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, blocked.Drain(short), context.DeadlineExceeded)
}

func TestSenderSendValidation(t *testing.T) {
	s, _ := startSender(t, SenderOptions{})
	secret := mustSecret(t)
	require.ErrorIs(t, s.Send(Peer{Addr: "127.0.0.1:1", Secret: secret}, Wake{Hub: HubWorker, Slot: 300, Key: "k"}), ErrInvalidWake)
	require.ErrorIs(t, s.Send(Peer{Addr: "127.0.0.1:1", Secret: secret}, Wake{Hub: HubWorker, Slot: 3}), ErrInvalidWake)
	require.ErrorIs(t, s.Send(Peer{Addr: "127.0.0.1:1", Secret: secret}, Wake{Hub: HubChanged, Slot: 3, Key: "k"}), ErrInvalidWake, "replies travel only from receivers")
	require.ErrorIs(t, s.Send(Peer{Addr: "127.0.0.1:1", Secret: secret}, Wake{Hub: HubWatch, Slot: 256, Key: "k"}), ErrInvalidWake)
	require.Error(t, s.Send(Peer{Secret: secret}, wake("k")))
	require.Error(t, s.Send(Peer{Addr: "127.0.0.1:1"}, wake("k")))
	require.Equal(t, SenderStats{}, s.Stats(), "nothing queued, nothing counted")
}

func TestSenderSendAfterClose(t *testing.T) {
	secret := mustSecret(t)
	r, sink := startReceiver(t, ReceiverOptions{Secret: secret})
	s, err := NewSender(SenderOptions{})
	require.NoError(t, err)
	require.NoError(t, s.Send(peerOf(r, secret), wake("before")))
	sink.next(t)
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Send(peerOf(r, secret), wake("after")), ErrClosed)
	require.ErrorIs(t, s.Send(Peer{Addr: "127.0.0.1:1", Secret: secret}, wake("after")), ErrClosed)
	require.NoError(t, s.Close())
	require.Equal(t, 0, s.Stats().Peers)
	require.Equal(t, int64(1), sink.n.Load())
}

// A receiver restarted on a new port: the sender, still given the old
// address, drops (and counts) without blocking the caller, and backs off
// instead of redialling for every wake; the new address works.
func TestSenderStaleAddress(t *testing.T) {
	secret := mustSecret(t)
	old, _ := startReceiver(t, ReceiverOptions{Secret: secret})
	stale := peerOf(old, secret)
	require.NoError(t, old.Close())

	s, probe := startSender(t, SenderOptions{MinBackoff: time.Hour, MaxBackoff: time.Hour})
	require.NoError(t, s.Send(stale, wake("lost-1")))
	waitFor(t, probe.batches, "first batch")
	st := s.Stats()
	require.Equal(t, uint64(1), st.DialFailures)
	require.Equal(t, uint64(1), st.Dropped)
	require.Zero(t, st.Sent)
	// Backing off: dropped without a dial.
	require.NoError(t, s.Send(stale, wake("lost-2")))
	waitFor(t, probe.batches, "second batch")
	st = s.Stats()
	require.Equal(t, uint64(1), st.DialFailures)
	require.Equal(t, uint64(2), st.Dropped)

	secret2 := mustSecret(t)
	fresh, sink := startReceiver(t, ReceiverOptions{Secret: secret2})
	require.NoError(t, s.Send(peerOf(fresh, secret2), wake("found")))
	require.Equal(t, "found", sink.next(t).Key)
	require.Equal(t, 2, s.Stats().Peers)
}

// Send never waits for the network: with the dial stuck, the queue fills
// and further wakes are dropped at once; Close cuts the dial short.
func TestSenderNeverBlocks(t *testing.T) {
	entered := make(chan struct{}, 1)
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		entered <- struct{}{}
		<-ctx.Done() // a peer that never answers
		return nil, ctx.Err()
	}
	s, err := NewSender(SenderOptions{QueueLen: 2, DialTimeout: time.Hour, Dial: dial})
	require.NoError(t, err)
	to := Peer{Addr: "10.255.255.1:7070", Secret: mustSecret(t)}
	require.NoError(t, s.Send(to, wake("1")))
	waitFor(t, entered, "dial")
	require.NoError(t, s.Send(to, wake("2")))
	require.NoError(t, s.Send(to, wake("3")))
	require.ErrorIs(t, s.Send(to, wake("4")), ErrQueueFull)
	require.Equal(t, uint64(1), s.Stats().Dropped)
	require.NoError(t, s.Close())
	st := s.Stats()
	require.Equal(t, uint64(4), st.Dropped, "the full queue, the wake being dialled for, the queued ones")
	require.Zero(t, st.DialFailures, "a dial cut short by Close is no failure")
	require.Zero(t, st.Sent)
	require.Zero(t, st.Peers)
}

// A write that fails drops its frames, counts, and the next wake redials
// (after the backoff).
func TestSenderWriteFailures(t *testing.T) {
	tests := []struct {
		name string
		peer func(net.Conn) // what the other end of the pipe does
	}{
		{"peer closed", func(c net.Conn) { _ = c.Close() }},
		{"peer does not read", func(net.Conn) {}}, // the write deadline fires
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var dials atomic.Int64
			var ends []net.Conn
			var mu sync.Mutex
			dial := func(context.Context, string, string) (net.Conn, error) {
				dials.Add(1)
				a, b := net.Pipe()
				mu.Lock()
				ends = append(ends, b)
				mu.Unlock()
				tt.peer(b)
				return a, nil
			}
			t.Cleanup(func() {
				mu.Lock()
				defer mu.Unlock()
				for _, c := range ends {
					_ = c.Close()
				}
			})
			s, probe := startSender(t, SenderOptions{Dial: dial, WriteTimeout: 10 * time.Millisecond, MinBackoff: time.Nanosecond, MaxBackoff: time.Nanosecond})
			to := Peer{Addr: "peer:1", Secret: mustSecret(t)}
			for i := range 3 {
				require.NoError(t, s.Send(to, wake(fmt.Sprint(i))))
				waitFor(t, probe.batches, "batch")
			}
			st := s.Stats()
			require.Equal(t, uint64(3), st.WriteFailures)
			require.Equal(t, uint64(3), st.Dropped)
			require.Zero(t, st.Sent)
			require.Equal(t, int64(3), dials.Load(), "each failure closes the connection")
		})
	}
}

// Close interrupts a write stuck on a peer that does not read.
func TestSenderCloseInterruptsWrite(t *testing.T) {
	dialed := make(chan struct{}, 1)
	var other net.Conn
	dial := func(context.Context, string, string) (net.Conn, error) {
		a, b := net.Pipe()
		other = b
		dialed <- struct{}{}
		return a, nil
	}
	s, err := NewSender(SenderOptions{Dial: dial, WriteTimeout: time.Hour})
	require.NoError(t, err)
	require.NoError(t, s.Send(Peer{Addr: "peer:1", Secret: mustSecret(t)}, wake("stuck")))
	waitFor(t, dialed, "dial")
	defer func() { _ = other.Close() }()
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	require.NoError(t, waitFor(t, closed, "Close"))
	st := s.Stats()
	require.Equal(t, uint64(1), st.Dropped)
	require.Zero(t, st.WriteFailures, "interrupted by Close: no failure")
}

// A peer's goroutine and connection end after IdleTimeout without wakes,
// and the next Send starts them again.
func TestSenderIdle(t *testing.T) {
	secret := mustSecret(t)
	r, sink := startReceiver(t, ReceiverOptions{Secret: secret})
	s, probe := startSender(t, SenderOptions{IdleTimeout: 20 * time.Millisecond})
	for i := range 3 {
		require.NoError(t, s.Send(peerOf(r, secret), wake(fmt.Sprint(i))))
		require.Equal(t, fmt.Sprint(i), sink.next(t).Key)
		require.Equal(t, r.Addr().String(), waitFor(t, probe.exits, "idle exit"))
		require.Equal(t, 0, s.Stats().Peers)
	}
	require.Equal(t, uint64(3), s.Stats().Sent)
	require.Equal(t, uint64(3), r.Stats().ConnsAccepted, "a connection per active period")
}

// Concurrent Sends from many goroutines to several peers: every wake is
// delivered exactly once.
func TestSenderConcurrent(t *testing.T) {
	const goroutines, perG = 16, 100
	secrets := []Secret{mustSecret(t), mustSecret(t)}
	var peers []Peer
	var sinks []*wakeSink
	for _, sec := range secrets {
		r, sink := startReceiver(t, ReceiverOptions{Secret: sec})
		peers = append(peers, peerOf(r, sec))
		sinks = append(sinks, sink)
	}
	s, _ := startSender(t, SenderOptions{QueueLen: goroutines * perG})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				if err := s.Send(peers[(g+i)%2], wake(fmt.Sprintf("%d-%d", g, i))); err != nil {
					t.Error(err)
					return
				}
				_ = s.Stats()
			}
		})
	}
	wg.Wait()
	seen := make(map[string]bool)
	for range goroutines * perG / 2 {
		for _, sink := range sinks {
			k := sink.next(t).Key
			require.False(t, seen[k], "duplicate %s", k)
			seen[k] = true
		}
	}
	require.Len(t, seen, goroutines*perG)
	for _, sink := range sinks {
		select {
		case w := <-sink.ch:
			t.Fatalf("extra wake %v", w.Key)
		default:
		}
	}
	require.Zero(t, s.Stats().Dropped)
}

// A sender whose clock is skewed beyond the window has its wakes refused;
// the connection stays up for when the clock comes back.
func TestSenderSkewedClock(t *testing.T) {
	secret := mustSecret(t)
	r, sink := startReceiver(t, ReceiverOptions{Secret: secret})
	var skew atomic.Int64
	skew.Store(int64(-time.Hour))
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	s, probe := startSender(t, SenderOptions{Now: now})
	require.NoError(t, s.Send(peerOf(r, secret), wake("skewed")))
	waitFor(t, probe.batches, "batch")
	skew.Store(0)
	require.NoError(t, s.Send(peerOf(r, secret), wake("on time")))
	require.Equal(t, "on time", sink.next(t).Key)
	st := r.Stats()
	require.Equal(t, uint64(1), st.Stale)
	require.Equal(t, uint64(1), st.Accepted)
	require.Equal(t, uint64(1), st.ConnsAccepted)
}

// A peer is its address and secret: a stale secret for a live address is
// refused (UnknownKey) without disturbing wakes sent with the current one.
func TestSenderPeerIdentity(t *testing.T) {
	current, old := mustSecret(t), mustSecret(t)
	r, sink := startReceiver(t, ReceiverOptions{Secret: current})
	s, probe := startSender(t, SenderOptions{MinBackoff: time.Hour, MaxBackoff: time.Hour})
	require.NoError(t, s.Send(peerOf(r, old), wake("old")))
	waitFor(t, probe.batches, "old batch")
	require.NoError(t, s.Send(peerOf(r, current), wake("current")))
	require.Equal(t, "current", sink.next(t).Key)
	require.Equal(t, 2, s.Stats().Peers)
	require.Zero(t, sink.n.Load()-1)
}

// After the receiver at an address restarts (same address and secret), the
// sender notices the closed connection and reconnects.
func TestSenderReconnects(t *testing.T) {
	secret := mustSecret(t)
	r1, sink1 := startReceiver(t, ReceiverOptions{Secret: secret})
	addr := r1.Addr().String()
	s, _ := startSender(t, SenderOptions{MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	to := Peer{Addr: addr, Secret: secret}
	require.NoError(t, s.Send(to, wake("first")))
	require.Equal(t, "first", sink1.next(t).Key)
	require.NoError(t, r1.Close())

	r2, sink2 := startReceiver(t, ReceiverOptions{Secret: secret, Listen: addr})
	// Wakes sent while the sender has not yet noticed the closed
	// connection, or is backing off, are lost; keep sending until one
	// arrives.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(hangDeadline)
	for i := 0; ; i++ {
		require.NoError(t, ignoreFull(s.Send(to, wake(fmt.Sprint("retry-", i)))))
		select {
		case <-sink2.ch:
			require.Equal(t, uint64(1), r2.Stats().ConnsAccepted)
			return
		case <-tick.C:
		case <-deadline:
			t.Fatal("sender never reconnected")
		}
	}
}

func ignoreFull(err error) error {
	if errors.Is(err, ErrQueueFull) {
		return nil
	}
	return err
}

func TestSenderBackoff(t *testing.T) {
	s := &Sender{opts: SenderOptions{MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}}
	tests := []struct {
		fails    int
		min, max time.Duration
	}{
		{1, 50 * time.Millisecond, 100 * time.Millisecond},
		{2, 100 * time.Millisecond, 200 * time.Millisecond},
		{4, 400 * time.Millisecond, 800 * time.Millisecond},
		{5, 500 * time.Millisecond, time.Second},
		{100, 500 * time.Millisecond, time.Second},
	}
	for _, tt := range tests {
		for range 100 {
			d := s.backoff(tt.fails)
			require.GreaterOrEqual(t, d, tt.min, "fails %d", tt.fails)
			require.LessOrEqual(t, d, tt.max, "fails %d", tt.fails)
		}
	}
	s.opts.MinBackoff, s.opts.MaxBackoff = time.Nanosecond, time.Nanosecond
	require.Equal(t, time.Nanosecond, s.backoff(3))
}
