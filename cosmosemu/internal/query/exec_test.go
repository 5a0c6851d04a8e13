package query

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestProjection(t *testing.T) {
	docs := docsOf(t, `[{"id":"1","a":{"b":2},"arr":[10,20],"x":"y","my-prop":3}]`)
	cases := []struct{ query, want string }{
		{"SELECT c.id FROM c", `[{"id":"1"}]`},
		{"SELECT c.id, c.missing FROM c", `[{"id":"1"}]`},
		{"SELECT c.missing FROM c", `[{}]`},
		{"SELECT c.a.b FROM c", `[{"b":2}]`},
		{"SELECT c['my-prop'] FROM c", `[{"my-prop":3}]`},
		{"SELECT c.arr[1] FROM c", `[{"$1":20}]`},
		{"SELECT c.id AS i, c.x y FROM c", `[{"i":"1","y":"y"}]`},
		{"SELECT 1 + 1, 'k', c.id FROM c", `[{"$1":2,"$2":"k","id":"1"}]`},
		{"SELECT c FROM c", `[{"c":{"id":"1","a":{"b":2},"arr":[10,20],"x":"y","my-prop":3}}]`},
		{"SELECT {\"k\": c.x, \"m\": c.missing} AS o FROM c", `[{"o":{"k":"y"}}]`},
		{"SELECT [c.x, c.missing, 1] AS l FROM c", `[{"l":["y",1]}]`},
		{"SELECT VALUE c.x FROM c", `["y"]`},
		{"SELECT VALUE c.missing FROM c", `[]`},
		{"SELECT VALUE {id: c.id} FROM c", `[{"id":"1"}]`},
		{"SELECT VALUE 1", `[1]`},
		{"SELECT 1 AS one", `[{"one":1}]`},
		{"SELECT VALUE 1 WHERE false", `[]`},
		{"SELECT VALUE c.a.b * 10 FROM c", `[20]`},
		{"SELECT * FROM c.a", `[{"b":2}]`},
		{"SELECT * FROM c.missing", `[]`},
		{"SELECT VALUE x.b FROM c.a x", `[2]`},
		{"SELECT VALUE r.id FROM root r", `["1"]`},
		{"SELECT VALUE d.id FROM docs d", `["1"]`},
	}
	for _, tc := range cases {
		t.Run(tc.query, func(t *testing.T) {
			require.JSONEq(t, tc.want, run(t, tc.query, docs, nil))
		})
	}
}

func TestIteratorsAndJoin(t *testing.T) {
	docs := docsOf(t, `[
		{"id":"a","tags":["x","y"],"children":[{"name":"c1","grade":1},{"name":"c2","grade":5}]},
		{"id":"b","tags":["y"],"children":[]},
		{"id":"c","tags":"notarray"},
		{"id":"d"}
	]`)
	cases := []struct{ query, want string }{
		{"SELECT * FROM c IN c.children", `[{"name":"c1","grade":1},{"name":"c2","grade":5}]`},
		{"SELECT VALUE ch.name FROM ch IN c.children WHERE ch.grade > 2", `["c2"]`},
		{"SELECT c.id, t FROM c JOIN t IN c.tags", `[{"id":"a","t":"x"},{"id":"a","t":"y"},{"id":"b","t":"y"}]`},
		{"SELECT VALUE c.id FROM c JOIN t IN c.tags WHERE t = 'y'", `["a","b"]`},
		{"SELECT DISTINCT VALUE c.id FROM c JOIN t IN c.tags", `["a","b"]`},
		{"SELECT c.id, t, ch.name FROM c JOIN t IN c.tags JOIN ch IN c.children", `[{"id":"a","t":"x","name":"c1"},{"id":"a","t":"x","name":"c2"},{"id":"a","t":"y","name":"c1"},{"id":"a","t":"y","name":"c2"}]`},
		{"SELECT VALUE COUNT(1) FROM c JOIN t IN c.tags", `[3]`},
		{"SELECT t AS tag, COUNT(1) AS n FROM c JOIN t IN c.tags GROUP BY t", `[{"tag":"x","n":1},{"tag":"y","n":2}]`},
		{"SELECT VALUE c.id FROM c JOIN t IN c.tags ORDER BY t DESC, c.id", `["a","b","a"]`},
	}
	for _, tc := range cases {
		t.Run(tc.query, func(t *testing.T) {
			require.JSONEq(t, tc.want, run(t, tc.query, docs, nil))
		})
	}
	_, err := Parse("SELECT * FROM c JOIN t IN c.tags WHERE t = 'x'")
	if err == nil {
		t.Fatal("SELECT * with JOIN must be rejected")
	}
	q, err := Parse("SELECT c.id FROM c JOIN t IN c.tags WHERE t = 'x'")
	require.NoError(t, err)
	for _, d := range docs {
		ok, err := q.Filter(d, nil)
		require.NoError(t, err)
		require.Equal(t, d["id"] == "a", ok, d["id"])
	}
}

