package peerwake

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"time"

	"github.com/durafeed/durafeed/slots"
)

// Hub identifiers carried by a Wake: which of the owner's wakeup hubs the
// wake is for.
const (
	// HubOrchestrator names the orchestrator queue's hub.
	HubOrchestrator byte = 'o'
	// HubWorker names the worker (activity) queue's hub.
	HubWorker byte = 'w'
	// HubLeases asks the receiver to read its lease partition now: the
	// sender wrote something there that the receiver acts on (a hand-off,
	// a steal request, a graceful leave). Slot is 0 and Key names the
	// sender's replica; VisibleAt is unused.
	HubLeases byte = 'l'
	// HubWatch asks the receiver to tell the sender when Key (an instance
	// id) changes, by a HubChanged frame written back on the same
	// connection. Slot is the key's dispatch slot; VisibleAt is unused
	// (zero).
	HubWatch byte = 'v'
	// HubChanged is the receiver's answer to a HubWatch: Key changed. It
	// travels only from a receiver back to a sender, on the connection
	// that carried the watch.
	HubChanged byte = 'c'
)

// hubHello is the hub of a hello frame: the first frame a Sender writes
// on a connection to a peer that takes hellos (Peer.Hello), naming the
// sender (SenderOptions.Name) in Key, Slot 0, VisibleAt unused. It is
// not a Wake: Send refuses it and a Receiver never hands it to OnWake;
// the receiver counts the frames that follow on the connection under
// that name (Receiver.ReceivedFrom).
const hubHello byte = 'h'

// Wire limits.
const (
	// MaxKeyBytes is the longest Wake.Key, in bytes.
	MaxKeyBytes = 1100
	// SecretBytes is the length of a Secret.
	SecretBytes = 32
	// KeyIDBytes is the length of a KeyID.
	KeyIDBytes = 8
	// MACBytes is the length of a frame's authentication tag: the full
	// HMAC-SHA256 output (see the package documentation).
	MACBytes = sha256.Size
	// MinFrameBytes and MaxFrameBytes bound a frame's length (the length
	// prefix excluded): a frame carries a key of 1 to MaxKeyBytes bytes.
	MinFrameBytes = headerBytes + 1 + MACBytes
	// MaxFrameBytes: see MinFrameBytes.
	MaxFrameBytes = headerBytes + MaxKeyBytes + MACBytes
)

// The first byte of a frame is a magic value that also names the format
// version; a different format takes a different value. The layout is the
// same for both; they differ in the hubs they may carry.
const (
	// frameVersion carries the hubs of the first version: HubOrchestrator,
	// HubWorker and HubLeases. Every sender still writes those with it,
	// so that receivers of the first version keep taking them.
	frameVersion byte = 0xD1
	// frameVersionWatch adds HubWatch (sender to receiver) and HubChanged
	// (receiver back to sender); a receiver also takes the first
	// version's hubs with it.
	frameVersionWatch byte = 0xD2
	// frameVersionHello carries hubHello only, sender to receiver. A
	// receiver of an earlier version closes a connection that carries
	// one, so a sender writes it only to a peer that publishes that it
	// takes hellos (Peer.Hello).
	frameVersionHello byte = 0xD3
)

// versionFor returns the version byte a frame of hub is written with.
func versionFor(hub byte) byte {
	switch hub {
	case HubWatch, HubChanged:
		return frameVersionWatch
	case hubHello:
		return frameVersionHello
	}
	return frameVersion
}

// direction is the way a frame travels, which decides the version bytes
// and hubs it may carry.
type direction uint8

const (
	// toReceiver: a wake, a watch or a hello, from a Sender to a
	// Receiver; 0xD1 with hubs o, w, l, 0xD2 with hubs o, w, l, v, or
	// 0xD3 with hub h.
	toReceiver direction = iota
	// toSender: a reply, from a Receiver back to the Sender whose
	// connection carried the watch; 0xD2 with hub c only.
	toSender
)

