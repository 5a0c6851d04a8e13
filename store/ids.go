package store

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/durafeed/durafeed/durable"
)

// MaxInstanceIDBytes is the longest instance id the provider accepts, in
// UTF-8 bytes. The instance id is the partition key value, which Cosmos DB
// limits to 2 KB for hash v2 keys; 1024 bytes leaves room for the service's
// own encoding. A longer id is a permanent error and nothing is written.
const MaxInstanceIDBytes = 1024

// maxIDBytes is the longest document id the service accepts (1023 bytes).
const maxIDBytes = 1023

// Fixed document ids. Ids need only be unique within the instance's logical
// partition, so none embeds the instance id.
const idInstance = "instance"

func checkInstanceID(op, id string) error {
	switch {
	case id == "":
		return durable.Permanent(op, nil, "empty instance id")
	case len(id) > MaxInstanceIDBytes:
		return durable.Permanent(op, nil, "instance id is %d bytes, the limit is %d", len(id), MaxInstanceIDBytes)
	case !utf8.ValidString(id):
		return durable.Permanent(op, nil, "instance id is not valid UTF-8")
	}
	return nil
}

// escapeChar introduces an escaped byte in a document id: '~' and two hex
// digits. It is not '%' because the gateway percent-decodes request paths
// (twice when needed), so an id containing '%' cannot be addressed reliably.
const escapeChar = '~'

// needsEscape reports the bytes Cosmos DB refuses or cannot address in an
// id ('/', '\\', '?', '#', '%', control characters, spaces that the gateway
// may trim), '"' (azcosmos v1.5.0 writes the ids of a transactional
// batch's delete, replace and patch operations into the request's JSON
// unescaped, so a quote would break, or rewrite, the batch), plus the
// escape character itself so that encoding is reversible.
func needsEscape(c byte) bool {
	return c < 0x20 || c == 0x7f || c == '/' || c == '\\' || c == '?' || c == '#' || c == '%' || c == ' ' || c == '"' || c == escapeChar
}

// escapeID escapes the bytes needsEscape reports as '~' and two hex digits.
func escapeID(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hexd = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			b.WriteByte(escapeChar)
			b.WriteByte(hexd[c>>4])
			b.WriteByte(hexd[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// unescapeID reverses escapeID; ok is false for malformed input.
func unescapeID(s string) (string, bool) {
	if !strings.ContainsRune(s, escapeChar) {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != escapeChar {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), true
}

// userID builds a document id from a prefix and a user string: prefix ":"
// escaped, or, when that would exceed the id limit, prefix "!" and the
// SHA-256 of the string in hex (the original is then kept in a field of the
// document). The two forms cannot collide: the separator differs.
func userID(prefix, s string) string {
	e := escapeID(s)
	if len(prefix)+1+len(e) <= maxIDBytes {
		return prefix + ":" + e
	}
	sum := sha256.Sum256([]byte(s))
	return prefix + "!" + hex.EncodeToString(sum[:])
}

func kvID(key string) string              { return userID("kv", key) }
func historyID(exec, event uint64) string { return "h:" + u64(exec) + ":" + u64(event) }
func execDocID(exec uint64) string        { return "e:" + u64(exec) }

// workDocID is the id of the worker queue document a turn of execution
// exec writes for its activity id.
func workDocID(exec, activity uint64) string { return "w:" + u64(exec) + ":" + u64(activity) }
func sessionDocID(sid string) string         { return userID("session", sid) }

// sessionPartition is the logical partition holding a session's document.
// Sessions are global (one owner per session id, whatever the instance), so
// they live in a partition of their own, named so that it cannot be
// mistaken for an instance by any query (queries select by document type).
func sessionPartition(sid string) string {
	p := "$session:" + sid
	if len(p) > MaxInstanceIDBytes {
		sum := sha256.Sum256([]byte(sid))
		p = "$session~" + hex.EncodeToString(sum[:])
	}
	return p
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }

// Lock tokens are opaque to callers but carry what the provider needs to
// find the lock again without a cross-partition query: a kind letter, a
// random UUID and the base64url of the partition (and, for work items, of
// the document id).
const (
	tokenOrch = "o"
	tokenWork = "w"
)

func makeToken(kind, nonce, instance, docID string) string {
	t := kind + "." + nonce + "." + base64.RawURLEncoding.EncodeToString([]byte(instance))
	if docID != "" {
		t += "." + base64.RawURLEncoding.EncodeToString([]byte(docID))
	}
	return t
}

type parsedToken struct {
	kind, nonce, instance, docID string
}

func parseToken(t string) (parsedToken, bool) {
	parts := strings.Split(t, ".")
	if len(parts) < 3 || len(parts) > 4 {
		return parsedToken{}, false
	}
	inst, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(inst) == 0 {
		return parsedToken{}, false
	}
	p := parsedToken{kind: parts[0], nonce: parts[1], instance: string(inst)}
	if len(parts) == 4 {
		d, err := base64.RawURLEncoding.DecodeString(parts[3])
		if err != nil || len(d) == 0 {
			return parsedToken{}, false
		}
		p.docID = string(d)
	}
	if (p.kind == tokenOrch) != (p.docID == "") || (p.kind != tokenOrch && p.kind != tokenWork) {
		return parsedToken{}, false
	}
	return p, true
}

// outboxKey is the idempotency key of the position-th cross-partition item
// of the turn committed under lockNonce: unique per turn (the lock nonce is)
// and stable across retries of that turn's ack.
func outboxKey(source string, exec uint64, lockNonce string, position int) string {
	return source + "|" + u64(exec) + "|" + lockNonce + "|" + strconv.Itoa(position)
}

// outboxTargetID is the id of the delivered document in the target
// partition; a second delivery of the same intent conflicts (409).
func outboxTargetID(key string) string { return userID("outbox", key) }

// isOutboxTarget reports whether a document id is an outbox delivery's
// target (outboxTargetID).
func isOutboxTarget(id string) bool {
	return strings.HasPrefix(id, "outbox:") || strings.HasPrefix(id, "outbox!")
}

// consumeOp is the batch operation that removes a consumed (or dropped)
// queue message of instance: a delete, but a tombstone in place of an
// outbox delivery's target (tombstoneDoc).
func (p *Store) consumeOp(instance, id string) batchOp {
	if !isOutboxTarget(id) {
		return opDelete(id)
	}
	return opUpsert(p.tombstone(instance, id))
}

func (p *Store) tombstone(instance, id string) tombstoneDoc {
	return tombstoneDoc{ID: id, InstanceID: instance, Type: typeTombstone, TTL: ttlSeconds(p.opts.RequestRetention)}
}

// consume removes a consumed queue message outside a batch (consumeOp).
func (p *Store) consume(ctx context.Context, instance, id string) error {
	if !isOutboxTarget(id) {
		_, err := p.s.remove(ctx, instance, id)
		return err
	}
	b, _ := json.Marshal(p.tombstone(instance, id)) // our own type always encodes
	return p.s.upsert(ctx, instance, b)
}
func outboxIntentID(key string) string { return userID("intent", key) }
