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

// rangeBuckets returns the buckets a Range plan selects.
func (ix *pathIndex) rangeBuckets(pl *query.IndexPlan) []*indexBucket {
	lo := 0
	var bound any
	if pl.HasLo {
		bound = pl.Lo
	} else {
		bound = pl.Hi // same type: start at the first value of that type
	}
	lo = sort.Search(len(ix.sorted), func(i int) bool {
		v := ix.sorted[i].val
		if !query.SameKind(v, bound) {
			return query.CompareScalars(v, bound) > 0
		}
		if !pl.HasLo {
			return true
		}
		return query.CompareScalars(v, bound) >= 0
	})
	var out []*indexBucket
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
		out = append(out, b)
	}
	return out
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

// estimate is an upper bound of the number of versions a plan selects
// (caller holds p.mu; the plan's indexes exist).
func (p *partition) estimate(pl *query.IndexPlan) int {
	switch pl.Op {
	case query.IndexAnd:
		best := -1
		for _, k := range pl.Kids {
			if e := p.estimate(k); best < 0 || e < best {
				best = e
			}
		}
		return best
	case query.IndexOr:
		n := 0
		for _, k := range pl.Kids {
			n += p.estimate(k)
		}
		return n
	}
	ix := p.indexes[strings.Join(pl.Path, "\x00")]
	if pl.Op == query.IndexEq {
		key, _ := query.ScalarKey(pl.Value)
		if b := ix.byKey[key]; b != nil {
			return len(b.docs)
		}
		return 0
	}
	n := 0
	for _, b := range ix.rangeBuckets(pl) {
		n += len(b.docs)
	}
	return n
}

// candidates adds to out the versions of p a plan selects (caller holds
// p.mu; the plan's indexes exist): an AND reads its most selective side
// and checks the others on each version's values, as the service
// intersects index postings before loading documents.
func (p *partition) candidates(pl *query.IndexPlan, out map[*document]struct{}) {
	switch pl.Op {
	case query.IndexAnd:
		best, bestN := 0, -1
		for i, k := range pl.Kids {
			if e := p.estimate(k); bestN < 0 || e < bestN {
				best, bestN = i, e
			}
		}
		sub := map[*document]struct{}{}
		p.candidates(pl.Kids[best], sub)
		for d := range sub {
			if pl.Holds(d.data) {
				out[d] = struct{}{}
			}
		}
		return
	case query.IndexOr:
		for _, k := range pl.Kids {
			p.candidates(k, out)
		}
		return
	}
	ix := p.indexes[strings.Join(pl.Path, "\x00")]
	if pl.Op == query.IndexEq {
		key, _ := query.ScalarKey(pl.Value)
		if b := ix.byKey[key]; b != nil {
			for d := range b.docs {
				out[d] = struct{}{}
			}
		}
		return
	}
	for _, b := range ix.rangeBuckets(pl) {
		for d := range b.docs {
			out[d] = struct{}{}
		}
	}
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
