package peerwake

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestNewReceiverOptions(t *testing.T) {
	s := mustSecret(t)
	on := func(Wake) {}
	tests := []struct {
		name string
		opts ReceiverOptions
		ok   bool
	}{
		{"minimal", ReceiverOptions{Listen: "127.0.0.1:0", Secret: s, OnWake: on}, true},
		{"no secret", ReceiverOptions{Listen: "127.0.0.1:0", OnWake: on}, false},
		{"no OnWake", ReceiverOptions{Listen: "127.0.0.1:0", Secret: s}, false},
		{"sub-ms window", ReceiverOptions{Listen: "127.0.0.1:0", Secret: s, OnWake: on, Window: time.Microsecond}, false},
		{"negative window", ReceiverOptions{Listen: "127.0.0.1:0", Secret: s, OnWake: on, Window: -time.Second}, false},
		{"negative MaxConns", ReceiverOptions{Listen: "127.0.0.1:0", Secret: s, OnWake: on, MaxConns: -1}, false},
		{"negative MaxRate", ReceiverOptions{Listen: "127.0.0.1:0", Secret: s, OnWake: on, MaxRate: -1}, false},
		{"huge MaxRate", ReceiverOptions{Listen: "127.0.0.1:0", Secret: s, OnWake: on, MaxRate: 1 << 40}, false},
		{"negative Burst", ReceiverOptions{Listen: "127.0.0.1:0", Secret: s, OnWake: on, Burst: -1}, false},
		{"negative cache", ReceiverOptions{Listen: "127.0.0.1:0", Secret: s, OnWake: on, ReplayCacheSize: -1}, false},
		{"negative idle", ReceiverOptions{Listen: "127.0.0.1:0", Secret: s, OnWake: on, IdleTimeout: -1}, false},
		{"negative reply write timeout", ReceiverOptions{Listen: "127.0.0.1:0", Secret: s, OnWake: on, ReplyWriteTimeout: -1}, false},
		{"bad address", ReceiverOptions{Listen: "127.0.0.1:99999", Secret: s, OnWake: on}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewReceiver(tt.opts)
			if !tt.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.NotNil(t, r.Addr())
			require.Equal(t, s.KeyID(), r.KeyID())
			require.Equal(t, DefaultMaxConns, r.maxConns)
			require.Equal(t, DefaultWindow.Milliseconds(), r.windowMs)
			require.Equal(t, DefaultMaxRate*30+DefaultMaxRate, r.gate.limit)
			require.Equal(t, DefaultWriteTimeout, r.replyTimeout)
			require.NoError(t, r.Close())
			require.NoError(t, r.Close(), "Close is idempotent")
		})
	}
}

func TestReceiverDelivers(t *testing.T) {
	clk := newFakeClock()
	s := mustSecret(t)
	r, sink := startReceiver(t, ReceiverOptions{Secret: s, Now: clk.Now})
	c := dialRaw(t, r)
	w1 := Wake{Hub: HubOrchestrator, Slot: 0, Key: "instance-1", VisibleAt: t0.Add(5 * time.Second)}
	w2 := Wake{Hub: HubWorker, Slot: 255, Key: "instance-2"}
	write(t, c, encode(s, clk.Now(), nonceOf(1), w1), encode(s, clk.Now(), nonceOf(2), w2))
	got := sink.next(t)
	require.Equal(t, w1.Key, got.Key)
	require.Equal(t, w1.Hub, got.Hub)
	require.Equal(t, w1.Slot, got.Slot)
	require.True(t, w1.VisibleAt.Equal(got.VisibleAt))
	got = sink.next(t)
	require.Equal(t, w2.Key, got.Key)
	require.True(t, got.VisibleAt.IsZero())
	flush(t, c)
	st := r.Stats()
	require.Equal(t, uint64(2), st.Accepted)
	require.Equal(t, uint64(1), st.BadFrames) // the flush
	require.Equal(t, uint64(1), st.ConnsAccepted)
}

