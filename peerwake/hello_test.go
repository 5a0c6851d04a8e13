package peerwake

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The hello frame's encoding is a wire format between versions: pinned
// byte for byte (fixed secret, time and nonce), field by field.
func TestHelloFrameEncoding(t *testing.T) {
	const golden = "004f" + // length prefix: 79 bytes
		"d3" + // version 0xD3
		"ed62210feba27dc4" + // KeyID of fuzzSecret
		"0000019cece52687" + // sent-at, Unix ms
		"0100000000000000" + // nonce
		"68" + // hub 'h'
		"0000" + // slot 0
		"ffffc77cedd32800" + // visible-at: the zero time, unused
		"0009" + "7265706c6963612d62" + // the sender's name, "replica-b"
		"d81e53a5656049d751ef5bf411e6dbfbcd6e9eea59d4f4ea006af3185ba21870" // HMAC-SHA256
	want, err := hex.DecodeString(golden)
	require.NoError(t, err)
	got := appendFrame(nil, newMAC(fuzzSecret), fuzzSecret.KeyID(), t0, nonceOf(1), Wake{Hub: hubHello, Key: "replica-b"})
	require.Equal(t, want, got)

	f, err := authenticate(body(got), toReceiver, fuzzSecret.KeyID(), newMAC(fuzzSecret), nil)
	require.NoError(t, err)
	require.Equal(t, frameVersionHello, f.version)
	require.Equal(t, hubHello, f.wake.Hub)
	require.Equal(t, "replica-b", f.wake.Key)
	require.Zero(t, f.wake.Slot)
	require.Equal(t, t0.UnixMilli(), f.sentAt)
}

// Which version bytes and directions take a hello, and what a hello may
// carry. The first versions' frames are unchanged (TestFrameVersions).
func TestHelloFrameVersions(t *testing.T) {
	s := mustSecret(t)
	require.Equal(t, frameVersionHello, versionFor(hubHello))
	require.ErrorIs(t, Wake{Hub: hubHello, Key: "a"}.Validate(), ErrInvalidWake, "a hello is no wake: Send refuses it")
	tests := []struct {
		name    string
		version byte
		w       Wake
		d       direction
		ok      bool
	}{
		{"0xD3 to a receiver", 0xD3, Wake{Hub: hubHello, Key: "a"}, toReceiver, true},
		{"longest name", 0xD3, Wake{Hub: hubHello, Key: strings.Repeat("n", MaxKeyBytes)}, toReceiver, true},
		{"0xD1", 0xD1, Wake{Hub: hubHello, Key: "a"}, toReceiver, false},
		{"0xD2", 0xD2, Wake{Hub: hubHello, Key: "a"}, toReceiver, false},
		{"to a sender", 0xD3, Wake{Hub: hubHello, Key: "a"}, toSender, false},
		{"slot 1", 0xD3, Wake{Hub: hubHello, Slot: 1, Key: "a"}, toReceiver, false},
		{"empty name", 0xD3, Wake{Hub: hubHello}, toReceiver, false},
		{"a wake with 0xD3", 0xD3, Wake{Hub: HubOrchestrator, Slot: 1, Key: "a"}, toReceiver, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := body(appendFrameVersion(nil, tt.version, newMAC(s), s.KeyID(), t0, nonceOf(1), tt.w))
			_, err := authenticate(b, tt.d, s.KeyID(), newMAC(s), nil)
			if tt.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, errMalformed)
			}
		})
	}
}

