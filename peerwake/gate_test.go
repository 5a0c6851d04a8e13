package peerwake

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGateReplay(t *testing.T) {
	g := newGate(1000, 1000, 100)
	const now, window = 1_000_000, 30_000
	require.Equal(t, deliver, g.admit(nonceOf(1), now+window, now))
	require.Equal(t, replayed, g.admit(nonceOf(1), now+window, now))
	require.Equal(t, replayed, g.admit(nonceOf(1), now+window, now+window), "still inside the window")
	require.Equal(t, deliver, g.admit(nonceOf(2), now+window, now), "fresh nonce")
	// Past its expiry, the nonce can only come with another sent-at (the
	// same frame would be stale), so it is a new frame.
	require.Equal(t, deliver, g.admit(nonceOf(1), now+2*window+1, now+window+1))
}

// A frame dropped for rate is not remembered: it was never delivered.
func TestGateRateLimitedNotRemembered(t *testing.T) {
	g := newGate(1, 1, 100)
	const now = 1_000_000
	require.Equal(t, deliver, g.admit(nonceOf(1), now+10, now))
	require.Equal(t, rateLimited, g.admit(nonceOf(2), now+10, now))
	require.Equal(t, replayed, g.admit(nonceOf(1), now+10, now), "replay check comes before the rate limit")
	require.Equal(t, deliver, g.admit(nonceOf(2), now+2000, now+1000), "one token later")
}

// Token accounting is exact: burst tokens at start, rate per second after,
// never more than burst, nothing for a clock stepping back.
func TestGateTokenBucket(t *testing.T) {
	tests := []struct {
		name         string
		rate, burst  int
		steps        []int64 // clock advances (ms) before each batch of attempts
		attempts     int
		wantAccepted []int
	}{
		{"burst then nothing", 10, 5, []int64{0, 0}, 20, []int{5, 0}},
		{"refill at rate", 10, 5, []int64{0, 100, 200}, 20, []int{5, 1, 2}},
		{"refill capped at burst", 10, 5, []int64{0, 60_000}, 20, []int{5, 5}},
		{"clock steps back", 10, 5, []int64{0, -10_000, 100}, 20, []int{5, 0, 0}},
		{"rate 1, burst 3", 1, 3, []int64{0, 1000, 2500}, 10, []int{3, 1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate(tt.rate, tt.burst, 1<<20)
			now, nonce := int64(1_000_000), uint64(0)
			for i, step := range tt.steps {
				now += step
				got := 0
				for range tt.attempts {
					nonce++
					if g.admit(nonceOf(nonce), now+30_000, now) == deliver {
						got++
					}
				}
				require.Equal(t, tt.wantAccepted[i], got, "batch %d", i)
			}
		})
	}
}

// The cache never holds more than its bound; when full it forgets the
// oldest nonce first; expired entries are dropped as new ones come.
func TestGateCacheBound(t *testing.T) {
	const limit = 8
	g := newGate(1_000_000, 1_000_000, limit)
	const now = 1_000_000
	for i := range uint64(100) {
		require.Equal(t, deliver, g.admit(nonceOf(i), now+30_000, now))
		require.LessOrEqual(t, g.n, limit)
		require.LessOrEqual(t, len(g.seen), limit)
		require.LessOrEqual(t, len(g.ring), limit)
	}
	// The last 8 are remembered, older ones were evicted.
	for i := uint64(92); i < 100; i++ {
		require.Equal(t, replayed, g.admit(nonceOf(i), now+30_000, now))
	}
	require.Equal(t, deliver, g.admit(nonceOf(0), now+30_000, now), "evicted early: delivered once more")

	// Expiry: entries past their expiry leave as soon as something comes in.
	g = newGate(1_000_000, 1_000_000, limit)
	for i := range uint64(5) {
		g.admit(nonceOf(i), now+10, now)
	}
	require.Equal(t, 5, g.n)
	g.admit(nonceOf(99), now+100, now+11)
	require.Equal(t, 1, g.n)
	require.Len(t, g.seen, 1)
}

// A nonce re-inserted after its first entry expired, while that entry is
// still in the ring, keeps its newer entry when the older one leaves.
func TestGateReinsertedNonce(t *testing.T) {
	g := newGate(1_000_000, 1_000_000, 4)
	const now = 1_000_000
	g.admit(nonceOf(0), now+1000, now)
	g.admit(nonceOf(1), now+10, now)
	require.Equal(t, deliver, g.admit(nonceOf(1), now+1000, now+20), "expired: a new frame with the same nonce")
	require.Equal(t, 3, g.n, "the old entry is still in the ring")
	g.admit(nonceOf(2), now+1000, now+30) // ring full: 0, 1(old), 1(new), 2
	g.admit(nonceOf(3), now+1000, now+30) // evicts 0
	g.admit(nonceOf(4), now+1000, now+30) // evicts 1(old)
	require.Equal(t, replayed, g.admit(nonceOf(1), now+1000, now+30))
	require.Equal(t, deliver, g.admit(nonceOf(0), now+1000, now+30))
}