// Frames a receiver must refuse, one connection each. closes says whether
// the receiver closes the connection; otherwise a flush proves it stayed
// open and processed everything.
func TestReceiverRefuses(t *testing.T) {
	s, other := mustSecret(t), mustSecret(t)
	const window = 30 * time.Second
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	valid := encode(s, t0, nonceOf(1), wake("i"))
	forged := appendFrame(nil, newMAC(other), s.KeyID(), t0, nonceOf(2), wake("i"))
	flipped := append([]byte(nil), valid...)
	flipped[len(flipped)-1] ^= 1
	badVersion := append([]byte(nil), valid...)
	badVersion[prefixBytes] = 0
	badLen := append([]byte(nil), valid...) // prefix says one byte more
	binary.BigEndian.PutUint16(badLen, uint16(len(valid)-prefixBytes+1))
	badLen = append(badLen, 0)
	watch := Wake{Hub: HubWatch, Slot: 42, Key: "i"}
	changed := Wake{Hub: HubChanged, Slot: 42, Key: "i"}
	sign := func(version byte, w Wake, nonce uint64) []byte {
		return appendFrameVersion(nil, version, newMAC(s), s.KeyID(), t0, nonceOf(nonce), w)
	}

	type stats = ReceiverStats
	tests := []struct {
		name   string
		frames [][]byte
		closes bool
		wakes  int
		want   stats // counters compared: Accepted, BadFrames, UnknownKey, BadMAC, Stale, Replayed
	}{
		{"valid", [][]byte{valid}, false, 1, stats{Accepted: 1}},
		{"forged MAC", [][]byte{forged}, true, 0, stats{BadMAC: 1}},
		{"flipped MAC bit", [][]byte{flipped}, true, 0, stats{BadMAC: 1}},
		{"unknown key id", [][]byte{encode(other, t0, nonceOf(3), wake("i"))}, true, 0, stats{UnknownKey: 1}},
		{"bad version", [][]byte{badVersion}, true, 0, stats{BadFrames: 1}},
		{"length prefix disagrees with key length", [][]byte{badLen}, true, 0, stats{BadFrames: 1}},
		// The oversize prefix is refused without waiting for a body that
		// never comes (the idle timeout is far beyond the hang deadline).
		{"oversize prefix, no body", [][]byte{{0xFF, 0xFF}}, true, 0, stats{BadFrames: 1}},
		{"prefix just over max", [][]byte{binary.BigEndian.AppendUint16(nil, MaxFrameBytes+1)}, true, 0, stats{BadFrames: 1}},
		{"zero prefix", [][]byte{{0, 0}}, true, 0, stats{BadFrames: 1}},
		{"prefix just under min", [][]byte{binary.BigEndian.AppendUint16(nil, MinFrameBytes-1)}, true, 0, stats{BadFrames: 1}},
		{"garbage", [][]byte{[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")}, true, 0, stats{BadFrames: 1}},
		{"stale", [][]byte{encode(s, at(-window-time.Millisecond), nonceOf(4), wake("i"))}, false, 0, stats{Stale: 1}},
		{"future", [][]byte{encode(s, at(window+time.Millisecond), nonceOf(5), wake("i"))}, false, 0, stats{Stale: 1}},
		{"window edge past", [][]byte{encode(s, at(-window), nonceOf(6), wake("i"))}, false, 1, stats{Accepted: 1}},
		{"window edge future", [][]byte{encode(s, at(window), nonceOf(7), wake("i"))}, false, 1, stats{Accepted: 1}},
		{"stale then valid on the same connection", [][]byte{encode(s, at(-time.Hour), nonceOf(8), wake("i")), valid}, false, 1, stats{Accepted: 1, Stale: 1}},
		{"replay", [][]byte{valid, valid}, true, 1, stats{Accepted: 1, Replayed: 1}},
		{"replay then fresh nonce is not read", [][]byte{valid, valid, encode(s, t0, nonceOf(9), wake("i"))}, true, 1, stats{Accepted: 1, Replayed: 1}},
		{"watch", [][]byte{encode(s, t0, nonceOf(10), watch)}, false, 1, stats{Accepted: 1}},
		{"wake with version 0xD2", [][]byte{sign(frameVersionWatch, wake("i"), 11)}, false, 1, stats{Accepted: 1}},
		{"watch with version 0xD1", [][]byte{sign(frameVersion, watch, 12)}, true, 0, stats{BadFrames: 1}},
		{"changed", [][]byte{encode(s, t0, nonceOf(13), changed)}, true, 0, stats{BadFrames: 1}},
		{"changed with version 0xD1", [][]byte{sign(frameVersion, changed, 14)}, true, 0, stats{BadFrames: 1}},
		{"valid then changed", [][]byte{valid, encode(s, t0, nonceOf(15), changed)}, true, 1, stats{Accepted: 1, BadFrames: 1}},
		{"version 0xD3", [][]byte{sign(0xD3, wake("i"), 16)}, true, 0, stats{BadFrames: 1}},
		{"stale watch", [][]byte{encode(s, at(-time.Hour), nonceOf(17), watch)}, false, 0, stats{Stale: 1}},
		{"replayed watch", [][]byte{encode(s, t0, nonceOf(18), watch), encode(s, t0, nonceOf(18), watch)}, true, 1, stats{Accepted: 1, Replayed: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			r, sink := startReceiver(t, ReceiverOptions{Secret: s, Now: clk.Now, Window: window})
			c := dialRaw(t, r)
			for _, f := range tt.frames {
				_, _ = c.Write(f) // may fail once the receiver has closed
			}
			if tt.closes {
				requireClosedByPeer(t, c)
			} else {
				flush(t, c)
				tt.want.BadFrames++ // the flush
			}
			st := r.Stats()
			require.Equal(t, tt.want, stats{
				Accepted: st.Accepted, BadFrames: st.BadFrames, UnknownKey: st.UnknownKey,
				BadMAC: st.BadMAC, Stale: st.Stale, Replayed: st.Replayed,
			})
			require.Equal(t, int64(tt.wakes), sink.n.Load())
		})
	}
}

// Frames cut short by the end of the connection count as malformed.
func TestReceiverTruncated(t *testing.T) {
	s := mustSecret(t)
	valid := encode(s, t0, nonceOf(1), wake("instance"))
	for _, n := range []int{1, prefixBytes, prefixBytes + 1, prefixBytes + headerBytes, len(valid) - 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			clk := newFakeClock()
			r, sink := startReceiver(t, ReceiverOptions{Secret: s, Now: clk.Now})
			c := dialRaw(t, r)
			write(t, c, valid[:n])
			require.NoError(t, c.(*net.TCPConn).CloseWrite())
			requireClosedByPeer(t, c)
			require.Equal(t, uint64(1), r.Stats().BadFrames)
			require.Zero(t, sink.n.Load())
		})
	}
}

// A replay on another connection is refused too.
func TestReceiverReplayAcrossConnections(t *testing.T) {
	clk := newFakeClock()
	s := mustSecret(t)
	r, sink := startReceiver(t, ReceiverOptions{Secret: s, Now: clk.Now})
	f := encode(s, clk.Now(), nonceOf(1), wake("i"))
	a := dialRaw(t, r)
	write(t, a, f)
	sink.next(t)
	b := dialRaw(t, r)
	write(t, b, f)
	requireClosedByPeer(t, b)
	// A fresh nonce is accepted, on a fresh connection, and the first
	// connection is still open.
	write(t, dialRaw(t, r), encode(s, clk.Now(), nonceOf(2), wake("i")))
	sink.next(t)
	write(t, a, encode(s, clk.Now(), nonceOf(3), wake("i")))
	sink.next(t)
	st := r.Stats()
	require.Equal(t, uint64(3), st.Accepted)
	require.Equal(t, uint64(1), st.Replayed)
}

// However many forged frames arrive, none reaches OnWake, every
// connection that carried one is closed, and the receiver keeps serving.
func TestReceiverForgedFlood(t *testing.T) {
	clk := newFakeClock()
	s, other := mustSecret(t), mustSecret(t)
	r, sink := startReceiver(t, ReceiverOptions{Secret: s, Now: clk.Now, MaxConns: 8})
	valid := encode(s, clk.Now(), nonceOf(0), wake("victim"))
	forgeries := func(i int) []byte {
		switch i % 5 {
		case 0: // signed with another secret, claiming ours
			return appendFrame(nil, newMAC(other), s.KeyID(), clk.Now(), nonceOf(uint64(i)), wake("victim"))
		case 1: // signed with another secret, naming it
			return encode(other, clk.Now(), nonceOf(uint64(i)), wake("victim"))
		case 2: // a valid frame with one byte changed
			b := append([]byte(nil), valid...)
			b[prefixBytes+i%(len(valid)-prefixBytes)] ^= byte(1 + i%255)
			return b
		case 3: // random MAC
			b := append([]byte(nil), valid...)
			copy(b[len(b)-MACBytes:], fmt.Sprintf("%032d", i))
			return b
		default: // garbage
			return []byte(fmt.Sprintf("\x00\x50%078d", i))
		}
	}
	const n = 200
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < n; i += 4 {
				c, err := net.DialTimeout("tcp", r.Addr().String(), hangDeadline)
				if !assertNoError(t, err) {
					return
				}
				_ = c.SetDeadline(time.Now().Add(hangDeadline))
				// Several forgeries on one connection: the first closes it.
				for range 3 {
					_, _ = c.Write(forgeries(i))
				}
				requireClosedByPeerAsync(t, c)
				_ = c.Close()
			}
		})
	}
	wg.Wait()
	require.Zero(t, sink.n.Load())
	st := r.Stats()
	require.Equal(t, uint64(n), st.BadMAC+st.UnknownKey+st.BadFrames)
	require.Zero(t, st.Accepted)
	// Still serving.
	write(t, dialRaw(t, r), valid)
	require.Equal(t, "victim", sink.next(t).Key)
}

