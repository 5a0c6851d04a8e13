package engine

import (
	"strconv"
	"strings"
)

// keyKind says what a wakeup key names. The hubs and the peer wake
// channel carry keys as strings (wakeup.Wakeup.Instance, peerwake.Wake's
// Key); the engine builds and reads them only as a key, through
// key.String and parseKey. The encoding is a wire format between
// replicas: a letter of kind, then what it names.
type keyKind byte

const (
	// kindWork names a worker document: instance and id (the worker hub,
	// HubWorker wakes). Its encoding has no letter: the instance's
	// length, a colon, the instance and the id.
	kindWork keyKind = iota
	// kindMessages names an instance's waiting messages (the orchestrator
	// hub; a bare HubOrchestrator wake from an older sender).
	kindMessages
	// kindLockExpiry names the expiry of a lock on an instance (the
	// orchestrator hub only).
	kindLockExpiry
	// kindArrival names one orchestrator message, id, of an instance
	// (HubOrchestrator wakes): the owner tells a wake that reaches it
	// after a turn took the message (stale) from a new arrival.
	kindArrival
	// kindSettle names a completion message: the instance to wake and
	// the worker document, id, its ack removed (the owner counts that
	// activity done).
	kindSettle
	// kindHanded names a turn of an instance that a write of this
	// process locked for a local fetch (Engine.HandOver; the orchestrator
	// hub only, never on the wire).
	kindHanded
)

// letters are the encodings' kind letters (kindWork has none).
var letters = [...]byte{kindMessages: 'w', kindLockExpiry: 'l', kindArrival: 'a', kindSettle: 'c', kindHanded: 'h'}

// key is a typed wakeup key.
type key struct {
	kind     keyKind
	instance string
	// id is the document named (kindWork, kindArrival, kindSettle).
	id string
}

// String encodes k for a hub or the wire.
func (k key) String() string {
	named := strconv.Itoa(len(k.instance)) + ":" + k.instance + k.id
	switch k.kind {
	case kindWork:
		return named
	case kindMessages, kindLockExpiry, kindHanded:
		return string(letters[k.kind]) + k.instance
	default:
		return string(letters[k.kind]) + named
	}
}

// parseKey decodes an encoded key of one of the kinds accepted; ok is
// false for a malformed key or another kind. Keys naming a document need
// a non-empty instance and id; a kindMessages key needs an instance.
func parseKey(s string, accepted ...keyKind) (k key, ok bool) {
	for _, kind := range accepted {
		if k, ok = parseKind(s, kind); ok {
			return k, true
		}
	}
	return key{}, false
}

func parseKind(s string, kind keyKind) (key, bool) {
	switch kind {
	case kindWork:
		inst, id, ok := splitNamed(s)
		return key{kind: kindWork, instance: inst, id: id}, ok && inst != "" && id != ""
	case kindMessages, kindLockExpiry, kindHanded:
		if len(s) < 2 || s[0] != letters[kind] {
			return key{}, false
		}
		return key{kind: kind, instance: s[1:]}, true
	default:
		if len(s) < 2 || s[0] != letters[kind] {
			return key{}, false
		}
		inst, id, ok := splitNamed(s[1:])
		return key{kind: kind, instance: inst, id: id}, ok && inst != "" && id != ""
	}
}

// splitNamed parses the length-prefixed instance and id of a key naming
// a document.
func splitNamed(s string) (instance, id string, ok bool) {
	i := strings.IndexByte(s, ':')
	if i < 0 {
		return "", "", false
	}
	n, err := strconv.Atoi(s[:i])
	if err != nil || n < 0 || i+1+n > len(s) {
		return "", "", false
	}
	return s[i+1 : i+1+n], s[i+1+n:], true
}

// orchKey is the orchestrator hub's key of instance's waiting messages.
func orchKey(instance string) string { return key{kind: kindMessages, instance: instance}.String() }

// lockKey is the orchestrator hub's key of the expiry of a lock on
// instance.
func lockKey(instance string) string { return key{kind: kindLockExpiry, instance: instance}.String() }

// handKey is the orchestrator hub's key of a turn of instance a write of
// this process locked (HandOver).
func handKey(instance string) string { return key{kind: kindHanded, instance: instance}.String() }

// workKey is the worker hub's key of the worker document id of instance.
func workKey(instance, id string) string {
	return key{kind: kindWork, instance: instance, id: id}.String()
}
