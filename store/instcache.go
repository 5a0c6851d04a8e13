package store

import "sync"

// maxCachedDocBytes bounds the encoded size of an instance document the
// cache keeps: documents with a large output or custom status are read
// again instead of held in memory.
const maxCachedDocBytes = 4 << 10

// instCache remembers the instance documents this process wrote, with
// each write's ETag and session token, so that the next operation on the
// instance can skip reading its document:
//
//   - per instance, the unlocked document of its last ack or abandon: the
//     next fetch locks from it;
//   - per lock token, the document the lock batch wrote: ack commits from
//     it (renewals keep it current).
//
// It is an optimisation only: every write made from a remembered document
// is conditional on its ETag, so a stale entry costs one failed batch and
// the read it saved, never a turn built on the wrong state.
//
// The session token matters on an account with session consistency: the
// fetch's query carries it, so it reads at least what the remembered write
// left (its history and KV), as the conditional lock requires.
type instCache struct {
	max int

	mu   sync.Mutex
	m    map[string]cachedInst // instance -> unlocked document
	held map[string]cachedInst // lock token -> locked document
}

// cachedInst is one remembered instance document.
type cachedInst struct {
	doc     instanceDoc // ETag set; unlocked, committed, not being deleted
	session string      // session token of the write that produced it
	// kv (locked documents only) are the instance's KV documents as the
	// fetch read them, when kvKnown: KV changes only with a commit, so
	// they hold until the one conditional on doc's ETag.
	kv      []kvDoc
	kvKnown bool
}

// newInstCache returns a cache of at most max entries in each of its two
// maps; nil (every method a no-op) when max is not positive.
func newInstCache(max int) *instCache {
	if max <= 0 {
		return nil
	}
	return &instCache{max: max, m: make(map[string]cachedInst), held: make(map[string]cachedInst)}
}

// cacheable reports whether d, as written, is a document a fetch may lock
// without reading it first: committed, unlocked, not being deleted, with
// no large turn to finish.
func cacheable(d *instanceDoc) bool {
	return d.visible() && d.LockToken == "" && d.Staging == "" && d.Publish == nil
}

// put remembers d (whose encoded size is size bytes) as written with etag
// and session. A document that is not cacheable, too large, or has no
// ETag forgets the instance instead. When full, an arbitrary entry makes
// room.
func (c *instCache) put(instance string, d instanceDoc, etag, session string, size int) {
	if c == nil {
		return
	}
	if etag == "" || size > maxCachedDocBytes || !cacheable(&d) {
		c.drop(instance)
		return
	}
	d.ETag = etag
	c.mu.Lock()
	defer c.mu.Unlock()
	makeRoom(c.m, instance, c.max)
	c.m[instance] = cachedInst{doc: d, session: session}
}

// makeRoom evicts an arbitrary entry of m when key is new and m is full.
func makeRoom(m map[string]cachedInst, key string, max int) {
	if _, ok := m[key]; !ok && len(m) >= max {
		for k := range m {
			delete(m, k)
			break
		}
	}
}

// hold remembers d, the document a lock batch (or a renewal) wrote with
// etag and session under token, and, when kvKnown, kv: the instance's KV
// documents read with the turn (forgotten when they take more than
// maxCachedDocBytes). A document too large or without an ETag forgets the
// token instead.
func (c *instCache) hold(token string, d instanceDoc, etag, session string, size int, kv []kvDoc, kvKnown bool) {
	if c == nil {
		return
	}
	if etag == "" || size > maxCachedDocBytes {
		c.release(token)
		return
	}
	d.ETag = etag
	n := 0
	for _, k := range kv {
		n += len(k.Key) + len(k.Value) + 128
		if k.Delta != nil {
			n += len(k.Delta.Value)
		}
	}
	if !kvKnown || n > maxCachedDocBytes {
		kv, kvKnown = nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	makeRoom(c.held, token, c.max)
	c.held[token] = cachedInst{doc: d, session: session, kv: kv, kvKnown: kvKnown}
}

// heldDoc returns the document remembered for token.
func (c *instCache) heldDoc(token string) (cachedInst, bool) {
	if c == nil {
		return cachedInst{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.held[token]
	return e, ok
}

// release forgets token.
func (c *instCache) release(token string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	delete(c.held, token)
	c.mu.Unlock()
}

// take removes and returns the entry of instance: a fetch uses it once,
// since locking changes the document.
func (c *instCache) take(instance string) (cachedInst, bool) {
	if c == nil {
		return cachedInst{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[instance]
	if ok {
		delete(c.m, instance)
	}
	return e, ok
}

// restore puts back an entry take returned when nothing was written.
func (c *instCache) restore(instance string, e cachedInst) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[instance]; !ok && len(c.m) < c.max {
		c.m[instance] = e
	}
}

// drop forgets instance.
func (c *instCache) drop(instance string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	delete(c.m, instance)
	c.mu.Unlock()
}
