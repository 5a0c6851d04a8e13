package peerwake

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestWakeValidate(t *testing.T) {
	tests := []struct {
		name string
		w    Wake
		ok   bool
	}{
		{"orchestrator", Wake{Hub: HubOrchestrator, Slot: 0, Key: "a"}, true},
		{"worker", Wake{Hub: HubWorker, Slot: 255, Key: "a"}, true},
		{"leases", Wake{Hub: HubLeases, Slot: 0, Key: "replica"}, true},
		{"watch", Wake{Hub: HubWatch, Slot: 9, Key: "a"}, true},
		{"changed", Wake{Hub: HubChanged, Slot: 9, Key: "a"}, true},
		{"watch, slot 256", Wake{Hub: HubWatch, Slot: 256, Key: "a"}, false},
		{"watch, empty key", Wake{Hub: HubWatch, Slot: 9}, false},
		{"changed, key too long", Wake{Hub: HubChanged, Slot: 9, Key: strings.Repeat("k", MaxKeyBytes+1)}, false},
		{"max key", Wake{Hub: HubWorker, Slot: 7, Key: strings.Repeat("k", MaxKeyBytes)}, true},
		{"key too long", Wake{Hub: HubWorker, Slot: 7, Key: strings.Repeat("k", MaxKeyBytes+1)}, false},
		{"empty key", Wake{Hub: HubWorker, Slot: 7}, false},
		{"slot -1", Wake{Hub: HubWorker, Slot: -1, Key: "a"}, false},
		{"slot 256", Wake{Hub: HubWorker, Slot: 256, Key: "a"}, false},
		{"slot 65536", Wake{Hub: HubWorker, Slot: 1 << 16, Key: "a"}, false},
		{"hub 0", Wake{Slot: 1, Key: "a"}, false},
		{"hub x", Wake{Hub: 'x', Slot: 1, Key: "a"}, false},
		{"hub V", Wake{Hub: 'V', Slot: 1, Key: "a"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.w.Validate()
			if tt.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrInvalidWake)
			}
		})
	}
}

func TestFrameRoundTrip(t *testing.T) {
	s := mustSecret(t)
	sentAt := t0.Add(123 * time.Microsecond) // sent-at floors to the ms
	tests := []struct {
		name    string
		w       Wake
		visible time.Time // expected VisibleAt after decoding
	}{
		{"typical", Wake{Hub: HubOrchestrator, Slot: 42, Key: "instance-1", VisibleAt: t0}, t0},
		{"leases", Wake{Hub: HubLeases, Slot: 0, Key: "replica-a"}, time.Time{}},
		{"watch", Wake{Hub: HubWatch, Slot: 17, Key: "instance-w"}, time.Time{}},
		{"watch, max key, slot 255", Wake{Hub: HubWatch, Slot: 255, Key: strings.Repeat("w", MaxKeyBytes)}, time.Time{}},
		{"changed", Wake{Hub: HubChanged, Slot: 17, Key: "instance-w"}, time.Time{}},
		{"changed, visibleAt travels", Wake{Hub: HubChanged, Slot: 0, Key: "x", VisibleAt: t0}, t0},
		{"worker hub, slot 0", Wake{Hub: HubWorker, Slot: 0, Key: "x", VisibleAt: t0}, t0},
		{"slot 255", Wake{Hub: HubOrchestrator, Slot: 255, Key: "x", VisibleAt: t0}, t0},
		{"max key", Wake{Hub: HubWorker, Slot: 1, Key: strings.Repeat("é", MaxKeyBytes/2), VisibleAt: t0}, t0},
		{"binary key", Wake{Hub: HubWorker, Slot: 1, Key: "\x00\xff\x00", VisibleAt: t0}, t0},
		{"zero visibleAt", Wake{Hub: HubWorker, Slot: 1, Key: "x"}, time.Time{}},
		{"sub-ms visibleAt rounds up", Wake{Hub: HubWorker, Slot: 1, Key: "x", VisibleAt: t0.Add(time.Nanosecond)}, t0.Add(time.Millisecond)},
		{"sub-ms visibleAt rounds up (999µs)", Wake{Hub: HubWorker, Slot: 1, Key: "x", VisibleAt: t0.Add(999 * time.Microsecond)}, t0.Add(time.Millisecond)},
		{"pre-epoch visibleAt", Wake{Hub: HubWorker, Slot: 1, Key: "x", VisibleAt: time.UnixMilli(-5)}, time.UnixMilli(-5)},
		{"pre-epoch sub-ms rounds up", Wake{Hub: HubWorker, Slot: 1, Key: "x", VisibleAt: time.UnixMilli(-5).Add(-time.Nanosecond)}, time.UnixMilli(-5)},
		{"local zone", Wake{Hub: HubWorker, Slot: 1, Key: "x", VisibleAt: t0.In(time.FixedZone("X", 3600))}, t0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, tt.w.Validate())
			enc := encode(s, sentAt, nonceOf(7), tt.w)
			require.Len(t, enc, prefixBytes+headerBytes+len(tt.w.Key)+MACBytes)
			require.Equal(t, len(enc)-prefixBytes, int(binary.BigEndian.Uint16(enc)))
			f, err := authenticate(body(enc), directionOf(tt.w.Hub), s.KeyID(), newMAC(s), nil)
			require.NoError(t, err)
			require.Equal(t, versionFor(tt.w.Hub), f.version)
			require.Nil(t, f.wake.Reply)
			require.Equal(t, s.KeyID(), f.keyID)
			require.Equal(t, sentAt.UnixMilli(), f.sentAt)
			require.Equal(t, nonceOf(7), f.nonce)
			require.Equal(t, tt.w.Hub, f.wake.Hub)
			require.Equal(t, tt.w.Slot, f.wake.Slot)
			require.Equal(t, tt.w.Key, f.wake.Key)
			require.True(t, tt.visible.Equal(f.wake.VisibleAt), "VisibleAt %v, want %v", f.wake.VisibleAt, tt.visible)
			require.Equal(t, tt.visible.IsZero(), f.wake.VisibleAt.IsZero())
		})
	}
}

