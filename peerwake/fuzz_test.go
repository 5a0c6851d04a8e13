package peerwake

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// fuzzSecret is fixed so that the corpus's valid frames stay valid.
var fuzzSecret = Secret{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32}

// FuzzDecode feeds arbitrary bytes to the frame decoder, in both
// directions. It must never panic, and whatever it parses must re-encode
// to the same signed bytes (parsing is the inverse of encoding on its
// domain) with a version and hub that direction takes; a frame it
// authenticates must be exactly the encoding of what it returned. No frame
// is taken in both directions.
func FuzzDecode(f *testing.F) {
	for i, w := range []Wake{
		wake("instance"),
		{Hub: HubWorker, Slot: 255, Key: "x"},
		{Hub: HubWorker, Slot: 0, Key: strings.Repeat("k", MaxKeyBytes), VisibleAt: t0},
		{Hub: HubLeases, Slot: 0, Key: "replica"},
		{Hub: HubWatch, Slot: 17, Key: "instance"},
		{Hub: HubChanged, Slot: 17, Key: "instance"},
		{Hub: hubHello, Key: "replica"},
	} {
		b := body(encode(fuzzSecret, t0, nonceOf(uint64(i)), w))
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add(body(appendFrameVersion(nil, frameVersionWatch, newMAC(fuzzSecret), fuzzSecret.KeyID(), t0, nonceOf(9), wake("instance"))))
	f.Add([]byte{})
	f.Add([]byte{frameVersion})
	f.Add([]byte{frameVersionWatch})
	f.Add([]byte{frameVersionHello})
	id, mac := fuzzSecret.KeyID(), newMAC(fuzzSecret)
	scratch := make([]byte, 0, MACBytes)
	f.Fuzz(func(t *testing.T, b []byte) {
		parsed := 0
		for _, d := range []direction{toReceiver, toSender} {
			p, perr := parseFrame(b, d)
			a, aerr := authenticate(b, d, id, mac, scratch)
			if perr != nil {
				if aerr == nil {
					t.Fatal("authenticated a frame that does not parse")
				}
				continue
			}
			parsed++
			if err := validFrameWake(p.wake); err != nil {
				t.Fatalf("parsed an invalid wake: %v", err)
			}
			if !d.accepts(p.version, p.wake.Hub) {
				t.Fatalf("parsed version %#x hub %q, which direction %d does not take", p.version, p.wake.Hub, d)
			}
			if p.wake.Reply != nil {
				t.Fatal("parsed a wake with a Reply")
			}
			re := body(appendFrameVersion(nil, p.version, mac, p.keyID, time.UnixMilli(p.sentAt), p.nonce, p.wake))
			if !bytes.Equal(re[:len(re)-MACBytes], p.signed) {
				t.Fatalf("re-encoding differs:\n%x\n%x", re, b)
			}
			if aerr == nil && !bytes.Equal(re, b) {
				t.Fatalf("authenticated frame is not the encoding of its contents")
			}
			_ = a
		}
		if parsed > 1 {
			t.Fatal("a frame parses in both directions")
		}
	})
}
