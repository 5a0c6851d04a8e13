package memprovider

import (
	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// kvState is one instance's key-value state, in two layers:
//
//   - store holds what the ended executions wrote. It is what
//     FetchOrchestrationItem hands out as KVSnapshot: the state as it stood
//     when the current execution started.
//   - delta holds what the current execution has written so far (its acked
//     KeyValueSet, KeyValueCleared and KeyValuesCleared events). The runtime
//     replays those from history, so they stay out of the snapshot; clients
//     see them (view), and an ack that ends the execution folds them into
//     store (merge).
type kvState struct {
	store map[string]durable.KVEntry
	delta kvDelta
}

// kvDelta is the current execution's writes. With clearedAll set, every key
// of the store is hidden; writes then holds, per key, the last set or clear
// the execution made (since its last clear-all, if any).
type kvDelta struct {
	clearedAll bool
	writes     map[string]kvWrite
}

// kvWrite is one key's pending write: a value, or a tombstone.
type kvWrite struct {
	entry     durable.KVEntry
	tombstone bool
}

// kvOf returns the instance's KV state, creating it. Callers hold s.mu.
func (s *Store) kvOf(instance string) *kvState {
	k := s.kv[instance]
	if k == nil {
		k = &kvState{store: map[string]durable.KVEntry{}}
		s.kv[instance] = k
	}
	return k
}

// record applies one history event to the delta; events that are not KV
// events are ignored.
func (k *kvState) record(e history.Event) {
	switch ev := e.Kind.(type) {
	case history.KeyValueSet:
		ts := ev.LastUpdatedAtMS
		if ts == 0 {
			ts = e.TimestampMS
		}
		k.write(ev.Key, kvWrite{entry: durable.KVEntry{Value: ev.Value, LastUpdatedAtMS: ts}})
	case history.KeyValueCleared:
		k.write(ev.Key, kvWrite{tombstone: true})
	case history.KeyValuesCleared:
		k.delta = kvDelta{clearedAll: true}
	}
}

func (k *kvState) write(key string, w kvWrite) {
	if k.delta.writes == nil {
		k.delta.writes = map[string]kvWrite{}
	}
	k.delta.writes[key] = w
}

// merge folds the delta into the store and empties it, as an ack that ends
// the execution does.
func (k *kvState) merge() {
	if k.delta.clearedAll {
		k.store = map[string]durable.KVEntry{}
	}
	for key, w := range k.delta.writes {
		if w.tombstone {
			delete(k.store, key)
		} else {
			k.store[key] = w.entry
		}
	}
	k.delta = kvDelta{}
}

// snapshot returns a copy of the store (empty, not nil, for a nil state).
func (k *kvState) snapshot() map[string]durable.KVEntry {
	out := map[string]durable.KVEntry{}
	if k == nil {
		return out
	}
	for key, e := range k.store {
		out[key] = e
	}
	return out
}

// view returns what clients see: the store overlaid with the delta (empty,
// not nil, for a nil state).
func (k *kvState) view() map[string]durable.KVEntry {
	out := map[string]durable.KVEntry{}
	if k == nil {
		return out
	}
	if !k.delta.clearedAll {
		for key, e := range k.store {
			out[key] = e
		}
	}
	for key, w := range k.delta.writes {
		if w.tombstone {
			delete(out, key)
		} else {
			out[key] = w.entry
		}
	}
	return out
}

// get returns one key as clients see it.
func (k *kvState) get(key string) (durable.KVEntry, bool) {
	if k == nil {
		return durable.KVEntry{}, false
	}
	if w, ok := k.delta.writes[key]; ok {
		return w.entry, !w.tombstone
	}
	if k.delta.clearedAll {
		return durable.KVEntry{}, false
	}
	e, ok := k.store[key]
	return e, ok
}
