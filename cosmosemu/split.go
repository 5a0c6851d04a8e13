package cosmosemu

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strings"

	"github.com/durafeed/durafeed/internal/epk"
	"go.uber.org/zap"
)

// Partition splits
//
// A split replaces one physical partition (the parent) by two children that
// cover its EPK range, cut at the midpoint of the V2 hash space it spans.
// As on the service:
//
//   - Children get new ids (the container's next range numbers) and list
//     their ancestry in "parents"; the pkranges feed gets a new version, so an
//     incremental read (If-None-Match with the previous ETag) returns just
//     the children and the parent no longer appears in a full read.
//   - Each logical partition moves whole to the child owning its EPK, with
//     its documents and their change-log entries. Entries keep their LSNs,
//     and each child's LSN counter starts at the parent's last LSN: a child's
//     log is a subsequence of its parent's, so LSN order per partition key is
//     unchanged, and a change-feed continuation taken on the parent ("after
//     LSN n") means exactly the same thing on both children. Resuming the
//     parent's continuation on each child therefore returns every change not
//     yet read exactly once. Superseded versions and deletes, which the
//     latest-version feed never serves, are dropped during the move, and so
//     are expired items; the others keep their time to live (ttl.go).
//   - The parent is frozen (gone). A request naming it (header
//     x-ms-documentdb-partitionkeyrangeid, which carries change-feed and
//     ReadMany continuations) answers 410 with sub-status 1002; a request
//     routed by partition key, or a cross-partition query whose continuation
//     points into the parent, follows the split to the child.

// ErrNotFound reports that a database, container or partition key range
// named in an emulator-level operation does not exist.
var ErrNotFound = errors.New("cosmosemu: not found")

// ErrCannotSplit reports that a partition key range is too narrow to be
// split further.
var ErrCannotSplit = errors.New("cosmosemu: partition key range cannot be split")

// v2SpaceEnd is the upper bound of the EPK values V2 hashing (and each
// MultiHash level) produces: their top two bits are clear. The last range
// extends to "FF"; its midpoint is taken within the hash space so both
// children receive keys.
const v2SpaceEnd = "40000000000000000000000000000000"

// PartitionKeyRange describes one current physical partition of a
// container, as the pkranges feed lists it.
type PartitionKeyRange struct {
	// ID is the range id (x-ms-documentdb-partitionkeyrangeid).
	ID string `json:"id"`
	// MinInclusive and MaxExclusive bound the range's effective partition
	// keys.
	MinInclusive string `json:"minInclusive"`
	MaxExclusive string `json:"maxExclusive"`
	// Parents lists the ranges this one was split from, oldest first.
	Parents []string `json:"parents"`
}

// PartitionKeyRanges returns the current physical partitions of a
// container in EPK order. It fails with ErrNotFound when the database or
// container does not exist.
func (s *Server) PartitionKeyRanges(databaseID, containerID string) ([]PartitionKeyRange, error) {
	c, aerr := s.store.container(databaseID, containerID)
	if aerr != nil {
		return nil, fmt.Errorf("%w: container %q of database %q", ErrNotFound, containerID, databaseID)
	}
	parts := c.partitions()
	out := make([]PartitionKeyRange, len(parts))
	for i, p := range parts {
		out[i] = PartitionKeyRange{ID: p.id, MinInclusive: p.rng.Min, MaxExclusive: p.rng.Max, Parents: slices.Clone(p.parents)}
		if out[i].Parents == nil {
			out[i].Parents = []string{}
		}
	}
	return out, nil
}

// SplitPartition splits the physical partition rangeID of a container into
// two children at the midpoint of its EPK range, the way the service splits
// a partition that outgrew its storage or throughput, and returns the
// children's ids (lower range first). Documents and their change-feed
// history move to the child owning their key; requests naming the parent
// answer 410/1002 (PartitionKeyRangeGone) from then on, which makes the SDK
// refresh its routing map and retry on the children. See the package
// documentation for how LSNs and continuations carry over.
//
// It fails with ErrNotFound when the database, container or range does not
// exist (a range that was already split no longer exists) and with
// ErrCannotSplit when the range is too narrow. ctx is checked before the
// split starts; the split itself is a short in-memory operation.
func (s *Server) SplitPartition(ctx context.Context, databaseID, containerID, rangeID string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cosmosemu: split: %w", err)
	}
	c, aerr := s.store.container(databaseID, containerID)
	if aerr != nil {
		return nil, fmt.Errorf("%w: container %q of database %q", ErrNotFound, containerID, databaseID)
	}
	kids, err := c.split(rangeID)
	if err != nil {
		return nil, err
	}
	ids := []string{kids[0].id, kids[1].id}
	s.log.Info("cosmosemu: partition split", zap.String("database", databaseID), zap.String("container", containerID),
		zap.String("range", rangeID), zap.Strings("children", ids))
	return ids, nil
}