// assertNoError and requireClosedByPeerAsync are for goroutines other than
// the test's, where FailNow must not be called.
func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

func requireClosedByPeerAsync(t *testing.T, c net.Conn) {
	t.Helper()
	var b [1]byte
	_, err := c.Read(b[:])
	if ne, ok := err.(net.Error); err == nil || ok && ne.Timeout() {
		t.Errorf("connection not closed by the receiver: %v", err)
	}
}

// With MaxConns authenticated connections open, one more is closed at
// once; with unauthenticated ones among them, the oldest of those is
// evicted instead.
func TestReceiverMaxConns(t *testing.T) {
	tests := []struct {
		name    string
		authed  []bool // per connection opened before the extra one
		evicted int    // index of the connection evicted; -1: the extra one is refused
	}{
		{"all authenticated: refuse", []bool{true, true, true}, -1},
		{"none authenticated: evict oldest", []bool{false, false, false}, 0},
		{"evict oldest unauthenticated", []bool{true, false, false}, 1},
		{"evict the only unauthenticated", []bool{true, true, false}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			s := mustSecret(t)
			r, sink := startReceiver(t, ReceiverOptions{Secret: s, Now: clk.Now, MaxConns: len(tt.authed)})
			conns := make([]net.Conn, len(tt.authed))
			for i, authed := range tt.authed {
				conns[i] = dialRaw(t, r)
				if authed {
					write(t, conns[i], encode(s, clk.Now(), nonceOf(uint64(i)), wake("i")))
					sink.next(t) // processed: accepted and marked
				}
			}
			// The accept loop takes connections in order, so all of the
			// above are registered before the extra one is considered.
			extra := dialRaw(t, r)
			if tt.evicted < 0 {
				requireClosedByPeer(t, extra)
				require.Equal(t, uint64(1), r.Stats().ConnsRefused)
				require.Equal(t, uint64(len(tt.authed)), r.Stats().ConnsAccepted)
				return
			}
			requireClosedByPeer(t, conns[tt.evicted])
			// The extra connection serves.
			write(t, extra, encode(s, clk.Now(), nonceOf(100), wake("extra")))
			require.Equal(t, "extra", sink.next(t).Key)
			st := r.Stats()
			require.Equal(t, uint64(1), st.ConnsEvicted)
			require.Zero(t, st.ConnsRefused)
			require.LessOrEqual(t, st.Conns, len(tt.authed))
			// The other connections still serve.
			for i, c := range conns {
				if i == tt.evicted {
					continue
				}
				write(t, c, encode(s, clk.Now(), nonceOf(uint64(200+i)), wake("kept")))
				require.Equal(t, "kept", sink.next(t).Key)
			}
		})
	}
}

