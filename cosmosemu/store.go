package cosmosemu

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/durafeed/durafeed/internal/epk"
)

// Storage model
//
// store → databases → containers → a fixed, ordered set of physical
// partitions (EPK ranges, created with epk.SplitEven). Each partition owns a
// mutex, its LSN counter, its documents (grouped by logical partition key)
// and an append-only change log. Every write to a partition (a point write
// or a whole transactional batch) happens under that partition's lock: the
// LSN is assigned, the document map updated and the log entry appended in
// one critical section, so the change feed can never observe a gap or an
// out-of-order LSN, and a batch is never visible half-applied.
//
// Documents are immutable versions: a write installs a new *document. A log
// entry is live while the logical partition still maps the id to the very
// version it references; superseded or deleted versions are skipped by the
// feed (latest-version mode collapses intermediate versions and omits
// deletes) and compacted away once they make up half the log.
//
// Splits (split.go) replace one partition by two children covering its EPK
// range. The parent is frozen (gone) under its lock: every handler that
// locks a partition checks gone first, answering 410/1002 when the request
// named the range and following the split to the child otherwise. Lock
// order is container before partition, never the reverse.

type store struct {
	mu             sync.RWMutex
	clock          Clock
	partitionCount int
	noIndex        bool // Options.DisableQueryIndex
	dbs            map[string]*database
	offers         map[string]*offer
	salt           uint32
	ridCounter     atomic.Uint32
	etagCounter    atomic.Uint64
	creation       atomic.Uint64

	// noLogicalSelect, for tests and benchmarks, makes queries on one
	// partition key select their candidates from the whole physical
	// partition (postings or scan, filtered by logical partition) instead
	// of from the logical partition (queryScope.logicalKey). Results and
	// charges are the same; only the work differs.
	noLogicalSelect atomic.Bool
}

func newStore(partitionCount int, clk Clock, noIndex bool) *store {
	var b [4]byte
	_, _ = rand.Read(b[:])
	s := &store{
		clock:          clk,
		partitionCount: partitionCount,
		noIndex:        noIndex,
		dbs:            map[string]*database{},
		offers:         map[string]*offer{},
		salt:           binary.BigEndian.Uint32(b[:]),
	}
	s.ridCounter.Store(binary.BigEndian.Uint32(b[:]) >> 8)
	return s
}

type database struct {
	id, rid string
	seq     uint64
	ts      int64
	etag    string
	offerID string
	mu      sync.RWMutex
	colls   map[string]*container
	collSeq atomic.Uint32
	removed atomic.Bool
}

type container struct {
	db      *database
	id, rid string
	ridRaw  []byte
	seq     uint64
	clock   Clock

	mu          sync.RWMutex // guards props, policy, pkDef, ts, etag, parts, rangesLSN, nextRangeID
	props       map[string]any
	policy      *indexPolicy // parsed props["indexingPolicy"]
	pkDef       pkDefinition
	ts          int64
	etag        string
	parts       []*partition // current ranges in EPK order; replaced, never mutated in place
	rangesLSN   int64        // version of the pkranges feed (its ETag)
	nextRangeID int          // id of the next range a split creates
	offerID     string

	// ttl is the time-to-live setting (props["defaultTtl"]), replaced whole
	// on every container replace; an atomic so that code holding a
	// partition lock may read it without taking c.mu (see ttl.go).
	ttl atomic.Pointer[ttlConfig]

	docSeq  atomic.Uint64
	removed atomic.Bool

	// selectVisits counts the work of query candidate selection in the
	// container's partitions (logical partitions looked up or iterated,
	// versions and index postings read; see selectDocs), for tests.
	selectVisits atomic.Uint64
}

type partition struct {
	coll    *container
	id      string
	num     int // numeric id, also the range's ridPrefix
	rng     epk.Range
	rid     string
	lsn0    int64    // version of this range in the pkranges feed
	parents []string // ids of the ranges this one was split from, oldest first

	mu      sync.RWMutex
	gone    bool // split: frozen, no longer serves requests
	lsn     int64
	lastTS  int64
	logical map[string]*logicalPart
	log     []logEntry
	stale   int
	docs    int

	// Expiry schedule of time-to-live purging (ttl.go): a min-heap of the
	// current versions with an expiry under expCfg, the container setting
	// it was built for; rebuilt when that setting changes.
	expiries expiryHeap
	expCfg   *ttlConfig

	// indexes are the secondary indexes built so far (index.go), by path
	// (steps joined by NUL); maintained by install and remove.
	indexes map[string]*pathIndex
}

type logicalPart struct {
	key  string // canonical JSON of the partition key components
	pk   []any
	epk  string
	docs map[string]*document
}

