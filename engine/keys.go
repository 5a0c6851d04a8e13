package engine

import (
	"strconv"
	"strings"
)

// The hubs' keys (wakeup.Wakeup.Instance) and the peer wake channel's:
// one letter of kind, then what it names.

// orchKey is the orchestrator hub's key of instance's waiting messages.
func orchKey(instance string) string { return "w" + instance }

// isOrchKey reports a key orchKey made (a peer's wake must name one).
func isOrchKey(k string) bool { return len(k) > 1 && k[0] == 'w' }

// lockKey is the orchestrator hub's key of the expiry of a lock on
// instance.
func lockKey(instance string) string { return "l" + instance }

// workKey is the worker hub's key of the worker document id of instance:
// the instance's length, a colon, the instance and the id (splitWorkKey).
func workKey(instance, id string) string {
	return strconv.Itoa(len(instance)) + ":" + instance + id
}

// settleKey is the peer wake key of a completion message: the instance
// to wake and the worker document its ack removed (the owner counts that
// activity done). Receivers that predate it ignore it; the feed then
// brings the completion.
func settleKey(instance, workID string) string { return "c" + workKey(instance, workID) }

// splitSettleKey parses a settleKey.
func splitSettleKey(k string) (instance, workID string, ok bool) { return splitNamedKey('c', k) }

// arrivalKey is the peer wake key of any other orchestrator message: the
// instance to wake and the message's document id, so that the owner can
// tell a wake that reaches it after a turn took the message (stale) from
// a new arrival. Receivers that predate it ignore it; the feed then
// brings the message.
func arrivalKey(instance, msgID string) string { return "a" + workKey(instance, msgID) }

// splitArrivalKey parses an arrivalKey.
func splitArrivalKey(k string) (instance, msgID string, ok bool) { return splitNamedKey('a', k) }

// splitNamedKey parses a key of kind followed by a workKey naming a
// document of an instance.
func splitNamedKey(kind byte, k string) (instance, id string, ok bool) {
	if len(k) < 2 || k[0] != kind {
		return "", "", false
	}
	instance, id, ok = splitWorkKey(k[1:])
	return instance, id, ok && instance != "" && id != ""
}

func splitWorkKey(k string) (instance, id string, ok bool) {
	i := strings.IndexByte(k, ':')
	if i < 0 {
		return "", "", false
	}
	n, err := strconv.Atoi(k[:i])
	if err != nil || n < 0 || i+1+n > len(k) {
		return "", "", false
	}
	return k[i+1 : i+1+n], k[i+1+n:], true
}