// A hello names its connection: the authenticated frames after it count
// under the name, the hello itself is no wake, and connections without
// one count under no name.
func TestReceiverCountsPerHello(t *testing.T) {
	const window = 30 * time.Second
	s := mustSecret(t)
	hello := func(name string, sentAt time.Time, nonce uint64) []byte {
		return encode(s, sentAt, nonceOf(nonce), Wake{Hub: hubHello, Key: name})
	}
	tests := []struct {
		name   string
		frames func(clk *fakeClock) [][]byte
		closes bool
		want   map[string]uint64
		hellos uint64
		wakes  int64
	}{
		{"named", func(clk *fakeClock) [][]byte {
			return [][]byte{hello("b", clk.Now(), 1), encode(s, clk.Now(), nonceOf(2), wake("i")), encode(s, clk.Now(), nonceOf(3), wake("j"))}
		}, false, map[string]uint64{"b": 2}, 1, 2},
		{"stale frames count too", func(clk *fakeClock) [][]byte {
			return [][]byte{hello("b", clk.Now(), 1), encode(s, clk.Now().Add(-time.Hour), nonceOf(2), wake("i"))}
		}, false, map[string]uint64{"b": 1}, 1, 0},
		{"no hello", func(clk *fakeClock) [][]byte {
			return [][]byte{encode(s, clk.Now(), nonceOf(2), wake("i"))}
		}, false, map[string]uint64{}, 0, 1},
		{"frames before the hello are not named", func(clk *fakeClock) [][]byte {
			return [][]byte{encode(s, clk.Now(), nonceOf(2), wake("i")), hello("b", clk.Now(), 1), encode(s, clk.Now(), nonceOf(3), wake("j"))}
		}, false, map[string]uint64{"b": 1}, 1, 2},
		{"a second hello keeps the first name", func(clk *fakeClock) [][]byte {
			return [][]byte{hello("b", clk.Now(), 1), hello("c", clk.Now(), 2), encode(s, clk.Now(), nonceOf(3), wake("j"))}
		}, false, map[string]uint64{"b": 1}, 1, 1},
		{"stale hello", func(clk *fakeClock) [][]byte {
			return [][]byte{hello("b", clk.Now().Add(-time.Hour), 1), encode(s, clk.Now(), nonceOf(2), wake("i"))}
		}, false, map[string]uint64{}, 0, 1},
		{"replayed hello closes", func(clk *fakeClock) [][]byte {
			return [][]byte{hello("b", clk.Now(), 1), hello("b", clk.Now(), 1), encode(s, clk.Now(), nonceOf(2), wake("i"))}
		}, true, map[string]uint64{"b": 0}, 1, 0},
		{"forged hello closes", func(clk *fakeClock) [][]byte {
			return [][]byte{encode(mustSecret(t), clk.Now(), nonceOf(1), Wake{Hub: hubHello, Key: "b"}), encode(s, clk.Now(), nonceOf(2), wake("i"))}
		}, true, map[string]uint64{}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			r, sink := startReceiver(t, ReceiverOptions{Secret: s, Now: clk.Now, Window: window})
			c := dialRaw(t, r)
			for _, f := range tt.frames(clk) {
				_, _ = c.Write(f) // may fail once the receiver has closed
			}
			if tt.closes {
				requireClosedByPeer(t, c)
			} else {
				flush(t, c)
			}
			require.Equal(t, tt.want, r.ReceivedFrom())
			require.Equal(t, tt.hellos, r.Stats().Hellos)
			require.Equal(t, tt.wakes, sink.n.Load(), "a hello reaches no OnWake")
		})
	}
}

// A hello takes no token of the rate limit: a connection whose wakes
// are rate-limited is still named, and its frames are still counted.
func TestHelloIsNotRateLimited(t *testing.T) {
	clk := newFakeClock()
	s := mustSecret(t)
	r, _ := startReceiver(t, ReceiverOptions{Secret: s, Now: clk.Now, MaxRate: 1, Burst: 1})
	c := dialRaw(t, r)
	write(t, c, encode(s, clk.Now(), nonceOf(1), wake("i")), // takes the only token
		encode(s, clk.Now(), nonceOf(2), Wake{Hub: hubHello, Key: "b"}),
		encode(s, clk.Now(), nonceOf(3), wake("j"))) // rate-limited, counted
	flush(t, c)
	require.Equal(t, map[string]uint64{"b": 1}, r.ReceivedFrom())
	require.Equal(t, uint64(1), r.Stats().RateLimited)
}