// accepts reports whether a frame travelling in direction d may carry
// version and hub.
func (d direction) accepts(version, hub byte) bool {
	wake := hub == HubOrchestrator || hub == HubWorker || hub == HubLeases
	switch {
	case d == toSender:
		return version == frameVersionWatch && hub == HubChanged
	case version == frameVersion:
		return wake
	case version == frameVersionWatch:
		return wake || hub == HubWatch
	case version == frameVersionHello:
		return hub == hubHello
	}
	return false
}

// Offsets of a frame's fields.
const (
	offVersion   = 0
	offKeyID     = offVersion + 1
	offSentAt    = offKeyID + KeyIDBytes
	offNonce     = offSentAt + 8
	offHub       = offNonce + nonceBytes
	offSlot      = offHub + 1
	offVisibleAt = offSlot + 2
	offKeyLen    = offVisibleAt + 8
	headerBytes  = offKeyLen + 2 // 38
	nonceBytes   = 8
	prefixBytes  = 2
)

// ErrInvalidWake is wrapped by the errors that report a Wake that cannot be
// sent: unknown hub, slot out of range, empty or too long key.
var ErrInvalidWake = errors.New("peerwake: invalid wake")

// Wake asks the owner of a dispatch slot to look at one key of one of its
// hubs: the receiver calls hub.Signal(Slot, Key, VisibleAt) on the hub
// named by Hub, exactly as its change-feed handler would.
type Wake struct {
	// Hub is HubOrchestrator, HubWorker, HubLeases, HubWatch or
	// HubChanged.
	Hub byte
	// Slot is the dispatch slot, in [0, slots.Count) = [0, 256).
	Slot int
	// Key is the hub key (an instance id): 1 to MaxKeyBytes bytes.
	Key string
	// VisibleAt is when the work becomes visible. It travels with
	// millisecond precision, rounded up so that a wake is never taken
	// before its work is visible. The zero time round-trips as the zero
	// instant (IsZero reports true after decoding).
	VisibleAt time.Time
	// Reply, on a HubWatch wake a Receiver delivers to OnWake, writes
	// HubChanged frames back on the connection that carried it; nil on
	// every other wake. It does not travel: senders ignore it.
	Reply *Reply
}

// Validate reports, wrapping ErrInvalidWake, why w cannot be sent; nil if it
// can.
func (w Wake) Validate() error {
	switch {
	case w.Hub != HubOrchestrator && w.Hub != HubWorker && w.Hub != HubLeases && w.Hub != HubWatch && w.Hub != HubChanged:
		return fmt.Errorf("%w: unknown hub %q", ErrInvalidWake, w.Hub)
	case w.Slot < 0 || w.Slot >= slots.Count:
		return fmt.Errorf("%w: slot %d outside [0, %d)", ErrInvalidWake, w.Slot, slots.Count)
	case len(w.Key) == 0:
		return fmt.Errorf("%w: empty key", ErrInvalidWake)
	case len(w.Key) > MaxKeyBytes:
		return fmt.Errorf("%w: key of %d bytes exceeds %d", ErrInvalidWake, len(w.Key), MaxKeyBytes)
	}
	return nil
}

// Secret is a receiver's HMAC-SHA256 key: 32 random bytes, one per receiver
// incarnation. Its String and GoString methods redact it so that it does not
// end up in logs by accident; Encode is the one way to reveal it.
type Secret [SecretBytes]byte

// NewSecret returns a fresh random Secret from crypto/rand.
func NewSecret() (Secret, error) {
	var s Secret
	if _, err := rand.Read(s[:]); err != nil {
		return Secret{}, fmt.Errorf("peerwake: reading random secret: %w", err)
	}
	return s, nil
}