func TestOrderBy(t *testing.T) {
	docs := docsOf(t, `[
		{"id":"s2","v":"b"},
		{"id":"n10","v":10},
		{"id":"t","v":true},
		{"id":"u"},
		{"id":"nul","v":null},
		{"id":"s1","v":"a"},
		{"id":"f","v":false},
		{"id":"n2","v":2},
		{"id":"o","v":{"k":1}},
		{"id":"a","v":[1]},
		{"id":"nneg","v":-1.5}
	]`)
	asc := []string{"u", "nul", "f", "t", "nneg", "n2", "n10", "s1", "s2", "a", "o"}
	require.Equal(t, asc, ids(t, "SELECT * FROM c ORDER BY c.v", docs, nil))
	require.Equal(t, asc, ids(t, "SELECT * FROM c ORDER BY c.v ASC", docs, nil))
	desc := make([]string, len(asc))
	for i := range asc {
		desc[i] = asc[len(asc)-1-i]
	}
	require.Equal(t, desc, ids(t, "SELECT * FROM c ORDER BY c.v DESC", docs, nil))
	require.Equal(t, []string{"nneg", "n2", "n10"}, ids(t, "SELECT * FROM c WHERE IS_NUMBER(c.v) ORDER BY c.v", docs, nil))

	multi := docsOf(t, `[
		{"id":"1","a":"x","b":2},
		{"id":"2","a":"y","b":1},
		{"id":"3","a":"x","b":3},
		{"id":"4","a":"x"},
		{"id":"5","a":"y","b":1},
		{"id":"6","b":0}
	]`)
	require.Equal(t, []string{"6", "3", "1", "4", "2", "5"}, ids(t, "SELECT * FROM c ORDER BY c.a, c.b DESC", multi, nil))
	require.Equal(t, []string{"2", "5", "4", "1", "3", "6"}, ids(t, "SELECT * FROM c ORDER BY c.a DESC, c.b ASC", multi, nil))
	// stable: equal keys keep storage order
	require.Equal(t, []string{"1", "3", "4", "2", "5"}, ids(t, "SELECT * FROM c WHERE IS_DEFINED(c.a) ORDER BY c.a", multi, nil))
	// ORDER BY on expressions and with projections, TOP, OFFSET
	require.JSONEq(t, `["4","6","5"]`, run(t, "SELECT TOP 3 VALUE c.id FROM c ORDER BY c.b, c.id DESC", multi, nil))
	require.JSONEq(t, `[{"id":"6"},{"id":"2"}]`, run(t, "SELECT c.id FROM c ORDER BY c.b OFFSET 1 LIMIT 2", multi, nil))
	require.JSONEq(t, `["x","y"]`, run(t, "SELECT DISTINCT VALUE c.a FROM c WHERE IS_DEFINED(c.a) ORDER BY c.a", multi, nil))
	require.JSONEq(t, `["4","6","5","2","1","3"]`, run(t, "SELECT VALUE c.id FROM c ORDER BY c.b ?? -1, c.id DESC", multi, nil))
}