func TestFrameSizeBounds(t *testing.T) {
	s := mustSecret(t)
	small := encode(s, t0, nonceOf(1), Wake{Hub: HubWorker, Slot: 1, Key: "k"})
	require.Len(t, body(small), MinFrameBytes)
	big := encode(s, t0, nonceOf(1), Wake{Hub: HubWorker, Slot: 1, Key: strings.Repeat("k", MaxKeyBytes)})
	require.Len(t, body(big), MaxFrameBytes)
	require.Equal(t, 71, MinFrameBytes)
	require.Equal(t, 1170, MaxFrameBytes)
}

// Every single-byte change anywhere in a frame is refused, and so is every
// truncation and extension, in either direction.
func TestFrameTamper(t *testing.T) {
	s := mustSecret(t)
	for _, w := range []Wake{
		wake("instance-tamper"),
		{Hub: HubWatch, Slot: 3, Key: "instance-tamper"},
		{Hub: HubChanged, Slot: 3, Key: "instance-tamper"},
	} {
		t.Run(string(w.Hub), func(t *testing.T) {
			d := directionOf(w.Hub)
			orig := body(encode(s, t0, nonceOf(3), w))
			for i := range orig {
				for _, flip := range []byte{0x01, 0x80, 0xFF} {
					b := append([]byte(nil), orig...)
					b[i] ^= flip
					_, err := authenticate(b, d, s.KeyID(), newMAC(s), nil)
					require.Error(t, err, "byte %d ^ %#x accepted", i, flip)
				}
			}
			for n := range len(orig) {
				_, err := authenticate(orig[:n], d, s.KeyID(), newMAC(s), nil)
				require.ErrorIs(t, err, errMalformed, "truncated to %d", n)
			}
			_, err := authenticate(append(append([]byte(nil), orig...), 0), d, s.KeyID(), newMAC(s), nil)
			require.ErrorIs(t, err, errMalformed)
			// The untouched frame passes.
			_, err = authenticate(orig, d, s.KeyID(), newMAC(s), nil)
			require.NoError(t, err)
		})
	}
}

// The version byte each hub is written with, and which versions and hubs
// each direction takes: a receiver 0xD1 with o, w, l and 0xD2 with o, w,
// l, v; a sender's reader 0xD2 with c only. Every frame here is correctly
// signed, so a refusal is for its version or hub alone.
func TestFrameVersions(t *testing.T) {
	for hub, want := range map[byte]byte{
		HubOrchestrator: 0xD1, HubWorker: 0xD1, HubLeases: 0xD1,
		HubWatch: 0xD2, HubChanged: 0xD2,
	} {
		enc := encode(mustSecret(t), t0, nonceOf(1), Wake{Hub: hub, Slot: 1, Key: "k"})
		require.Equal(t, want, body(enc)[offVersion], "hub %q", hub)
	}

	s := mustSecret(t)
	tests := []struct {
		version byte
		hub     byte
		d       direction
		ok      bool
	}{
		{0xD1, HubOrchestrator, toReceiver, true},
		{0xD1, HubWorker, toReceiver, true},
		{0xD1, HubLeases, toReceiver, true},
		{0xD1, HubWatch, toReceiver, false},
		{0xD1, HubChanged, toReceiver, false},
		{0xD2, HubOrchestrator, toReceiver, true},
		{0xD2, HubWorker, toReceiver, true},
		{0xD2, HubLeases, toReceiver, true},
		{0xD2, HubWatch, toReceiver, true},
		{0xD2, HubChanged, toReceiver, false},
		{0xD3, HubOrchestrator, toReceiver, false},
		{0xD3, HubWatch, toReceiver, false},
		{0x00, HubOrchestrator, toReceiver, false},
		{0xD2, HubChanged, toSender, true},
		{0xD1, HubChanged, toSender, false},
		{0xD3, HubChanged, toSender, false},
		{0xD2, HubWatch, toSender, false},
		{0xD2, HubOrchestrator, toSender, false},
		{0xD1, HubOrchestrator, toSender, false},
		{0xD1, HubLeases, toSender, false},
	}
	for _, tt := range tests {
		dir := map[direction]string{toReceiver: "to receiver", toSender: "to sender"}[tt.d]
		t.Run(fmt.Sprintf("%#x %c %s", tt.version, tt.hub, dir), func(t *testing.T) {
			w := Wake{Hub: tt.hub, Slot: 5, Key: "instance"}
			b := body(appendFrameVersion(nil, tt.version, newMAC(s), s.KeyID(), t0, nonceOf(2), w))
			f, err := authenticate(b, tt.d, s.KeyID(), newMAC(s), nil)
			if !tt.ok {
				require.ErrorIs(t, err, errMalformed)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.version, f.version)
			require.Equal(t, w.Key, f.wake.Key)
		})
	}
}