// ParseSecret decodes the output of Secret.Encode (standard padded base64
// of 32 bytes). The all-zero secret is refused as uninitialised.
func ParseSecret(text string) (Secret, error) {
	var s Secret
	b, err := base64.StdEncoding.DecodeString(text)
	if err != nil {
		return Secret{}, fmt.Errorf("peerwake: parsing secret: %w", err)
	}
	if len(b) != SecretBytes {
		return Secret{}, fmt.Errorf("peerwake: parsing secret: %d bytes, want %d", len(b), SecretBytes)
	}
	copy(s[:], b)
	if s.IsZero() {
		return Secret{}, errors.New("peerwake: parsing secret: all-zero secret")
	}
	return s, nil
}

// Encode returns the secret in standard padded base64, for the heartbeat
// document that publishes it to senders. Never log the result.
func (s Secret) Encode() string { return base64.StdEncoding.EncodeToString(s[:]) }

// IsZero reports whether s is the all-zero (unset) secret.
func (s Secret) IsZero() bool { return s == Secret{} }

// String returns a redacted placeholder that names the secret's KeyID, never
// the secret.
func (s Secret) String() string { return "peerwake.Secret(key id " + s.KeyID().String() + ")" }

// GoString redacts like String, for %#v.
func (s Secret) GoString() string { return s.String() }

// keyIDDomain separates the KeyID derivation from any other use of SHA-256
// over the secret.
const keyIDDomain = "durafeed/peerwake key id v1\x00"

// KeyID returns the secret's public name: the first 8 bytes of
// SHA-256("durafeed/peerwake key id v1\x00" || secret). A frame carries the
// KeyID of the secret that signed it, so that a receiver refuses a frame
// signed with another (older, or someone else's) secret without computing a
// MAC. The KeyID reveals nothing useful about the secret.
func (s Secret) KeyID() KeyID {
	h := sha256.New()
	h.Write([]byte(keyIDDomain))
	h.Write(s[:])
	var id KeyID
	copy(id[:], h.Sum(nil))
	return id
}

// KeyID names a Secret on the wire; see Secret.KeyID.
type KeyID [KeyIDBytes]byte

// String returns the KeyID in hexadecimal.
func (id KeyID) String() string { return hex.EncodeToString(id[:]) }

// msCeil returns t in Unix milliseconds, rounded up.
func msCeil(t time.Time) int64 {
	ms := t.UnixMilli() // floors: nanoseconds within the second are >= 0
	if t.Nanosecond()%int(time.Millisecond) != 0 {
		ms++
	}
	return ms
}

// appendFrame appends the frame carrying w (already validated), with its
// 2-byte length prefix and the version byte of its hub, to dst and returns
// the extended slice. mac is an HMAC-SHA256 keyed with the secret whose
// KeyID is id.
func appendFrame(dst []byte, mac hash.Hash, id KeyID, sentAt time.Time, nonce [nonceBytes]byte, w Wake) []byte {
	return appendFrameVersion(dst, versionFor(w.Hub), mac, id, sentAt, nonce, w)
}

// appendFrameVersion is appendFrame with the version byte given.
func appendFrameVersion(dst []byte, version byte, mac hash.Hash, id KeyID, sentAt time.Time, nonce [nonceBytes]byte, w Wake) []byte {
	start := len(dst)
	n := headerBytes + len(w.Key) + MACBytes
	dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	body := len(dst)
	dst = append(dst, version)
	dst = append(dst, id[:]...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(sentAt.UnixMilli()))
	dst = append(dst, nonce[:]...)
	dst = append(dst, w.Hub)
	dst = binary.BigEndian.AppendUint16(dst, uint16(w.Slot))
	dst = binary.BigEndian.AppendUint64(dst, uint64(msCeil(w.VisibleAt)))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(w.Key)))
	dst = append(dst, w.Key...)
	mac.Reset()
	mac.Write(dst[body:])
	dst = mac.Sum(dst)
	if len(dst)-start != prefixBytes+n {
		panic("peerwake: frame length mismatch") // unreachable for a validated wake
	}
	return dst
}