func TestTopOffsetLimitDistinct(t *testing.T) {
	var docs []map[string]any
	for i := 0; i < 10; i++ {
		docs = append(docs, map[string]any{"id": strconv.Itoa(i), "g": float64(i % 3), "o": map[string]any{"m": float64(i % 2)}})
	}
	cases := []struct {
		query  string
		params map[string]any
		want   string
	}{
		{"SELECT TOP 3 VALUE c.id FROM c", nil, `["0","1","2"]`},
		{"SELECT TOP 0 VALUE c.id FROM c", nil, `[]`},
		{"SELECT TOP 100 VALUE c.id FROM c WHERE c.g = 2", nil, `["2","5","8"]`},
		{"SELECT TOP @n VALUE c.id FROM c", map[string]any{"@n": 2}, `["0","1"]`},
		{"SELECT VALUE c.id FROM c OFFSET 8 LIMIT 5", nil, `["8","9"]`},
		{"SELECT VALUE c.id FROM c OFFSET 2 LIMIT 2", nil, `["2","3"]`},
		{"SELECT VALUE c.id FROM c OFFSET 20 LIMIT 2", nil, `[]`},
		{"SELECT VALUE c.id FROM c OFFSET 0 LIMIT 0", nil, `[]`},
		{"SELECT VALUE c.id FROM c OFFSET @o LIMIT @l", map[string]any{"@o": 1.0, "@l": json.Number("2")}, `["1","2"]`},
		{"SELECT TOP 1 VALUE c.id FROM c OFFSET 2 LIMIT 5", nil, `["2"]`},
		{"SELECT DISTINCT VALUE c.g FROM c", nil, `[0,1,2]`},
		{"SELECT DISTINCT c.g FROM c", nil, `[{"g":0},{"g":1},{"g":2}]`},
		{"SELECT DISTINCT VALUE c.o FROM c", nil, `[{"m":0},{"m":1}]`},
		{"SELECT DISTINCT c.missing FROM c", nil, `[{}]`},
		{"SELECT DISTINCT VALUE c.missing FROM c", nil, `[]`},
		{"SELECT DISTINCT TOP 2 VALUE c.g FROM c", nil, `[0,1]`},
		{"SELECT DISTINCT VALUE c.g FROM c OFFSET 1 LIMIT 1", nil, `[1]`},
		{"SELECT DISTINCT VALUE c.g FROM c ORDER BY c.g DESC", nil, `[2,1,0]`},
		{"SELECT DISTINCT VALUE [c.g, 1] FROM c", nil, `[[0,1],[1,1],[2,1]]`},
	}
	for _, tc := range cases {
		t.Run(tc.query, func(t *testing.T) {
			require.JSONEq(t, tc.want, run(t, tc.query, docs, tc.params))
		})
	}
}