func TestFrameAuthenticateErrors(t *testing.T) {
	s, other := mustSecret(t), mustSecret(t)
	good := body(encode(s, t0, nonceOf(1), wake("i")))
	// other's key, but the frame claims s's KeyID: the MAC fails.
	forged := body(appendFrame(nil, newMAC(other), s.KeyID(), t0, nonceOf(1), wake("i")))
	withBadHub := body(encode(s, t0, nonceOf(1), wake("i")))
	withBadHub[offHub] = 'x'
	withBadSlot := body(encode(s, t0, nonceOf(1), wake("i")))
	binary.BigEndian.PutUint16(withBadSlot[offSlot:], 256)
	withEmptyKey := append([]byte(nil), good[:headerBytes]...)
	binary.BigEndian.PutUint16(withEmptyKey[offKeyLen:], 0)
	withEmptyKey = append(withEmptyKey, make([]byte, MACBytes)...)
	badVersion := append([]byte(nil), good...)
	badVersion[0] = 0xD3
	changed := body(encode(s, t0, nonceOf(1), Wake{Hub: HubChanged, Slot: 1, Key: "i"}))
	// A wake's version byte raised to 0xD2 after signing: the MAC covers it.
	raised := append([]byte(nil), good...)
	raised[0] = 0xD2

	tests := []struct {
		name string
		b    []byte
		d    direction
		id   KeyID
		s    Secret
		want error
	}{
		{"good", good, toReceiver, s.KeyID(), s, nil},
		{"unknown key id", good, toReceiver, other.KeyID(), other, errUnknownKey},
		{"wrong secret, right id", good, toReceiver, s.KeyID(), other, errBadMAC},
		{"forged", forged, toReceiver, s.KeyID(), s, errBadMAC},
		{"bad hub", withBadHub, toReceiver, s.KeyID(), s, errMalformed},
		{"bad slot", withBadSlot, toReceiver, s.KeyID(), s, errMalformed},
		{"empty key", withEmptyKey, toReceiver, s.KeyID(), s, errMalformed},
		{"bad version", badVersion, toReceiver, s.KeyID(), s, errMalformed},
		{"version raised after signing", raised, toReceiver, s.KeyID(), s, errBadMAC},
		{"empty", nil, toReceiver, s.KeyID(), s, errMalformed},
		{"oversize", make([]byte, MaxFrameBytes+1), toReceiver, s.KeyID(), s, errMalformed},
		{"reply", changed, toSender, s.KeyID(), s, nil},
		{"reply to a receiver", changed, toReceiver, s.KeyID(), s, errMalformed},
		{"wake to a sender", good, toSender, s.KeyID(), s, errMalformed},
		{"reply, unknown key id", changed, toSender, other.KeyID(), other, errUnknownKey},
		{"reply, wrong secret, right id", changed, toSender, s.KeyID(), other, errBadMAC},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := authenticate(tt.b, tt.d, tt.id, newMAC(tt.s), make([]byte, 0, MACBytes))
			if tt.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.want)
			}
		})
	}
}

func TestSecret(t *testing.T) {
	a, b := mustSecret(t), mustSecret(t)
	require.NotEqual(t, a, b)
	require.False(t, a.IsZero())
	require.True(t, Secret{}.IsZero())
	require.NotEqual(t, a.KeyID(), b.KeyID())
	require.Equal(t, a.KeyID(), a.KeyID())

	parsed, err := ParseSecret(a.Encode())
	require.NoError(t, err)
	require.Equal(t, a, parsed)
	for _, bad := range []string{"", "not base64!", Secret{}.Encode(), "AAAA"} {
		_, err := ParseSecret(bad)
		require.Error(t, err, "%q", bad)
	}

	// The secret never shows in formatting or in zap fields.
	enc := a.Encode()
	for _, s := range []string{fmt.Sprint(a), fmt.Sprintf("%v %s %+v %#v", a, a, a, a), fmt.Sprint(struct{ S Secret }{a})} {
		require.NotContains(t, s, enc)
		require.Contains(t, s, a.KeyID().String())
	}
	core, logs := observer.New(zap.DebugLevel)
	zap.New(core).Info("x", zap.Any("secret", a), zap.Stringer("s", a))
	for _, e := range logs.All() {
		for _, v := range e.ContextMap() {
			require.NotContains(t, fmt.Sprint(v), enc)
			require.NotContains(t, fmt.Sprint(v), fmt.Sprint(a[:]))
		}
	}
}
