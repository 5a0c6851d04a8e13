package peerwake

import (
	"slices"
	"testing"
	"time"
)

// BenchmarkSendToOnWake measures Send→OnWake latency over loopback, one
// wake in flight at a time. p50/p99 are reported, not asserted.
func BenchmarkSendToOnWake(b *testing.B) {
	secret := mustSecret(b)
	got := make(chan time.Time, 1)
	r, err := NewReceiver(ReceiverOptions{
		Listen: "127.0.0.1:0", Secret: secret, MaxRate: maxRateLimit, Burst: maxRateLimit,
		OnWake: func(Wake) { got <- time.Now() },
	})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	s, err := NewSender(SenderOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	to := peerOf(r, secret)
	w := wake("instance-0123456789abcdef")
	lat := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		if err := s.Send(to, w); err != nil {
			b.Fatal(err)
		}
		end := <-got
		if len(lat) < cap(lat) {
			lat = append(lat, end.Sub(start))
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
}

// BenchmarkAuthenticate measures the receiver's per-frame check, which is
// also what a forged frame costs it.
func BenchmarkAuthenticate(b *testing.B) {
	secret := mustSecret(b)
	frame := body(encode(secret, t0, nonceOf(1), wake("instance-0123456789abcdef")))
	id, mac := secret.KeyID(), newMAC(secret)
	scratch := make([]byte, 0, MACBytes)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := authenticate(frame, toReceiver, id, mac, scratch); err != nil {
			b.Fatal(err)
		}
	}
}
