package knobs

import (
	"math"
	"sync/atomic"
)

// stream is a lock-free, reproducible source of uniform numbers: the i-th
// draw is a SplitMix64 hash of (seed, i), so a sequence of draws depends only
// on the seed and on how many draws came before, never on a shared lock.
type stream struct {
	seed uint64
	n    atomic.Uint64
}

func newStream(seed uint64) *stream { return &stream{seed: seed} }

// mix64 is the SplitMix64 output function applied to the i-th state.
func mix64(seed, i uint64) uint64 {
	z := seed + (i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// toUnit maps 64 random bits to [0, 1).
func toUnit(x uint64) float64 { return float64(x>>11) / (1 << 53) }

// uniform returns the next draw in [0, 1).
func (s *stream) uniform() float64 {
	i := s.n.Add(1) - 1
	return toUnit(mix64(s.seed, i))
}

// normal returns the next draw of a standard normal variable (Box–Muller on
// two hashes of the same draw index).
func (s *stream) normal() float64 {
	i := s.n.Add(1) - 1
	u1 := 1 - toUnit(mix64(s.seed, 2*i)) // (0, 1]: log is finite
	u2 := toUnit(mix64(s.seed, 2*i+1))
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}