func TestAggregates(t *testing.T) {
	docs := docsOf(t, `[
		{"id":"1","t":"a","n":1,"s":"x","mixed":1},
		{"id":"2","t":"a","n":2,"s":"y","mixed":"str"},
		{"id":"3","t":"b","n":3,"mixed":null},
		{"id":"4","t":"b","s":"z","mixed":true},
		{"id":"5","n":4,"obj":{"k":1}}
	]`)
	cases := []struct{ query, want string }{
		{"SELECT VALUE COUNT(1) FROM c", `[5]`},
		{"SELECT VALUE COUNT(c.n) FROM c", `[4]`},
		{"SELECT VALUE COUNT(c.missing) FROM c", `[0]`},
		{"SELECT VALUE COUNT(1) FROM c WHERE c.t = 'zzz'", `[0]`},
		{"SELECT COUNT(1) FROM c", `[{"$1":5}]`},
		{"SELECT COUNT(1) AS n, SUM(c.n) AS s, MIN(c.n) AS mi, MAX(c.n) AS ma, AVG(c.n) AS av FROM c", `[{"n":5,"s":10,"mi":1,"ma":4,"av":2.5}]`},
		{"SELECT VALUE SUM(c.n) FROM c", `[10]`},
		{"SELECT VALUE SUM(c.mixed) FROM c", `[]`},
		{"SELECT VALUE SUM(c.n) FROM c WHERE false", `[0]`},
		{"SELECT VALUE AVG(c.n) FROM c WHERE false", `[]`},
		{"SELECT VALUE AVG(c.s) FROM c", `[]`},
		{"SELECT VALUE MIN(c.s) FROM c", `["x"]`},
		{"SELECT VALUE MAX(c.s) FROM c", `["z"]`},
		{"SELECT VALUE MIN(c.mixed) FROM c", `[null]`},
		{"SELECT VALUE MAX(c.mixed) FROM c", `["str"]`},
		{"SELECT VALUE MAX(c.obj) FROM c", `[]`},
		{"SELECT VALUE MIN(c.missing) FROM c", `[]`},
		{"SELECT MAX(c.missing) AS m FROM c", `[{}]`},
		{"SELECT VALUE SUM(c.n) / COUNT(c.n) FROM c", `[2.5]`},
		{"SELECT VALUE {\"count\": COUNT(1), \"sum\": SUM(c.n)} FROM c", `[{"count":5,"sum":10}]`},
		{"SELECT VALUE COUNT(1) FROM c OFFSET 1 LIMIT 1", `[]`},
		{"SELECT VALUE COUNT(1) FROM c JOIN x IN c.none", `[0]`},
		{"SELECT VALUE COUNT(1)", `[1]`},
		// GROUP BY (groups in order of first appearance)
		{"SELECT c.t, COUNT(1) AS n FROM c GROUP BY c.t", `[{"t":"a","n":2},{"t":"b","n":2},{"n":1}]`},
		{"SELECT c.t AS type, SUM(c.n) AS total, MAX(c.s) AS m FROM c WHERE IS_DEFINED(c.t) GROUP BY c.t", `[{"type":"a","total":3,"m":"y"},{"type":"b","total":3,"m":"z"}]`},
		{"SELECT VALUE c.t FROM c GROUP BY c.t", `["a","b"]`},
		{"SELECT c.t FROM c GROUP BY c.t", `[{"t":"a"},{"t":"b"},{}]`},
		{"SELECT VALUE {t: c.t, n: COUNT(1)} FROM c GROUP BY c.t", `[{"t":"a","n":2},{"t":"b","n":2},{"n":1}]`},
		{"SELECT c.t, IS_DEFINED(c.s) AS hasS, COUNT(1) AS n FROM c GROUP BY c.t, IS_DEFINED(c.s)", `[{"t":"a","hasS":true,"n":2},{"t":"b","hasS":false,"n":1},{"t":"b","hasS":true,"n":1},{"hasS":false,"n":1}]`},
		{"SELECT UPPER(c.t) AS u, COUNT(1) AS n FROM c WHERE IS_DEFINED(c.t) GROUP BY c.t", `[{"u":"A","n":2},{"u":"B","n":2}]`},
		{"SELECT c.t, COUNT(1) AS n FROM c WHERE false GROUP BY c.t", `[]`},
		{"SELECT TOP 1 c.t, COUNT(1) AS n FROM c GROUP BY c.t", `[{"t":"a","n":2}]`},
		{"SELECT DISTINCT VALUE COUNT(1) FROM c GROUP BY c.t", `[2,1]`},
		{"SELECT c[\"t\"], COUNT(1) AS n FROM c GROUP BY c.t", `[{"t":"a","n":2},{"t":"b","n":2},{"n":1}]`},
	}
	for _, tc := range cases {
		t.Run(tc.query, func(t *testing.T) {
			require.JSONEq(t, tc.want, run(t, tc.query, docs, nil))
		})
	}
}

func TestParameters_Execute(t *testing.T) {
	docs := docsOf(t, `[{"id":"1","n":1,"tags":["a"],"o":{"x":1}},{"id":"2","n":2,"tags":["b"],"o":{"x":2}}]`)
	cases := []struct {
		query  string
		params map[string]any
		want   []string
	}{
		{"SELECT * FROM c WHERE c.id = @id", map[string]any{"@id": "2"}, []string{"2"}},
		{"SELECT * FROM c WHERE c.n = @n", map[string]any{"@n": 1}, []string{"1"}},
		{"SELECT * FROM c WHERE c.n = @n", map[string]any{"@n": int64(2)}, []string{"2"}},
		{"SELECT * FROM c WHERE c.n = @n", map[string]any{"@n": json.Number("2")}, []string{"2"}},
		{"SELECT * FROM c WHERE c.n = @n", map[string]any{"@n": "1"}, []string{}},
		{"SELECT * FROM c WHERE c.o = @o", map[string]any{"@o": map[string]any{"x": 2}}, []string{"2"}},
		{"SELECT * FROM c WHERE ARRAY_CONTAINS(@ids, c.id)", map[string]any{"@ids": []any{"1", "2"}}, []string{"1", "2"}},
		{"SELECT * FROM c WHERE ARRAY_CONTAINS(@ids, c.id)", map[string]any{"@ids": []string{"2"}}, []string{"2"}},
		{"SELECT * FROM c WHERE c.tags = @t", map[string]any{"@t": []int{1}}, []string{}},
		{"SELECT * FROM c WHERE c.id = @id", map[string]any{"@id": nil}, []string{}},
		{"SELECT * FROM c WHERE @flag", map[string]any{"@flag": true}, []string{"1", "2"}},
		{"SELECT * FROM c WHERE c.o = @s", map[string]any{"@s": struct {
			X int `json:"x"`
		}{X: 1}}, []string{"1"}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.query, tc.params), func(t *testing.T) {
			require.Equal(t, tc.want, ids(t, tc.query, docs, tc.params))
		})
	}
}

