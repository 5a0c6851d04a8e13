package cosmosemu

import (
	"slices"
	"sort"
	"strings"

	"github.com/durafeed/durafeed/cosmosemu/internal/query"
)

// Secondary indexes
//
// Each physical partition keeps, for the document paths queries have
// filtered on, an index from the scalar value at the path (null, boolean,
// number, string) to the current versions holding it: a hash map for
// equality and the distinct values in order (query.CompareScalars) for
// ranges. Indexes reference the immutable *document versions; they never
// copy documents. A path's index is built on a partition the first time a
// query needs it there (under the partition's write lock) and then
// maintained by install and remove, which every write path goes through
// (point writes, patch, batch, bulk, time-to-live purges). A split's
// children start without indexes and build them on demand.
//
// A query uses the index when query.IndexPlan derives a condition from its
// WHERE clause and every path of that condition is indexed by the
// container's policy (plans on other paths are pruned the way the WHERE
// clause would be: an AND keeps its other side, an OR is dropped). The
// candidates are the versions satisfying the condition; the full query is
// still evaluated on each of them, in creation order, so results, order and
// continuations are those of a scan. Without a usable condition, or with
// Options.DisableQueryIndex, the partition is scanned.
//
// A query on one whole partition key value is served from that logical
// partition, as the service serves it from the logical partition's index
// entries: its versions are tested against the condition one by one
// (IndexPlan.Holds), which selects exactly the candidates the postings
// would (see candidates), unless the condition's postings are fewer than
// the logical partition's versions, when they are read instead. Its cost
// then does not grow with the other logical partitions of its physical
// partition.

// pathIndex indexes the scalar values at one path of a partition's current
// document versions.
type pathIndex struct {
	path   []string
	byKey  map[string]*indexBucket
	sorted []*indexBucket // by value, query.CompareScalars order
}

// indexBucket holds the versions whose value at the path has one key.
type indexBucket struct {
	val  any
	docs map[*document]struct{}
}

func newPathIndex(path []string) *pathIndex {
	return &pathIndex{path: path, byKey: map[string]*indexBucket{}}
}

// keyOf is the index key of d's value at the index's path, with the
// value; ok is false when d has no scalar value there (not indexed).
func (ix *pathIndex) keyOf(d *document) (key string, v any, ok bool) {
	v, ok = query.ValueAt(d.data, ix.path)
	if !ok {
		return "", nil, false
	}
	key, ok = query.ScalarKey(v)
	return key, v, ok
}

func (ix *pathIndex) add(d *document) {
	key, v, ok := ix.keyOf(d)
	if !ok {
		return
	}
	b := ix.byKey[key]
	if b == nil {
		b = &indexBucket{val: v, docs: map[*document]struct{}{}}
		ix.byKey[key] = b
		i := sort.Search(len(ix.sorted), func(i int) bool { return query.CompareScalars(ix.sorted[i].val, v) >= 0 })
		ix.sorted = slices.Insert(ix.sorted, i, b)
	}
	b.docs[d] = struct{}{}
}

func (ix *pathIndex) del(d *document) {
	key, v, ok := ix.keyOf(d)
	if !ok {
		return
	}
	b := ix.byKey[key]
	if b == nil {
		return
	}
	delete(b.docs, d)
	if len(b.docs) > 0 {
		return
	}
	delete(ix.byKey, key)
	i := sort.Search(len(ix.sorted), func(i int) bool { return query.CompareScalars(ix.sorted[i].val, v) >= 0 })
	for ; i < len(ix.sorted); i++ {
		if ix.sorted[i] == b {
			ix.sorted = slices.Delete(ix.sorted, i, i+1)
			return
		}
	}
}

// rangeBuckets calls yield, in value order, with each bucket a Range plan
// selects (exactly those whose value satisfies pl.InRange), until yield
// returns false.
func (ix *pathIndex) rangeBuckets(pl *query.IndexPlan, yield func(*indexBucket) bool) {
	var bound any
	if pl.HasLo {
		bound = pl.Lo
	} else {
		bound = pl.Hi // same type: start at the first value of that type
	}
	lo := sort.Search(len(ix.sorted), func(i int) bool {
		v := ix.sorted[i].val
		if !query.SameKind(v, bound) {
			return query.CompareScalars(v, bound) > 0
		}
		if !pl.HasLo {
			return true
		}
		return query.CompareScalars(v, bound) >= 0
	})
	for i := lo; i < len(ix.sorted); i++ {
		b := ix.sorted[i]
		if !query.SameKind(b.val, bound) {
			break
		}
		if !pl.InRange(b.val) {
			if pl.HasHi && query.CompareScalars(b.val, pl.Hi) > 0 {
				break
			}
			continue // exclusive lower bound
		}
		if !yield(b) {
			return
		}
	}
}

// indexable prunes a plan to the paths the policy indexes; nil when nothing
// is left.
func indexable(pl *query.IndexPlan, ip *indexPolicy) *query.IndexPlan {
	if pl == nil || ip == nil || ip.none {
		return nil
	}
	switch pl.Op {
	case query.IndexAnd:
		var kids []*query.IndexPlan
		for _, k := range pl.Kids {
			if k = indexable(k, ip); k != nil {
				kids = append(kids, k)
			}
		}
		switch len(kids) {
		case 0:
			return nil
		case 1:
			return kids[0]
		}
		return &query.IndexPlan{Op: query.IndexAnd, Kids: kids}
	case query.IndexOr:
		kids := make([]*query.IndexPlan, 0, len(pl.Kids))
		for _, k := range pl.Kids {
			if k = indexable(k, ip); k == nil {
				return nil
			}
			kids = append(kids, k)
		}
		return &query.IndexPlan{Op: query.IndexOr, Kids: kids}
	}
	if !ip.indexed(pl.Path) {
		return nil
	}
	return pl
}