// ForgetSenders drops the names keep refuses, except those an open
// connection carries.
func TestReceiverForgetSenders(t *testing.T) {
	clk := newFakeClock()
	s := mustSecret(t)
	r, _ := startReceiver(t, ReceiverOptions{Secret: s, Now: clk.Now})
	for i, name := range []string{"gone", "open", "kept"} {
		c := dialRaw(t, r)
		write(t, c, encode(s, clk.Now(), nonceOf(uint64(10*i+1)), Wake{Hub: hubHello, Key: name}),
			encode(s, clk.Now(), nonceOf(uint64(10*i+2)), wake("i")))
		if name == "open" {
			// A frame behind the hello is read once the next connection's
			// flush is: wait for the count instead.
			require.Eventually(t, func() bool { return r.ReceivedFrom()[name] == 1 }, hangDeadline, time.Millisecond)
			continue
		}
		flush(t, c)
	}
	require.Equal(t, map[string]uint64{"gone": 1, "open": 1, "kept": 1}, r.ReceivedFrom())
	r.ForgetSenders(func(name string) bool { return name == "kept" })
	require.Equal(t, map[string]uint64{"open": 1, "kept": 1}, r.ReceivedFrom(), "a name in use is kept")
}

// A sender with a name writes a hello first on every connection to a
// peer that takes them, and only then: the receiver counts its frames
// under the name, as many as the sender counts written to the peer's
// name; reconnecting names the new connection too.
func TestSenderHello(t *testing.T) {
	for _, tt := range []struct {
		name   string
		sender string
		hello  bool
		named  bool
	}{
		{"named sender, peer takes hellos", "b", true, true},
		{"peer does not take hellos", "b", false, false},
		{"sender without a name", "", true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			secret := mustSecret(t)
			r, sink := startReceiver(t, ReceiverOptions{Secret: secret})
			s, probe := startSender(t, SenderOptions{Name: tt.sender})
			to := peerOf(r, secret)
			to.Name, to.Hello = "a", tt.hello
			for i := range 3 {
				require.NoError(t, s.Send(to, wake(fmt.Sprint("i", i))))
				sink.next(t)
				waitFor(t, probe.batches, "batch")
			}
			require.Equal(t, map[string]uint64{"a": 3}, s.WrittenTo())
			require.Equal(t, uint64(3), r.Stats().Accepted, "the hello is no wake")
			if !tt.named {
				require.Empty(t, r.ReceivedFrom())
				require.Zero(t, r.Stats().Hellos)
				return
			}
			require.Equal(t, map[string]uint64{"b": 3}, r.ReceivedFrom())

			// The receiver goes away and comes back at the same address
			// with the same secret: the sender's redial names the new
			// connection.
			addr := r.Addr().String()
			require.NoError(t, r.Close())
			waitForClosedConn(t, s, probe, to)
			r2, sink2 := startReceiver(t, ReceiverOptions{Secret: secret, Listen: addr})
			require.Eventually(t, func() bool {
				_ = s.Send(to, wake("again"))
				select {
				case <-sink2.ch:
					return true
				case <-time.After(10 * time.Millisecond):
					return false
				}
			}, hangDeadline, time.Millisecond)
			require.Equal(t, uint64(1), r2.Stats().Hellos)
			require.Positive(t, r2.ReceivedFrom()["b"])
		})
	}
}

// waitForClosedConn sends to to until a write fails or is dropped: the
// sender has noticed that its connection is gone.
func waitForClosedConn(t *testing.T, s *Sender, probe *senderProbe, to Peer) {
	t.Helper()
	deadline := time.Now().Add(hangDeadline)
	for s.Stats().Dropped == 0 {
		require.True(t, time.Now().Before(deadline), "the sender never noticed the closed connection")
		_ = s.Send(to, wake("probe"))
		waitFor(t, probe.batches, "batch")
	}
}

// ForgetWritten drops the counts of the names keep refuses; a peer
// without a Name is not counted by name.
func TestSenderForgetWritten(t *testing.T) {
	secret := mustSecret(t)
	r, sink := startReceiver(t, ReceiverOptions{Secret: secret})
	s, probe := startSender(t, SenderOptions{})
	for _, name := range []string{"a", "b", ""} {
		to := peerOf(r, secret)
		to.Name = name
		require.NoError(t, s.Send(to, wake("i"+name)))
		sink.next(t)
		waitFor(t, probe.batches, "batch")
	}
	require.Equal(t, map[string]uint64{"a": 1, "b": 1}, s.WrittenTo())
	s.ForgetWritten(func(name string) bool { return name == "b" })
	require.Equal(t, map[string]uint64{"b": 1}, s.WrittenTo())
	require.Equal(t, uint64(3), s.Stats().Sent)
}