// sdkSampleItems mirrors createSampleItems(container, 2, 10) of the azcosmos
// emulator tests: ids 0-9 in partition "1" and 10-19 in partition "2".
func sdkSampleItems(pk string) []map[string]any {
	var docs []map[string]any
	for i := 0; i < 10; i++ {
		for p := 0; p < 2; p++ {
			id := strconv.Itoa(i + p*10)
			pkStr := strconv.Itoa(p + 1)
			if pk != "" && pkStr != pk {
				continue
			}
			docs = append(docs, map[string]any{"id": id, "pk": pkStr, "someProp": "some_" + id})
		}
	}
	return docs
}

// TestSDKEmulatorQueries runs the queries of the azcosmos v1.5.0 emulator
// tests (emulator_cosmos_query_test.go, emulator_cosmos_container_test.go,
// emulator_cosmos_database_test.go, read-many query builder).
func TestSDKEmulatorQueries(t *testing.T) {
	p1 := sdkSampleItems("1")
	all := sdkSampleItems("")
	digits := []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}

	require.Equal(t, []string{"4"}, ids(t, "select * from docs c where c.someProp = 'some_4'", p1, nil))
	require.Equal(t, digits, ids(t, "select * from c order by c.id", p1, nil))
	require.Equal(t, digits, ids(t, "select * from c where c.pk = '1' order by c.id", all, nil))
	require.Equal(t, []string{"4"}, ids(t, "select * from c where c.someProp = @prop order by c.id", p1, map[string]any{"@prop": "some_4"}))
	require.JSONEq(t, `["0","1","2","3","4","5","6","7","8","9"]`, run(t, "select value c.id from c order by c.id", p1, nil))
	require.Len(t, ids(t, "select * from c", all, nil), 20)

	q, err := Parse("select * from c order by c.id")
	require.NoError(t, err)
	require.False(t, q.Features().CrossPartitionSafe())
	q, err = Parse("select * from c")
	require.NoError(t, err)
	require.True(t, q.Features().CrossPartitionSafe())
	q, err = Parse("select * from c where c.pk = '1' order by c.id")
	require.NoError(t, err)
	pkv, ok := q.PartitionKeyFilter([]string{"/pk"}, nil)
	require.True(t, ok)
	require.Equal(t, []any{"1"}, pkv)

	hier := docsOf(t, `[{"id":"1","parent":"parent1","child":"child1"},{"id":"2","parent":"parent1","child":"child2"},{"id":"3","parent":"parent2","child":"child1"},{"id":"4","parent":"parent2","child":"child2"}]`)
	require.Equal(t, []string{"1", "2"}, ids(t, "select * from c where c.parent = 'parent1'", hier, nil))

	// database / container listing queries
	dbs := docsOf(t, `[{"id":"db1"},{"id":"db2"}]`)
	require.Equal(t, []string{"db2"}, ids(t, "SELECT * FROM root r WHERE r.id = @id", dbs, map[string]any{"@id": "db2"}))

	// full-text search sample
	ft := docsOf(t, `[
		{"id":"1","pk":"test","title":"Azure Cosmos DB Full Text Search","description":"Learn about the powerful full-text search capabilities in Azure Cosmos DB"},
		{"id":"2","pk":"test","title":"Not related","description":"An unrelated item that should not match the query"}]`)
	require.Equal(t, []string{"1"}, ids(t, `SELECT * FROM c WHERE FullTextContains(c.title, "search") OR FullTextContains(c.description, "search")`, ft, nil))

	// read-many query shapes (cosmos_query_builder.go)
	rm := docsOf(t, `[{"id":"a","pk":"1","tenantId":"t","userId":"u"},{"id":"b","pk":"1"},{"id":"c","pk":null},{"id":"d"},{"id":"e","pk":"2"}]`)
	require.Equal(t, []string{"a", "c"}, ids(t, "SELECT * FROM c WHERE c.id IN (@param_id0, @param_id1, @param_id2)", rm, map[string]any{"@param_id0": "a", "@param_id1": "c", "@param_id2": "zz"}))
	require.Equal(t, []string{"a", "b"}, ids(t, "SELECT * FROM c WHERE c.pk = @pk0 AND c.id IN (@param_id0, @param_id1)", rm, map[string]any{"@pk0": "1", "@param_id0": "a", "@param_id1": "b"}))
	require.Equal(t, []string{"b", "e"}, ids(t, "SELECT * FROM c WHERE (c.id = @param_id0 AND c.pk = @param_pk00) OR (c.id = @param_id1 AND c.pk = @param_pk10)", rm, map[string]any{"@param_id0": "b", "@param_pk00": "1", "@param_id1": "e", "@param_pk10": "2"}))
	require.Equal(t, []string{"c"}, ids(t, "SELECT * FROM c WHERE IS_NULL(c.pk) AND c.id IN (@param_id0, @param_id1)", rm, map[string]any{"@param_id0": "c", "@param_id1": "d"}))
	require.Equal(t, []string{"a"}, ids(t, "SELECT * FROM c WHERE (c.id = @param_id0 AND c.tenantId = @param_pk00 AND c.userId = @param_pk01)", rm, map[string]any{"@param_id0": "a", "@param_pk00": "t", "@param_pk01": "u"}))
	require.Equal(t, []string{"a"}, ids(t, `SELECT * FROM c WHERE (c.id = @param_id0 AND c["pk"] = @param_pk00)`, rm, map[string]any{"@param_id0": "a", "@param_pk00": "1"}))
}

