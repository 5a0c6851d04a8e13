// Package epk computes Azure Cosmos DB effective partition keys (EPKs) and
// maps them onto durafeed dispatch slots.
//
// Cosmos DB places every logical partition by its EPK, an uppercase hex string
// derived from the partition key value(s). Physical partition key ranges are
// half-open EPK intervals [minInclusive, maxExclusive) whose lowest bound is
// MinInclusive ("") and whose highest bound is MaxExclusive ("FF"). The
// embedded emulator (cosmosemu) and the Cosmos provider both use this package
// so that they agree with the service, and with each other, on where a key
// lives.
//
// # EPK formats
//
// Hash partitioning, version 2 (the format of every container created by a
// current SDK with an explicit version 2, and the only one durafeed's slot
// functions are defined for): the components are serialized one after the
// other (type marker byte, then the payload: little-endian IEEE-754 bits for
// numbers, UTF-8 bytes followed by 0xFF for strings), the whole buffer is
// hashed with MurmurHash3 x64 128-bit (seed 0), the two 64-bit halves are
// written high half first, big-endian, and the two most significant bits of
// the first byte are cleared. The result is always 32 hex digits whose first
// digit is 0-3, i.e. the V2 hash space is the 126-bit interval
// [00000000000000000000000000000000, 3FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF].
//
// MultiHash (hierarchical partition keys, always hash version 2): every
// component is hashed on its own exactly as above and the 32-digit results are
// concatenated, so a key with k levels has a 32*k digit EPK and a prefix of the
// key (its first j levels) has an EPK that is a prefix of the full one.
//
// Hash partitioning, version 1 (legacy; the default when a container's
// definition carries no version): strings longer than 100 UTF-16 code units are
// truncated to their first 100 code units, the components are serialized as
// for version 2 except that strings end with 0x00, the buffer is hashed with
// MurmurHash3 x86 32-bit (seed 0), and the EPK is the service's binary
// encoding of the list [hash as a number, truncated components...]. These EPKs
// look like "05C1CF33970FF80800" and have a variable length.
//
// Note: azcosmos v1.5.0 renders version-1 EPKs differently ("000...000" + the
// 8-digit hash) in its client-side ReadMany routing. That string is not what
// the service (nor the .NET, Java, Python, JavaScript or Rust SDKs) uses and
// does not order correctly against the service's version-1 range boundaries;
// this package follows the service. For version 2 and MultiHash the SDK and the
// service agree, and so does this package.
//
// # Ordering
//
// EPKs are ordered by Compare: ordinal byte order, where the shorter string
// is treated as if padded with '0' digits. This makes a hierarchical prefix EPK
// equal to its zero-padded full-length form, as the service and SDKs require.
//
// # Slots
//
// durafeed spreads work over a power-of-two number of slots (at most
// MaxSlots). SlotOf places a V2 EPK proportionally in the 126-bit hash space
// and SlotRange returns the EPK range of a contiguous block of slots; the
// boundaries between slots are the exact binary fractions k*2^126/slots, so a
// block of slots is exactly one contiguous EPK range, and SplitEven(n) for a
// power of two n produces physical ranges that coincide with slot blocks.
package epk