type document struct {
	id   string
	lp   *logicalPart
	seq  uint64
	rid  string
	etag string
	ts   int64
	lsn  int64
	ttl  int64          // the item's own "ttl": -1, 1..2147483647, or 0 when absent or not valid
	body []byte         // stored JSON including system properties, without _lsn
	data map[string]any // parsed form of body; never mutated after install
}

type logEntry struct {
	lsn int64
	ts  int64
	doc *document
}

func (s *store) newETag() string {
	n := s.etagCounter.Add(1)
	return fmt.Sprintf("\"%08x-0000-0000-0000-%012x\"", s.salt, n)
}

func encodeRID(b []byte) string {
	return strings.ReplaceAll(base64.StdEncoding.EncodeToString(b), "/", "-")
}

// now returns the emulator clock's current Unix second.
func (s *store) now() int64 { return s.clock.Now().Unix() }

// now returns the emulator clock's current Unix second.
func (c *container) now() int64 { return c.clock.Now().Unix() }

// database operations

func (s *store) createDatabase(id string) (*database, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.dbs[id]; ok {
		return nil, errConflict()
	}
	n := s.ridCounter.Add(1)
	raw := make([]byte, 4)
	binary.LittleEndian.PutUint32(raw, n<<8|0x01)
	raw[0] = byte(n%200) + 16
	db := &database{id: id, rid: encodeRID(raw), seq: s.creation.Add(1), ts: s.now(), etag: s.newETag(), colls: map[string]*container{}}
	s.dbs[id] = db
	return db, nil
}

func (s *store) database(id string) *database {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.dbs[id]
}

func (s *store) deleteDatabase(id string) (*database, *apiError) {
	s.mu.Lock()
	db, ok := s.dbs[id]
	if !ok {
		s.mu.Unlock()
		return nil, errNotFound()
	}
	delete(s.dbs, id)
	if db.offerID != "" {
		delete(s.offers, db.offerID)
	}
	s.mu.Unlock()
	db.removed.Store(true)
	db.mu.Lock()
	colls := make([]*container, 0, len(db.colls))
	for _, c := range db.colls {
		colls = append(colls, c)
	}
	db.mu.Unlock()
	for _, c := range colls {
		c.removed.Store(true)
		c.mu.RLock()
		oid := c.offerID
		c.mu.RUnlock()
		if oid != "" {
			s.mu.Lock()
			delete(s.offers, oid)
			s.mu.Unlock()
		}
	}
	return db, nil
}

func (s *store) listDatabases() []*database {
	s.mu.RLock()
	out := make([]*database, 0, len(s.dbs))
	for _, d := range s.dbs {
		out = append(out, d)
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
}

// container operations

func (s *store) container(dbID, collID string) (*container, *apiError) {
	db := s.database(dbID)
	if db == nil {
		return nil, errNotFound()
	}
	db.mu.RLock()
	c := db.colls[collID]
	db.mu.RUnlock()
	if c == nil {
		return nil, errNotFound()
	}
	return c, nil
}

func (s *store) createContainer(db *database, id string, props map[string]any, def pkDefinition, ttl *ttlConfig) (*container, *apiError) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.removed.Load() {
		return nil, errNotFound()
	}
	if _, ok := db.colls[id]; ok {
		return nil, errConflict()
	}
	dbRaw, _ := base64.StdEncoding.DecodeString(strings.ReplaceAll(db.rid, "-", "/"))
	raw := make([]byte, 8)
	copy(raw, dbRaw)
	n := db.collSeq.Add(1)
	binary.LittleEndian.PutUint32(raw[4:], n<<3|0x2)
	raw[7] = byte(0x60 + n%32)
	c := &container{
		db: db, id: id, ridRaw: raw, rid: encodeRID(raw), seq: s.creation.Add(1), clock: s.clock,
		props: props, policy: parseIndexPolicy(props), pkDef: def, ts: s.now(), etag: s.newETag(),
	}
	c.ttl.Store(ttl)
	ranges := epk.SplitEven(s.partitionCount)
	c.rangesLSN = 1
	for i, r := range ranges {
		c.parts = append(c.parts, c.newPartition(i, r, 1, nil))
	}
	c.nextRangeID = len(ranges)
	db.colls[id] = c
	return c, nil
}

func (s *store) deleteContainer(db *database, id string) (*container, *apiError) {
	db.mu.Lock()
	c, ok := db.colls[id]
	if ok {
		delete(db.colls, id)
	}
	db.mu.Unlock()
	if !ok {
		return nil, errNotFound()
	}
	c.removed.Store(true)
	c.mu.RLock()
	oid := c.offerID
	c.mu.RUnlock()
	if oid != "" {
		s.mu.Lock()
		delete(s.offers, oid)
		s.mu.Unlock()
	}
	return c, nil
}

