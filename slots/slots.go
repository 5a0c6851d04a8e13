// Package slots is durafeed's dispatch slot layout, defined once: the
// number of slots, an instance's slot, and how the slots are cut into
// contiguous blocks (lease blocks of the event-driven engine, local shares
// of the polling dispatcher, the waiters of a wakeup hub).
//
// An instance's slot is the top eight bits of the V2 hash of its partition
// key, so it is the same in every process and release, and a block of
// consecutive slots is one contiguous range of Cosmos DB's own placement:
// a lease on a block is exactly one change-feed range.
package slots

import (
	"fmt"

	"github.com/durafeed/durafeed/internal/epk"
)

// Count is the number of dispatch slots.
const Count = 256

// DefaultBlocks is the default number of lease blocks the slots are cut
// into (Count/DefaultBlocks = 32 slots each): one change-feed reader each.
// Every replica of a container must use the same number.
const DefaultBlocks = 8

// Of returns the dispatch slot of an instance, in [0, Count).
func Of(instance string) int {
	e, err := epk.Compute(epk.Hash, 2, []any{instance})
	if err != nil {
		return 0 // unreachable: a string always hashes
	}
	return epk.SlotOf(e, Count)
}

// Block is the contiguous run of slots First..Last (inclusive).
type Block struct {
	First, Last int
}

// All returns the block of every slot.
func All() Block { return Block{First: 0, Last: Count - 1} }

// All reports whether the block covers every slot.
func (b Block) All() bool { return b.First == 0 && b.Last == Count-1 }

// Contains reports whether slot lies in the block.
func (b Block) Contains(slot int) bool { return slot >= b.First && slot <= b.Last }

// Range is the block's effective-partition-key range: the documents of
// exactly the instances whose slot lies in the block.
func (b Block) Range() epk.Range { return epk.SlotRange(b.First, b.Last, Count) }

// Split cuts the slots into n contiguous blocks of near-equal size, in
// ascending order (block i is i*Count/n .. (i+1)*Count/n-1). n is clamped
// to [1, Count].
func Split(n int) []Block {
	n = min(max(n, 1), Count)
	out := make([]Block, n)
	for i := range out {
		out[i] = Block{First: i * Count / n, Last: (i+1)*Count/n - 1}
	}
	return out
}

// CheckBlocks returns an error unless n is a valid lease block count: a
// power of two from 1 to Count, so that every block has the same number
// of slots.
func CheckBlocks(n int) error {
	if n < 1 || n > Count || n&(n-1) != 0 {
		return fmt.Errorf("slots: block count %d is not a power of two from 1 to %d", n, Count)
	}
	return nil
}

// Ranges returns the EPK ranges of the n lease blocks, in ascending
// order, or nil when CheckBlocks(n) fails.
func Ranges(n int) []epk.Range {
	if CheckBlocks(n) != nil {
		return nil
	}
	bs := Split(n)
	out := make([]epk.Range, n)
	for i, b := range bs {
		out[i] = b.Range()
	}
	return out
}
