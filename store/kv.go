package store

import (
	"context"
	"sort"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// The KV store has two layers. The snapshot (Has, Value) is the state as
// the current execution started; Delta holds the current execution's last
// write of the key, and the document idKVClear records that the current
// execution cleared every key. Fetch returns the snapshot; clients read
// the snapshot overlaid with the delta. An ack that ends the execution
// (Completed, Failed, ContinuedAsNew) merges the delta into the snapshot in
// the same batch.

const idKVClear = "kvclear"

// kvDelta is the current execution's write of one key.
type kvDelta struct {
	Set             bool   `json:"set"`
	Value           string `json:"value,omitempty"`
	LastUpdatedAtMS uint64 `json:"lastUpdatedAtMs,omitempty"`
	ExecutionID     uint64 `json:"executionId"`
}

// kvState is an instance's whole store, both layers.
type kvState struct {
	snap     map[string]kvDoc
	delta    map[string]kvDelta
	cleared  bool
	docs     map[string]kvDoc // as stored, for diffing
	clearDoc bool
}

func loadKVState(docs []kvDoc) kvState {
	st := kvState{snap: map[string]kvDoc{}, delta: map[string]kvDelta{}, docs: map[string]kvDoc{}}
	for _, d := range docs {
		if d.ID == idKVClear {
			st.cleared, st.clearDoc = true, true
			continue
		}
		st.docs[d.Key] = d
		if d.Has {
			st.snap[d.Key] = d
		}
		if d.Delta != nil {
			st.delta[d.Key] = *d.Delta
		}
	}
	return st
}

// snapshot is what fetch returns.
func (st kvState) snapshot() map[string]durable.KVEntry {
	out := map[string]durable.KVEntry{}
	for k, d := range st.snap {
		out[k] = durable.KVEntry{Value: d.Value, LastUpdatedAtMS: d.LastUpdatedAtMS}
	}
	return out
}

// merged is what clients read.
func (st kvState) merged() map[string]durable.KVEntry {
	out := map[string]durable.KVEntry{}
	if !st.cleared {
		out = st.snapshot()
	}
	for k, d := range st.delta {
		if d.Set {
			out[k] = durable.KVEntry{Value: d.Value, LastUpdatedAtMS: d.LastUpdatedAtMS}
		} else {
			delete(out, k)
		}
	}
	return out
}

// kvOps applies a turn's KV events (and, when ends, the merge) and
// returns the writes that take the stored documents there.
func kvOps(instance string, exec uint64, cur []kvDoc, evs []history.Event, ends bool) []batchOp {
	st := loadKVState(cur)
	for _, e := range evs {
		switch k := e.Kind.(type) {
		case history.KeyValueSet:
			ts := k.LastUpdatedAtMS
			if ts == 0 {
				ts = e.TimestampMS
			}
			st.delta[k.Key] = kvDelta{Set: true, Value: k.Value, LastUpdatedAtMS: ts, ExecutionID: exec}
		case history.KeyValueCleared:
			st.delta[k.Key] = kvDelta{ExecutionID: exec}
		case history.KeyValuesCleared:
			st.cleared = true
			st.delta = map[string]kvDelta{}
		}
	}
	want := map[string]kvDoc{}
	if ends {
		for k, v := range st.merged() {
			want[k] = kvDoc{ID: kvID(k), InstanceID: instance, Type: typeKV, Key: k, Has: true, Value: v.Value, LastUpdatedAtMS: v.LastUpdatedAtMS, ExecutionID: exec}
		}
		st.cleared = false
	} else {
		for k, d := range st.snap {
			d.Delta = nil
			want[k] = d
		}
		for k, dl := range st.delta {
			d, ok := want[k]
			if !ok {
				d = kvDoc{ID: kvID(k), InstanceID: instance, Type: typeKV, Key: k}
			}
			dl := dl
			d.Delta = &dl
			want[k] = d
		}
	}
	keys := make([]string, 0, len(want)+len(st.docs))
	for k := range want {
		keys = append(keys, k)
	}
	for k := range st.docs {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var ops []batchOp
	for _, k := range keys {
		w, inWant := want[k]
		old, inOld := st.docs[k]
		switch {
		case inWant && (!inOld || !sameKV(w, old)):
			w.ETag = ""
			ops = append(ops, opUpsert(w))
		case !inWant && inOld:
			ops = append(ops, opDelete(old.ID))
		}
	}
	switch {
	case st.cleared && !st.clearDoc:
		ops = append(ops, opUpsert(kvDoc{ID: idKVClear, InstanceID: instance, Type: typeKV, ExecutionID: exec}))
	case !st.cleared && st.clearDoc:
		ops = append(ops, opDelete(idKVClear))
	}
	return ops
}

func sameKV(a, b kvDoc) bool {
	if a.Has != b.Has || a.Value != b.Value || a.LastUpdatedAtMS != b.LastUpdatedAtMS || (a.Delta == nil) != (b.Delta == nil) {
		return false
	}
	return a.Delta == nil || *a.Delta == *b.Delta
}

// clientKV reads the store as clients see it.
func (p *Store) clientKV(ctx context.Context, instance string) (map[string]durable.KVEntry, error) {
	docs, err := p.readKV(ctx, instance)
	if err != nil {
		return nil, err
	}
	return loadKVState(docs).merged(), nil
}