func (db *database) listContainers() []*container {
	db.mu.RLock()
	out := make([]*container, 0, len(db.colls))
	for _, c := range db.colls {
		out = append(out, c)
	}
	db.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
}

// partitions returns a snapshot of the container's physical partitions in
// EPK order.
func (c *container) partitions() []*partition {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.parts
}

func (c *container) definition() pkDefinition {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.pkDef
}

// indexing returns the container's current indexing policy.
func (c *container) indexing() *indexPolicy {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.policy
}

// partitionFor returns the physical partition owning an EPK.
func (c *container) partitionFor(e string) *partition {
	parts := c.partitions()
	i := sort.Search(len(parts), func(i int) bool { return epk.Compare(parts[i].rng.Max, e) > 0 })
	if i >= len(parts) {
		i = len(parts) - 1
	}
	return parts[i]
}

// partitionsOverlapping returns the partitions intersecting [min, max).
func (c *container) partitionsOverlapping(min, max string) []*partition {
	var out []*partition
	for _, p := range c.partitions() {
		if epk.Compare(p.rng.Max, min) > 0 && epk.Compare(p.rng.Min, max) < 0 {
			out = append(out, p)
		}
	}
	return out
}

func (c *container) partitionByID(id string) *partition {
	for _, p := range c.partitions() {
		if p.id == id {
			return p
		}
	}
	return nil
}

// newPartition makes an empty partition with numeric id n.
func (c *container) newPartition(n int, r epk.Range, version int64, parents []string) *partition {
	raw := make([]byte, 16)
	copy(raw, c.ridRaw)
	binary.BigEndian.PutUint64(raw[8:], uint64(n)+1)
	return &partition{
		coll: c, id: strconv.Itoa(n), num: n, rng: r, rid: encodeRID(raw), lsn0: version, parents: parents,
		logical: map[string]*logicalPart{},
	}
}

func (c *container) nextDocRID() (uint64, string) {
	n := c.docSeq.Add(1)
	raw := make([]byte, 16)
	copy(raw, c.ridRaw)
	binary.LittleEndian.PutUint64(raw[8:], n)
	return n, encodeRID(raw)
}

// partition helpers; callers hold p.mu as noted.

// lookup returns the current version of a document (caller holds p.mu).
func (p *partition) lookup(pkKey, id string) *document {
	lp := p.logical[pkKey]
	if lp == nil {
		return nil
	}
	return lp.docs[id]
}

// logicalFor returns (creating if needed) a logical partition (caller holds
// p.mu for writing).
func (p *partition) logicalFor(key string, pk []any, e string) *logicalPart {
	lp := p.logical[key]
	if lp == nil {
		lp = &logicalPart{key: key, pk: pk, epk: e, docs: map[string]*document{}}
		p.logical[key] = lp
	}
	return lp
}

// nextTS returns a timestamp not older than any already assigned in this
// partition (caller holds p.mu for writing), keeping the log ordered by
// time as well as by LSN.
func (p *partition) nextTS() int64 {
	ts := p.coll.now()
	if ts < p.lastTS {
		ts = p.lastTS
	}
	p.lastTS = ts
	return ts
}

// install makes doc the current version at the given LSN (caller holds p.mu
// for writing and has set doc.lsn, doc.ts).
func (p *partition) install(doc *document) {
	lp := doc.lp
	old := lp.docs[doc.id]
	if old != nil {
		p.stale++
	} else {
		p.docs++
	}
	p.indexInstall(old, doc)
	lp.docs[doc.id] = doc
	p.log = append(p.log, logEntry{lsn: doc.lsn, ts: doc.ts, doc: doc})
	p.scheduleExpiry(doc)
	p.maybeCompact()
}

// remove deletes the current version of a document (caller holds p.mu).
func (p *partition) remove(doc *document) {
	lp := doc.lp
	if lp.docs[doc.id] == doc {
		p.indexRemove(doc)
		delete(lp.docs, doc.id)
		p.stale++
		p.docs--
		if len(lp.docs) == 0 {
			delete(p.logical, lp.key)
		}
	}
	p.maybeCompact()
}

func (p *partition) live(e logEntry) bool {
	lp := p.logical[e.doc.lp.key]
	return lp != nil && lp.docs[e.doc.id] == e.doc
}

func (p *partition) maybeCompact() {
	if p.stale < 1024 || p.stale*2 < len(p.log) {
		return
	}
	kept := make([]logEntry, 0, len(p.log)-p.stale+16)
	for _, e := range p.log {
		if p.live(e) {
			kept = append(kept, e)
		}
	}
	p.log = kept
	p.stale = 0
}

// sessionToken renders the partition's session token for an LSN.
func (p *partition) sessionToken(lsn int64) string {
	return p.id + ":-1#" + strconv.FormatInt(lsn, 10)
}