// frame is a parsed, not yet authenticated, frame.
type frame struct {
	version byte
	keyID   KeyID
	sentAt  int64 // Unix ms
	nonce   [nonceBytes]byte
	wake    Wake
	signed  []byte // the bytes the MAC covers
	tag     []byte // the MAC
}

// Reasons a frame is refused before its contents are believed.
var (
	errMalformed  = errors.New("peerwake: malformed frame")
	errUnknownKey = errors.New("peerwake: frame signed with an unknown key id")
	errBadMAC     = errors.New("peerwake: frame MAC does not verify")
)

// parseFrame parses b, one frame without its length prefix, travelling in
// direction d. It checks the structure, the version byte and hub against
// d, and the wake's fields, not the MAC; the frame's slices alias b.
func parseFrame(b []byte, d direction) (frame, error) {
	var f frame
	if len(b) < MinFrameBytes || len(b) > MaxFrameBytes {
		return f, fmt.Errorf("%w: length %d outside [%d, %d]", errMalformed, len(b), MinFrameBytes, MaxFrameBytes)
	}
	if v := b[offVersion]; v != frameVersion && v != frameVersionWatch && v != frameVersionHello {
		return f, fmt.Errorf("%w: version byte %#x", errMalformed, v)
	}
	keyLen := int(binary.BigEndian.Uint16(b[offKeyLen:]))
	if headerBytes+keyLen+MACBytes != len(b) {
		return f, fmt.Errorf("%w: key length %d disagrees with frame length %d", errMalformed, keyLen, len(b))
	}
	f.version = b[offVersion]
	copy(f.keyID[:], b[offKeyID:])
	f.sentAt = int64(binary.BigEndian.Uint64(b[offSentAt:]))
	copy(f.nonce[:], b[offNonce:])
	f.wake = Wake{
		Hub:       b[offHub],
		Slot:      int(binary.BigEndian.Uint16(b[offSlot:])),
		Key:       string(b[headerBytes : headerBytes+keyLen]),
		VisibleAt: time.UnixMilli(int64(binary.BigEndian.Uint64(b[offVisibleAt:]))).UTC(),
	}
	if err := validFrameWake(f.wake); err != nil {
		return frame{}, fmt.Errorf("%w: %w", errMalformed, err)
	}
	if !d.accepts(f.version, f.wake.Hub) {
		return frame{}, fmt.Errorf("%w: hub %q with version byte %#x", errMalformed, f.wake.Hub, f.version)
	}
	f.signed = b[:len(b)-MACBytes]
	f.tag = b[len(b)-MACBytes:]
	return f, nil
}

// validFrameWake is Wake.Validate, extended to the hello frame, which
// names its sender in Key and carries slot 0.
func validFrameWake(w Wake) error {
	if w.Hub != hubHello {
		return w.Validate()
	}
	if w.Slot != 0 || len(w.Key) == 0 || len(w.Key) > MaxKeyBytes {
		return fmt.Errorf("%w: hello with slot %d and a name of %d bytes", ErrInvalidWake, w.Slot, len(w.Key))
	}
	return nil
}

// authenticate parses b, one frame without its length prefix travelling
// in direction d, and checks that it names id and that its MAC verifies
// under mac, an HMAC keyed with the secret whose KeyID is id. It returns
// an error wrapping errMalformed, errUnknownKey or errBadMAC, in the order
// checked. scratch is reused for the computed tag.
func authenticate(b []byte, d direction, id KeyID, mac hash.Hash, scratch []byte) (frame, error) {
	f, err := parseFrame(b, d)
	if err != nil {
		return frame{}, err
	}
	if f.keyID != id {
		return frame{}, errUnknownKey
	}
	mac.Reset()
	mac.Write(f.signed)
	if !hmac.Equal(mac.Sum(scratch[:0]), f.tag) {
		return frame{}, errBadMAC
	}
	return f, nil
}

// newMAC returns an HMAC-SHA256 keyed with s.
func newMAC(s Secret) hash.Hash { return hmac.New(sha256.New, s[:]) }