// The rate limit bounds OnWake calls whatever is sent: with a frozen
// clock, exactly Burst wakes pass; each second adds MaxRate more.
func TestReceiverMaxRate(t *testing.T) {
	clk := newFakeClock()
	s := mustSecret(t)
	r, sink := startReceiver(t, ReceiverOptions{Secret: s, Now: clk.Now, MaxRate: 2, Burst: 3})
	nonce := uint64(0)
	burst := func(n int) {
		c := dialRaw(t, r)
		for range n {
			nonce++
			write(t, c, encode(s, clk.Now(), nonceOf(nonce), wake("i")))
		}
		flush(t, c)
	}
	burst(10)
	st := r.Stats()
	require.Equal(t, uint64(3), st.Accepted)
	require.Equal(t, uint64(7), st.RateLimited)
	require.Equal(t, uint64(1), st.BadFrames, "rate-limited frames leave the connection open")
	clk.Advance(time.Second)
	burst(10)
	st = r.Stats()
	require.Equal(t, uint64(5), st.Accepted)
	require.Equal(t, uint64(15), st.RateLimited)
	clk.Advance(time.Hour)
	burst(10)
	require.Equal(t, uint64(8), r.Stats().Accepted, "refill capped at Burst")
	require.Equal(t, int64(8), sink.n.Load())
}