// TestProviderQueries runs the queries durafeed's Cosmos provider issues.
func TestProviderQueries(t *testing.T) {
	queue := docsOf(t, `[
		{"id":"q1","instanceId":"i1","_etag":"e1","type":"orch_queue","visibleAt":100,"dispatchSlot":1},
		{"id":"q2","instanceId":"i2","_etag":"e2","type":"orch_queue","visibleAt":100,"dispatchSlot":2,"lockedUntil":null},
		{"id":"q3","instanceId":"i3","_etag":"e3","type":"orch_queue","visibleAt":100,"dispatchSlot":3,"lockedUntil":150},
		{"id":"q4","instanceId":"i4","_etag":"e4","type":"orch_queue","visibleAt":100,"dispatchSlot":3,"lockedUntil":250},
		{"id":"q5","instanceId":"i5","_etag":"e5","type":"orch_queue","visibleAt":300,"dispatchSlot":1},
		{"id":"q6","instanceId":"i6","_etag":"e6","type":"orch_queue","visibleAt":100,"dispatchSlot":4},
		{"id":"q7","instanceId":"i7","_etag":"e7","type":"history","visibleAt":100,"dispatchSlot":1},
		{"id":"q8","instanceId":"i8","_etag":"e8","type":"orch_queue","visibleAt":"100","dispatchSlot":1}
	]`)
	poll := `SELECT c.id, c.instanceId, c._etag FROM c WHERE c.type = 'orch_queue' AND c.visibleAt <= @now AND (NOT IS_DEFINED(c.lockedUntil) OR c.lockedUntil = null OR c.lockedUntil <= @now) AND c.dispatchSlot IN (1,2,3)`
	require.JSONEq(t, `[
		{"id":"q1","instanceId":"i1","_etag":"e1"},
		{"id":"q2","instanceId":"i2","_etag":"e2"},
		{"id":"q3","instanceId":"i3","_etag":"e3"}]`, run(t, poll, queue, map[string]any{"@now": 200}))
	pq, err := Parse(poll)
	require.NoError(t, err)
	require.True(t, pq.Features().CrossPartitionSafe())
	for _, d := range queue {
		ok, err := pq.Filter(d, map[string]any{"@now": 200.0})
		require.NoError(t, err)
		want := d["id"] == "q1" || d["id"] == "q2" || d["id"] == "q3"
		require.Equal(t, want, ok, d["id"])
	}

	history := docsOf(t, `[
		{"id":"h3","instanceId":"i1","type":"history","executionId":"e1","eventId":3},
		{"id":"h1","instanceId":"i1","type":"history","executionId":"e1","eventId":1},
		{"id":"h2","instanceId":"i1","type":"history","executionId":"e2","eventId":2},
		{"id":"x","instanceId":"i1","type":"instance","executionId":"e3"},
		{"id":"h0","instanceId":"i2","type":"history","executionId":"e9","eventId":0},
		{"id":"h10","instanceId":"i1","type":"history","executionId":"e1","eventId":10},
		{"id":"i2","instanceId":"i2","type":"instance"}
	]`)
	require.JSONEq(t, `["e1","e2"]`, run(t, `SELECT DISTINCT VALUE c.executionId FROM c WHERE c.instanceId = @i AND c.type = 'history'`, history, map[string]any{"@i": "i1"}))
	require.Equal(t, []string{"h1", "h3", "h10"}, ids(t, `SELECT * FROM c WHERE c.instanceId = @i AND c.type = 'history' AND c.executionId = @e ORDER BY c.eventId`, history, map[string]any{"@i": "i1", "@e": "e1"}))
	require.JSONEq(t, `[2]`, run(t, `SELECT VALUE COUNT(1) FROM c WHERE c.type = 'instance'`, history, nil))
	require.JSONEq(t, `[0]`, run(t, `SELECT VALUE COUNT(1) FROM c WHERE c.type = 'instance'`, nil, nil))

	q, err := Parse(`SELECT DISTINCT VALUE c.executionId FROM c WHERE c.instanceId = @i AND c.type = 'history'`)
	require.NoError(t, err)
	require.Equal(t, Features{Distinct: true}, q.Features())
	q, err = Parse(`SELECT VALUE COUNT(1) FROM c WHERE c.type = 'instance'`)
	require.NoError(t, err)
	require.Equal(t, Features{Aggregate: true}, q.Features())
}

