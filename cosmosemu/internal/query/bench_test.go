package query

import (
	"strconv"
	"testing"
)

const benchPoll = `SELECT c.id, c.instanceId, c._etag FROM c WHERE c.type = 'orch_queue' AND c.visibleAt <= @now AND (NOT IS_DEFINED(c.lockedUntil) OR c.lockedUntil = null OR c.lockedUntil <= @now) AND c.dispatchSlot IN (1,2,3)`

func benchDocs(n int) []map[string]any {
	docs := make([]map[string]any, n)
	types := []string{"orch_queue", "history", "instance"}
	for i := range docs {
		d := map[string]any{
			"id":           strconv.Itoa(i),
			"instanceId":   "inst-" + strconv.Itoa(i%1000),
			"_etag":        "\"" + strconv.Itoa(i) + "\"",
			"type":         types[i%3],
			"visibleAt":    float64(i % 500),
			"dispatchSlot": float64(i % 8),
			"eventId":      float64(n - i),
			"payload":      map[string]any{"name": "x", "input": "some input text"},
		}
		if i%4 == 0 {
			d["lockedUntil"] = float64(i % 300)
		}
		docs[i] = d
	}
	return docs
}

func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(benchPoll); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExecuteFilter100k(b *testing.B) {
	docs := benchDocs(100_000)
	q, err := Parse(benchPoll)
	if err != nil {
		b.Fatal(err)
	}
	params := map[string]any{"@now": 250.0}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		res, err := q.Execute(docs, params)
		if err != nil || len(res) == 0 {
			b.Fatal(len(res), err)
		}
	}
}

func BenchmarkExecuteCount100k(b *testing.B) {
	docs := benchDocs(100_000)
	q, err := Parse(`SELECT VALUE COUNT(1) FROM c WHERE c.type = 'instance'`)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := q.Execute(docs, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExecuteOrderBy100k(b *testing.B) {
	docs := benchDocs(100_000)
	q, err := Parse(`SELECT * FROM c WHERE c.type = 'history' ORDER BY c.eventId`)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := q.Execute(docs, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFilterOneDoc(b *testing.B) {
	docs := benchDocs(1)
	q, err := Parse(benchPoll)
	if err != nil {
		b.Fatal(err)
	}
	params := map[string]any{"@now": 250.0}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := q.Filter(docs[0], params); err != nil {
			b.Fatal(err)
		}
	}
}