func TestReceiverSetSecret(t *testing.T) {
	clk := newFakeClock()
	old, next := mustSecret(t), mustSecret(t)
	r, sink := startReceiver(t, ReceiverOptions{Secret: old, Now: clk.Now})
	c := dialRaw(t, r)
	write(t, c, encode(old, clk.Now(), nonceOf(1), wake("old")))
	require.Equal(t, "old", sink.next(t).Key)

	require.Error(t, r.SetSecret(Secret{}))
	require.NoError(t, r.SetSecret(next))
	require.Equal(t, next.KeyID(), r.KeyID())
	// The old key is refused, on the open connection too.
	write(t, c, encode(old, clk.Now(), nonceOf(2), wake("old")))
	requireClosedByPeer(t, c)
	require.Equal(t, uint64(1), r.Stats().UnknownKey)
	write(t, dialRaw(t, r), encode(next, clk.Now(), nonceOf(3), wake("new")))
	require.Equal(t, "new", sink.next(t).Key)
	require.Equal(t, int64(2), sink.n.Load())
}

func TestReceiverIdleTimeout(t *testing.T) {
	s := mustSecret(t)
	r, _ := startReceiver(t, ReceiverOptions{Secret: s, IdleTimeout: 50 * time.Millisecond})
	requireClosedByPeer(t, dialRaw(t, r))
	require.Zero(t, r.Stats().BadFrames, "idling out is not a bad frame")
}

// Close returns with connections open (their goroutines stopped), and no
// wake is delivered after it returns.
func TestReceiverClose(t *testing.T) {
	clk := newFakeClock()
	s := mustSecret(t)
	sink := newWakeSink()
	r, err := NewReceiver(ReceiverOptions{Listen: "127.0.0.1:0", Secret: s, Now: clk.Now, OnWake: sink.onWake})
	require.NoError(t, err)
	conns := make([]net.Conn, 5)
	for i := range conns {
		conns[i] = dialRaw(t, r)
		write(t, conns[i], encode(s, clk.Now(), nonceOf(uint64(i)), wake("i")))
		sink.next(t)
	}
	require.Equal(t, 5, r.Stats().Conns)
	require.NoError(t, r.Close())
	require.Equal(t, 0, r.Stats().Conns)
	for _, c := range conns {
		requireClosedByPeer(t, c)
	}
	_, err = net.DialTimeout("tcp", r.Addr().String(), hangDeadline)
	require.Error(t, err, "listener closed")
	require.NoError(t, r.Close())
	require.Equal(t, int64(5), sink.n.Load())
}

// The logs name no key, secret or instance.
func TestReceiverLogsNoSecrets(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	clk := newFakeClock()
	s, other := mustSecret(t), mustSecret(t)
	r, sink := startReceiver(t, ReceiverOptions{Secret: s, Now: clk.Now, Logger: zap.New(core), MaxConns: 1})
	a := dialRaw(t, r)
	write(t, a, encode(s, clk.Now(), nonceOf(1), wake("secret-instance-id")))
	sink.next(t)
	requireClosedByPeer(t, dialRaw(t, r)) // refused: MaxConns
	write(t, a, encode(other, clk.Now(), nonceOf(2), wake("secret-instance-id")))
	requireClosedByPeer(t, a)
	require.NoError(t, r.Close())
	require.NotZero(t, logs.Len())
	for _, e := range logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		for _, bad := range []string{"secret-instance-id", s.Encode(), other.Encode(), fmt.Sprint(s[:])} {
			require.NotContains(t, line, bad)
		}
	}
}