// split performs a split of the partition with the given id (see the file
// comment).
func (c *container) split(rangeID string) ([2]*partition, error) {
	var kids [2]*partition
	if c.removed.Load() {
		return kids, fmt.Errorf("%w: container %q", ErrNotFound, c.id)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	idx := slices.IndexFunc(c.parts, func(p *partition) bool { return p.id == rangeID })
	if idx < 0 {
		return kids, fmt.Errorf("%w: partition key range %q of container %q", ErrNotFound, rangeID, c.id)
	}
	p := c.parts[idx]
	mid, ok := epkMidpoint(p.rng)
	if !ok {
		return kids, fmt.Errorf("%w: range %q [%q, %q) is too narrow", ErrCannotSplit, rangeID, p.rng.Min, p.rng.Max)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	version := c.rangesLSN + 1
	parents := append(slices.Clone(p.parents), p.id)
	for i, r := range [2]epk.Range{{Min: p.rng.Min, Max: mid}, {Min: mid, Max: p.rng.Max}} {
		k := c.newPartition(c.nextRangeID, r, version, parents)
		c.nextRangeID++
		k.lsn, k.lastTS = p.lsn, p.lastTS
		kids[i] = k
	}
	owner := func(e string) *partition {
		if epk.Compare(e, mid) < 0 {
			return kids[0]
		}
		return kids[1]
	}
	// Copy logical partitions and current versions so the frozen parent
	// stays readable, unchanged, by requests that resolved it before the
	// split (they find it gone under its lock and re-route). Versions keep
	// their own time to live (and _ts), so each expires on its child when
	// it would have on the parent; the children's expiry heaps are built by
	// their first purge. Versions already expired are purged here.
	view := c.ttlView()
	moved := make(map[*document]*document, p.docs)
	for key, lp := range p.logical {
		k := owner(lp.epk)
		nlp := &logicalPart{key: lp.key, pk: lp.pk, epk: lp.epk, docs: make(map[string]*document, len(lp.docs))}
		for id, d := range lp.docs {
			if view.hidden(d) {
				continue
			}
			nd := *d
			nd.lp = nlp
			nlp.docs[id] = &nd
			moved[d] = &nd
		}
		if len(nlp.docs) == 0 {
			continue
		}
		k.logical[key] = nlp
		k.docs += len(nlp.docs)
	}
	for _, e := range p.log {
		nd := moved[e.doc]
		if nd == nil {
			continue // superseded, deleted or expired: never served by the feed
		}
		k := owner(nd.lp.epk)
		k.log = append(k.log, logEntry{lsn: e.lsn, ts: e.ts, doc: nd})
	}
	p.gone = true

	parts := make([]*partition, 0, len(c.parts)+1)
	parts = append(parts, c.parts[:idx]...)
	parts = append(parts, kids[0], kids[1])
	parts = append(parts, c.parts[idx+1:]...)
	c.parts = parts
	c.rangesLSN = version
	return kids, nil
}

// epkMidpoint returns the EPK halving r, computed on hex digits (the
// shorter bound padded with zeros). An upper bound past the V2 hash space
// ("FF") counts as the end of that space, so splitting the last range
// divides the keys it can actually hold. ok is false when r is too narrow.
func epkMidpoint(r epk.Range) (string, bool) {
	if m, ok := hexMidpoint(r.Min, r.Max, v2SpaceEnd); ok {
		return m, true
	}
	return hexMidpoint(r.Min, r.Max, "")
}

// hexMidpoint halves [lo, hi) with hi clamped to ceiling when ceiling is
// not empty and hi exceeds it.
func hexMidpoint(lo, hi, ceiling string) (string, bool) {
	if ceiling != "" && epk.Compare(hi, ceiling) > 0 {
		hi = ceiling
	}
	width := max(len(lo), len(hi), len(v2SpaceEnd))
	a, ok1 := new(big.Int).SetString(padHex(lo, width), 16)
	b, ok2 := new(big.Int).SetString(padHex(hi, width), 16)
	if !ok1 || !ok2 || a.Cmp(b) >= 0 {
		return "", false
	}
	m := new(big.Int).Add(a, b)
	m.Rsh(m, 1)
	if m.Cmp(a) <= 0 {
		return "", false
	}
	return strings.ToUpper(padHexLeft(m.Text(16), width)), true
}

func padHex(s string, width int) string {
	if s == "" {
		s = "0"
	}
	return s + strings.Repeat("0", max(0, width-len(s)))
}

func padHexLeft(s string, width int) string {
	return strings.Repeat("0", max(0, width-len(s))) + s
}

// errRangeGone is the service's answer to a request naming a partition key
// range that no longer exists (split).
func errRangeGone(rangeID string, c *container) *apiError {
	rid := ""
	if c != nil {
		rid = c.rid
	}
	return newErrSub(http.StatusGone, subStatusPartitionKeyRangeGone,
		fmt.Sprintf("PartitionKeyRange with id '%s' in collection '%s' doesn't exist.", rangeID, rid))
}