// planPaths appends the index keys of the paths a plan reads.
func planPaths(pl *query.IndexPlan, out map[string][]string) {
	if pl.Op == query.IndexAnd || pl.Op == query.IndexOr {
		for _, k := range pl.Kids {
			planPaths(k, out)
		}
		return
	}
	out[strings.Join(pl.Path, "\x00")] = pl.Path
}

// ensureIndexes builds, under the write lock, the indexes a plan needs that
// p lacks. It reports false when p is gone.
func (p *partition) ensureIndexes(pl *query.IndexPlan) bool {
	need := map[string][]string{}
	planPaths(pl, need)
	p.mu.RLock()
	missing := false
	for k := range need {
		if p.indexes[k] == nil {
			missing = true
			break
		}
	}
	gone := p.gone
	p.mu.RUnlock()
	if gone {
		return false
	}
	if !missing {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone {
		return false
	}
	if p.indexes == nil {
		p.indexes = map[string]*pathIndex{}
	}
	for k, path := range need {
		if p.indexes[k] != nil {
			continue
		}
		ix := newPathIndex(path)
		for _, lp := range p.logical {
			for _, d := range lp.docs {
				ix.add(d)
			}
		}
		p.indexes[k] = ix
	}
	return true
}

// estimateUpTo returns min(n, limit), where n is the number of postings
// candidates reads for the plan, an upper bound of the versions it selects
// (caller holds p.mu; the plan's indexes exist). It stops reading the
// index once limit is reached, so that its cost is bounded by the number of
// plan leaves plus min(n, limit) buckets (and a binary search per range
// leaf), whatever the size of the partition. limit <= 0 gives 0.
func (p *partition) estimateUpTo(pl *query.IndexPlan, limit int) int {
	if limit <= 0 {
		return 0
	}
	switch pl.Op {
	case query.IndexAnd:
		// candidates reads its most selective side: the minimum.
		for _, k := range pl.Kids {
			limit = p.estimateUpTo(k, limit)
		}
		return limit
	case query.IndexOr:
		n := 0
		for _, k := range pl.Kids {
			if n += p.estimateUpTo(k, limit-n); n >= limit {
				return limit
			}
		}
		return n
	}
	ix := p.indexes[strings.Join(pl.Path, "\x00")]
	if pl.Op == query.IndexEq {
		key, _ := query.ScalarKey(pl.Value)
		if b := ix.byKey[key]; b != nil {
			return min(len(b.docs), limit)
		}
		return 0
	}
	n := 0
	ix.rangeBuckets(pl, func(b *indexBucket) bool {
		n += len(b.docs)
		return n < limit
	})
	return min(n, limit)
}

// candidates adds to out the versions of p a plan selects (caller holds
// p.mu; the plan's indexes exist): an AND reads its most selective side
// and checks the others on each version's values, as the service
// intersects index postings before loading documents. It returns the
// number of postings it read (estimateUpTo without a limit). limit is a
// bound the caller knows that number to be below, math.MaxInt when it
// knows none: it only caps the estimates an AND compares, so that they
// read no more of the index than the postings then read. The side chosen
// is the first with the fewest postings, whatever the limit.
//
// The versions selected are exactly the current versions d of p for which
// pl.Holds(d.data): an Eq leaf reads the bucket of ScalarKey(Value), which
// holds the versions with a scalar of that key at the path; a Range leaf
// reads the buckets whose value is InRange (rangeBuckets), and the
// versions in a bucket share its value's key, hence its order; an AND
// keeps the versions of one side that satisfy the whole AND; an OR is the
// union of its sides. selectDocs relies on this to select from one logical
// partition without the postings.
func (p *partition) candidates(pl *query.IndexPlan, out map[*document]struct{}, limit int) int {
	switch pl.Op {
	case query.IndexAnd:
		best, bestN := 0, limit
		for i, k := range pl.Kids {
			if e := p.estimateUpTo(k, bestN); e < bestN {
				best, bestN = i, e
			}
		}
		sub := map[*document]struct{}{}
		read := p.candidates(pl.Kids[best], sub, bestN+1)
		for d := range sub {
			if pl.Holds(d.data) {
				out[d] = struct{}{}
			}
		}
		return read
	case query.IndexOr:
		read := 0
		for _, k := range pl.Kids {
			read += p.candidates(k, out, limit)
		}
		return read
	}
	ix := p.indexes[strings.Join(pl.Path, "\x00")]
	if pl.Op == query.IndexEq {
		key, _ := query.ScalarKey(pl.Value)
		b := ix.byKey[key]
		if b == nil {
			return 0
		}
		for d := range b.docs {
			out[d] = struct{}{}
		}
		return len(b.docs)
	}
	read := 0
	ix.rangeBuckets(pl, func(b *indexBucket) bool {
		for d := range b.docs {
			out[d] = struct{}{}
		}
		read += len(b.docs)
		return true
	})
	return read
}

// indexInstall and indexRemove keep p's indexes in step with its current
// versions (caller holds p.mu for writing).
func (p *partition) indexInstall(old, d *document) {
	for _, ix := range p.indexes {
		if old != nil {
			ix.del(old)
		}
		ix.add(d)
	}
}

func (p *partition) indexRemove(d *document) {
	for _, ix := range p.indexes {
		ix.del(d)
	}
}
