package peerwake

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// hangDeadline bounds every blocking step of a test: it only catches hangs,
// no test relies on it passing or not.
const hangDeadline = 20 * time.Second

// t0 is an arbitrary wall-clock instant for injected clocks.
var t0 = time.Date(2026, 3, 14, 15, 9, 26, 535_000_000, time.UTC)

// fakeClock is a manual clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func mustSecret(t testing.TB) Secret {
	t.Helper()
	s, err := NewSecret()
	require.NoError(t, err)
	return s
}

// nonceOf returns a nonce made from i, so that tests control uniqueness.
func nonceOf(i uint64) [nonceBytes]byte {
	var n [nonceBytes]byte
	for b := range n {
		n[b] = byte(i >> (8 * b))
	}
	return n
}

// encode returns w's frame signed with s, length prefix included.
func encode(s Secret, sentAt time.Time, nonce [nonceBytes]byte, w Wake) []byte {
	return appendFrame(nil, newMAC(s), s.KeyID(), sentAt, nonce, w)
}

// directionOf is the direction a frame of hub travels in.
func directionOf(hub byte) direction {
	if hub == HubChanged {
		return toSender
	}
	return toReceiver
}

// body strips the length prefix of an encoded frame.
func body(b []byte) []byte { return b[prefixBytes:] }

func wake(key string) Wake {
	return Wake{Hub: HubOrchestrator, Slot: 42, Key: key, VisibleAt: t0}
}

// wakeSink collects OnWake calls.
type wakeSink struct {
	ch chan Wake
	n  atomic.Int64
}

func newWakeSink() *wakeSink { return &wakeSink{ch: make(chan Wake, 1<<14)} }

func (s *wakeSink) onWake(w Wake) {
	s.n.Add(1)
	select {
	case s.ch <- w:
	default:
		panic("wakeSink full") // tests never send that many
	}
}

// next waits for the next wake.
func (s *wakeSink) next(t testing.TB) Wake {
	t.Helper()
	select {
	case w := <-s.ch:
		return w
	case <-time.After(hangDeadline):
		t.Fatal("no wake delivered")
		return Wake{}
	}
}

// startReceiver starts a receiver on loopback; Close is registered as
// cleanup.
func startReceiver(t testing.TB, opts ReceiverOptions) (*Receiver, *wakeSink) {
	t.Helper()
	sink := newWakeSink()
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.OnWake == nil {
		opts.OnWake = sink.onWake
	}
	r, err := NewReceiver(opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	return r, sink
}

// dialRaw opens a raw client connection whose every operation is bounded by
// hangDeadline.
func dialRaw(t testing.TB, r *Receiver) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", r.Addr().String(), hangDeadline)
	require.NoError(t, err)
	require.NoError(t, c.SetDeadline(time.Now().Add(hangDeadline)))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// requireClosedByPeer asserts that the receiver closed c: a read ends with
// EOF or a reset, not with the hang deadline.
func requireClosedByPeer(t testing.TB, c net.Conn) {
	t.Helper()
	var b [1]byte
	_, err := c.Read(b[:])
	require.Error(t, err)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("connection not closed by the receiver")
	}
	// io.EOF, or a reset when the receiver closed with unread input.
}

// flush writes an oversize length prefix, which makes the receiver close
// the connection, and waits for that: every frame written before it has
// then been processed.
func flush(t testing.TB, c net.Conn) {
	t.Helper()
	_, err := c.Write([]byte{0xFF, 0xFF})
	require.NoError(t, err)
	requireClosedByPeer(t, c)
}

func write(t testing.TB, c net.Conn, frames ...[]byte) {
	t.Helper()
	for _, f := range frames {
		_, err := c.Write(f)
		require.NoError(t, err)
	}
}
