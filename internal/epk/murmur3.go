package epk

import (
	"encoding/binary"
	"math/bits"
)

// This file implements MurmurHash3 (Austin Appleby's public-domain
// algorithm) in its x86 32-bit and x64 128-bit variants, which are the two
// hashes Cosmos DB uses for partition key hash versions 1 and 2.

const (
	m32c1 uint32 = 0xcc9e2d51
	m32c2 uint32 = 0x1b873593

	m128c1 uint64 = 0x87c37b91114253d5
	m128c2 uint64 = 0x4cf5ad432745937f
)

// murmur3x86_32 returns the MurmurHash3 x86 32-bit hash of data.
func murmur3x86_32(data []byte, seed uint32) uint32 {
	h := seed
	n := len(data)
	body := n &^ 3
	for i := 0; i < body; i += 4 {
		k := binary.LittleEndian.Uint32(data[i:])
		h ^= scramble32(k)
		h = bits.RotateLeft32(h, 13)
		h = h*5 + 0xe6546b64
	}

	var k uint32
	tail := data[body:]
	switch len(tail) {
	case 3:
		k |= uint32(tail[2]) << 16
		fallthrough
	case 2:
		k |= uint32(tail[1]) << 8
		fallthrough
	case 1:
		k |= uint32(tail[0])
		h ^= scramble32(k)
	}

	h ^= uint32(n)
	return fmix32(h)
}

func scramble32(k uint32) uint32 {
	k *= m32c1
	k = bits.RotateLeft32(k, 15)
	return k * m32c2
}

func fmix32(h uint32) uint32 {
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// murmur3x64_128 returns the MurmurHash3 x64 128-bit hash of data as its two
// 64-bit halves (h1 is the half the reference implementation stores first).
func murmur3x64_128(data []byte, seed uint64) (h1, h2 uint64) {
	h1, h2 = seed, seed
	n := len(data)
	body := n &^ 15
	for i := 0; i < body; i += 16 {
		k1 := binary.LittleEndian.Uint64(data[i:])
		k2 := binary.LittleEndian.Uint64(data[i+8:])

		h1 ^= mixK1(k1)
		h1 = bits.RotateLeft64(h1, 27)
		h1 += h2
		h1 = h1*5 + 0x52dce729

		h2 ^= mixK2(k2)
		h2 = bits.RotateLeft64(h2, 31)
		h2 += h1
		h2 = h2*5 + 0x38495ab5
	}

	tail := data[body:]
	if len(tail) > 8 {
		var k2 uint64
		for i := len(tail) - 1; i >= 8; i-- {
			k2 = k2<<8 | uint64(tail[i])
		}
		h2 ^= mixK2(k2)
	}
	if len(tail) > 0 {
		var k1 uint64
		for i := min(len(tail), 8) - 1; i >= 0; i-- {
			k1 = k1<<8 | uint64(tail[i])
		}
		h1 ^= mixK1(k1)
	}

	h1 ^= uint64(n)
	h2 ^= uint64(n)
	h1 += h2
	h2 += h1
	h1 = fmix64(h1)
	h2 = fmix64(h2)
	h1 += h2
	h2 += h1
	return h1, h2
}

func mixK1(k uint64) uint64 {
	k *= m128c1
	k = bits.RotateLeft64(k, 31)
	return k * m128c2
}

func mixK2(k uint64) uint64 {
	k *= m128c2
	k = bits.RotateLeft64(k, 33)
	return k * m128c1
}

func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}