func TestFilter(t *testing.T) {
	q, err := Parse("SELECT c.id FROM c WHERE c.a > @min")
	require.NoError(t, err)
	ok, err := q.Filter(map[string]any{"a": 5.0}, map[string]any{"@min": 1})
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = q.Filter(map[string]any{"a": "5"}, map[string]any{"@min": 1})
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = q.Filter(map[string]any{}, map[string]any{"@min": 1})
	require.NoError(t, err)
	require.False(t, ok)

	q, err = Parse("SELECT * FROM c")
	require.NoError(t, err)
	ok, err = q.Filter(map[string]any{}, nil)
	require.NoError(t, err)
	require.True(t, ok)

	q, err = Parse("SELECT * FROM c.sub")
	require.NoError(t, err)
	ok, err = q.Filter(map[string]any{}, nil)
	require.NoError(t, err)
	require.False(t, ok)
}

// TestConcurrentExecute checks that one parsed query can be executed by many
// goroutines at once (run with -race).
func TestConcurrentExecute(t *testing.T) {
	q, err := Parse("SELECT c.id, c.n * 2 AS d FROM c WHERE c.n >= @min ORDER BY c.n DESC OFFSET 1 LIMIT 3")
	require.NoError(t, err)
	var docs []map[string]any
	for i := 0; i < 50; i++ {
		docs = append(docs, map[string]any{"id": strconv.Itoa(i), "n": float64(i)})
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				res, err := q.Execute(docs, map[string]any{"@min": g})
				if err != nil || len(res) != 3 || res[0].(map[string]any)["id"] != "48" {
					t.Errorf("unexpected result %v %v", res, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

// TestResultsNeverUndefined checks that Undefined never escapes into results.
func TestResultsNeverUndefined(t *testing.T) {
	docs := docsOf(t, `[{"id":"1","a":[1,2]},{"id":"2"}]`)
	for _, qs := range []string{
		"SELECT c.missing, [c.missing], {a: c.missing} AS o FROM c",
		"SELECT VALUE [c.missing, undefined] FROM c",
		"SELECT VALUE {a: undefined} FROM c",
		"SELECT MIN(c.missing) AS m, SUM(c.missing) AS s, AVG(c.missing) AS a FROM c",
		"SELECT c.a[5] AS x, c.missing.y AS y FROM c GROUP BY c.a[5], c.missing.y",
	} {
		q, err := Parse(qs)
		require.NoError(t, err, qs)
		res, err := q.Execute(docs, nil)
		require.NoError(t, err, qs)
		var walk func(v any)
		walk = func(v any) {
			switch x := v.(type) {
			case UndefinedType:
				t.Fatalf("%s: undefined in result", qs)
			case map[string]any:
				for _, e := range x {
					walk(e)
				}
			case []any:
				for _, e := range x {
					walk(e)
				}
			}
		}
		walk(res)
		_, err = json.Marshal(res)
		require.NoError(t, err)
	}
}
