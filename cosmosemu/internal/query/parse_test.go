package query

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseAccepts(t *testing.T) {
	queries := []string{
		"SELECT * FROM c",
		"select * from c",
		"SeLeCt * FrOm c WhErE c.id = 'x'",
		"SELECT * FROM root r WHERE r.id = @id",
		"select * from docs c where c.someProp = 'some_4'",
		"SELECT * FROM c AS d WHERE d.id = '1'",
		"SELECT c.id, c.a.b, c['x'], c.arr[0] FROM c",
		"SELECT c.id AS i, c.name n FROM c",
		"SELECT VALUE c.id FROM c",
		"SELECT DISTINCT VALUE c.x FROM c",
		"SELECT DISTINCT TOP 10 VALUE c.x FROM c",
		"SELECT TOP @n * FROM c",
		"SELECT * FROM c ORDER BY c.a, c.b DESC, c.c ASC",
		"SELECT * FROM c OFFSET 10 LIMIT 5",
		"SELECT * FROM c OFFSET @o LIMIT @l",
		"SELECT c.t, COUNT(1) AS n FROM c GROUP BY c.t",
		"SELECT VALUE COUNT(1) FROM c WHERE c.type = 'instance'",
		"SELECT COUNT(1), SUM(c.x), MIN(c.x), MAX(c.x), AVG(c.x) FROM c",
		"SELECT VALUE {\"a\": c.x, b: [1, 2]} FROM c",
		"SELECT [c.x, 1] AS arr FROM c",
		"SELECT * FROM c WHERE c.a BETWEEN 1 AND 5 AND c.b NOT BETWEEN 1 AND 2",
		"SELECT * FROM c WHERE c.a IN (1, 2, 3) AND c.b NOT IN ('x')",
		"SELECT * FROM c WHERE c.a LIKE 'x%' ESCAPE '!' OR c.b NOT LIKE '_'",
		"SELECT * FROM c WHERE (c.a ?? 1) > 0 ? true : false",
		"SELECT * FROM c WHERE c.a || c.b = 'xy'",
		"SELECT * FROM c WHERE c.a & 1 = 1 AND c.b | 2 = 2 AND c.c ^ 3 = 0 AND ~c.d = 0 AND c.e << 1 >> 1 >>> 0 = 1",
		"SELECT * FROM c WHERE NOT IS_DEFINED(c.a) OR c.a = null OR c.a <= @now",
		"SELECT LEFT(c.s, 1), RIGHT(c.s, 1) FROM c",
		"SELECT * FROM c -- a comment\nWHERE c.id = '1' -- another",
		"SELECT * FROM Families.children[0] c",
		"SELECT * FROM c IN c.children",
		"SELECT c.id, t FROM c JOIN t IN c.tags",
		"SELECT VALUE 1",
		"SELECT 1 + 2 AS three",
		"SELECT * FROM c WHERE c.a = -1 AND c.b = +2 AND c.c = 1.5e-3 AND c.d = .5",
		"SELECT * FROM c WHERE c[\"my-prop\"][0][\"x\"] = 1",
		"SELECT * FROM c WHERE c.id = @param_id0 OR c.id = @param_id1",
		"SELECT * FROM c WHERE FullTextContains(c.title, \"search\") OR FullTextContains(c.description, \"search\")",
		"SELECT * FROM c WHERE c.n = undefined",
		"\n\tSELECT\n*\nFROM\nc\n",
	}
	for _, q := range queries {
		t.Run(q, func(t *testing.T) {
			_, err := Parse(q)
			require.NoError(t, err)
		})
	}
}

func TestParseRejects(t *testing.T) {
	cases := []struct{ query, code, msg string }{
		{"", CodeSyntax, "Syntax error, unexpected end-of-file."},
		{"SELECT", CodeSyntax, "Syntax error, unexpected end-of-file."},
		{"SELEC * FROM c", CodeSyntax, "Syntax error, incorrect syntax near 'SELEC'."},
		{"SELECT * FROM", CodeSyntax, "Syntax error, unexpected end-of-file."},
		{"SELECT * FROM c WHERE", CodeSyntax, "Syntax error, unexpected end-of-file."},
		{"SELECT * FROM c WHERE c.id =", CodeSyntax, "Syntax error, unexpected end-of-file."},
		{"SELECT *, c.id FROM c", CodeSyntax, "Syntax error, incorrect syntax near ','."},
		{"SELECT VALUE * FROM c", CodeSyntax, "Syntax error, incorrect syntax near '*'."},
		{"SELECT c.value FROM c", CodeSyntax, "Syntax error, incorrect syntax near 'value'."},
		{"SELECT c.id AS Value FROM c", CodeSyntax, "Syntax error, incorrect syntax near 'Value'."},
		{"SELECT * FROM c WHERE c.a = 'unterminated", CodeSyntax, ""},
		{"SELECT * FROM c WHERE c.a = 'bad \\q escape'", CodeSyntax, "Syntax error, incorrect syntax near '\\q'."},
		{"SELECT * FROM c WHERE c.a == 1", CodeSyntax, "Syntax error, incorrect syntax near '='."},
		{"SELECT * FROM c ORDER c.id", CodeSyntax, "Syntax error, incorrect syntax near 'c'."},
		{"SELECT * FROM c OFFSET 1", CodeSyntax, "Syntax error, unexpected end-of-file."},
		{"SELECT * FROM c LIMIT 1", CodeSyntax, "Syntax error, incorrect syntax near 'LIMIT'."},
		{"SELECT * FROM c WHERE c.a # 1", CodeSyntax, "Syntax error, incorrect syntax near '#'."},
		{"SELECT 12abc FROM c", CodeSyntax, "Syntax error, incorrect syntax near '12abc'."},
		{"SELECT * FROM c WHERE c.a = @", CodeSyntax, "Syntax error, incorrect syntax near '@'."},
		{"SELECT TOP -1 * FROM c", CodeSyntax, "Syntax error, incorrect syntax near '-'."},
		{"SELECT * FROM c WHERE c.a IN ()", CodeSyntax, "Syntax error, incorrect syntax near ')'."},
		{"SELECT * FROM c WHERE (c.a = 1", CodeSyntax, "Syntax error, unexpected end-of-file."},
		{"SELECT * FROM c c2 d", CodeSyntax, "Syntax error, incorrect syntax near 'd'."},
		{"SELECT {1: 2} FROM c", CodeSyntax, "Syntax error, incorrect syntax near '1'."},
		{"SELECT * FROM c WHERE c.a BETWEEN 1", CodeSyntax, "Syntax error, unexpected end-of-file."},
		{"SELECT * FROM c WHERE x.id = 1", CodeUnresolvedIdentifier, "Identifier 'x' could not be resolved."},
		{"SELECT * FROM docs c WHERE docs.id = 1", CodeUnresolvedIdentifier, "Identifier 'docs' could not be resolved."},
		{"SELECT * FROM c WHERE c.a = TRUE", CodeUnresolvedIdentifier, "Identifier 'TRUE' could not be resolved."},
		{"SELECT x", CodeUnresolvedIdentifier, "Identifier 'x' could not be resolved."},
		{"SELECT * FROM c c2 JOIN t IN x.tags", CodeUnresolvedIdentifier, "Identifier 'x' could not be resolved."},
		{"SELECT * FROM c WHERE FOO(c.a)", CodeUnknownFunction, "'FOO' is not a recognized built-in function name."},
		{"SELECT * FROM c WHERE CONTAINS(c.a)", CodeArgumentCount, "The CONTAINS function requires between 2 and 3 argument(s)."},
		{"SELECT * FROM c WHERE IS_DEFINED(c.a, c.b)", CodeArgumentCount, "The IS_DEFINED function requires 1 argument(s)."},
		{"SELECT CONCAT('a') FROM c", CodeArgumentCount, "The CONCAT function requires at least 2 argument(s)."},
		{"SELECT COUNT() FROM c", CodeArgumentCount, "The COUNT function requires 1 argument(s)."},
		{"SELECT * FROM c WHERE COUNT(1) > 1", CodeInvalid, ""},
		{"SELECT * FROM c ORDER BY MAX(c.a)", CodeInvalid, ""},
		{"SELECT c.x, COUNT(1) FROM c", CodeInvalid, "Property reference 'c.x' is invalid in the select list because it is not contained in an aggregate function."},
		{"SELECT c.x, COUNT(1) FROM c GROUP BY c.y", CodeInvalid, "Property reference 'c.x' is invalid in the select list because it is not contained in either an aggregate function or the GROUP BY clause."},
		{"SELECT COUNT(SUM(c.x)) FROM c", CodeInvalid, ""},
		{"SELECT c.a[0].b, COUNT(1) FROM c", CodeInvalid, "Property reference 'c.a[0].b' is invalid in the select list because it is not contained in an aggregate function."},
		{"SELECT c[\"a\"], COUNT(1) FROM c GROUP BY c.b", CodeInvalid, "Property reference 'c[\"a\"]' is invalid in the select list because it is not contained in either an aggregate function or the GROUP BY clause."},
		{"SELECT * FROM c GROUP BY c.x", CodeInvalid, ""},
		{"SELECT *", CodeInvalid, "'SELECT *' is not valid if FROM clause is omitted."},
		{"SELECT * FROM c JOIN t IN c.tags", CodeInvalid, "'SELECT *' is only valid with a single input set."},
		{"SELECT c.id FROM c JOIN c IN c.tags", CodeInvalid, ""},
		{"SELECT TOP 1.5 * FROM c", CodeInvalid, ""},
		{"SELECT * FROM c OFFSET 1 LIMIT 2.5", CodeInvalid, ""},
		{"SELECT * FROM c WHERE c.a LIKE 'x' ESCAPE 'ab'", CodeInvalid, ""},
		{"SELECT * FROM c WHERE EXISTS(SELECT VALUE 1)", CodeUnsupported, ""},
		{"SELECT ARRAY(SELECT VALUE 1) FROM c", CodeUnsupported, ""},
		{"SELECT * FROM c WHERE c.id IN (SELECT VALUE 1)", CodeUnsupported, ""},
		{"SELECT (SELECT VALUE 1) FROM c", CodeUnsupported, ""},
		{"SELECT * FROM (SELECT * FROM c)", CodeUnsupported, ""},
		{"SELECT udf.f(c.x) FROM c", CodeUnsupported, ""},
		{"SELECT * FROM c ORDER BY RANK FullTextScore(c.t, 'x')", CodeUnsupported, ""},
		{"SELECT c.t, COUNT(1) FROM c GROUP BY c.t ORDER BY c.t", CodeUnsupported, ""},
		{"SELECT VALUE " + strings.Repeat("(", 1000) + "1" + strings.Repeat(")", 1000), CodeInvalid, ""},
		{"SELECT VALUE " + strings.Repeat("NOT ", 1000) + "true", CodeInvalid, ""},
		{"SELECT VALUE " + strings.Repeat("[", 1000) + strings.Repeat("]", 1000), CodeInvalid, ""},
	}
	for _, tc := range cases {
		name := tc.query
		if len(name) > 60 {
			name = name[:60]
		}
		t.Run(name, func(t *testing.T) {
			q, err := Parse(tc.query)
			require.Nil(t, q)
			require.Error(t, err)
			var qe *Error
			require.ErrorAs(t, err, &qe)
			require.Equal(t, tc.code, qe.Code, qe.Message)
			if tc.msg != "" {
				require.Equal(t, tc.msg, qe.Message)
			}
			require.Equal(t, qe.Code+": "+qe.Message, err.Error())
		})
	}
}

func TestExecuteErrors(t *testing.T) {
	e := queryErr(t, "SELECT * FROM c WHERE c.id = @id", nil)
	require.Equal(t, CodeUnresolvedIdentifier, e.Code)
	require.Equal(t, "Identifier '@id' could not be resolved.", e.Message)

	e = queryErr(t, "SELECT TOP @n * FROM c", map[string]any{"@n": "ten"})
	require.Equal(t, CodeInvalid, e.Code)
	e = queryErr(t, "SELECT TOP @n * FROM c", map[string]any{"@n": -1})
	require.Equal(t, CodeInvalid, e.Code)
	e = queryErr(t, "SELECT * FROM c OFFSET @o LIMIT @l", map[string]any{"@o": 1})
	require.Equal(t, CodeUnresolvedIdentifier, e.Code)
	e = queryErr(t, "SELECT * FROM c OFFSET @o LIMIT @l", map[string]any{"@o": 1, "@l": 1.5})
	require.Equal(t, CodeInvalid, e.Code)

	q, err := Parse("SELECT * FROM c WHERE c.id = @id")
	require.NoError(t, err)
	_, err = q.Filter(map[string]any{"id": "x"}, map[string]any{})
	require.Error(t, err)
}

func TestFeatures(t *testing.T) {
	cases := []struct {
		query string
		want  Features
	}{
		{"SELECT * FROM c WHERE c.id = 'x'", Features{}},
		{"SELECT c.id FROM c JOIN t IN c.tags", Features{}},
		{"SELECT * FROM c ORDER BY c.id", Features{OrderBy: true}},
		{"SELECT TOP 5 * FROM c", Features{Top: true}},
		{"SELECT DISTINCT VALUE c.x FROM c", Features{Distinct: true}},
		{"SELECT VALUE COUNT(1) FROM c", Features{Aggregate: true}},
		{"SELECT * FROM c OFFSET 1 LIMIT 1", Features{OffsetLimit: true}},
		{"SELECT c.t, COUNT(1) AS n FROM c GROUP BY c.t", Features{Aggregate: true, GroupBy: true}},
		{"SELECT c.t FROM c GROUP BY c.t", Features{GroupBy: true}},
	}
	for _, tc := range cases {
		q, err := Parse(tc.query)
		require.NoError(t, err, tc.query)
		require.Equal(t, tc.want, q.Features(), tc.query)
		require.Equal(t, tc.want == Features{}, q.Features().CrossPartitionSafe(), tc.query)
	}
}

func TestParameters(t *testing.T) {
	q, err := Parse("SELECT TOP @n * FROM c WHERE c.a = @a AND c.b = @b OR c.a = @a")
	require.NoError(t, err)
	require.Equal(t, []string{"@a", "@b", "@n"}, q.Parameters())
}

func TestPartitionKeyFilter(t *testing.T) {
	cases := []struct {
		query  string
		paths  []string
		params map[string]any
		want   []any
		ok     bool
	}{
		{"select * from c where c.pk = '1' order by c.id", []string{"/pk"}, nil, []any{"1"}, true},
		{"SELECT * FROM c WHERE '1' = c.pk", []string{"/pk"}, nil, []any{"1"}, true},
		{"SELECT * FROM c WHERE c.a = 1 AND (c.pk = @p AND c.b = 2)", []string{"/pk"}, map[string]any{"@p": 7}, []any{7.0}, true},
		{"SELECT * FROM c WHERE c.pk = @p", []string{"/pk"}, nil, nil, false},
		{"SELECT * FROM c WHERE c.pk = '1' OR c.pk = '2'", []string{"/pk"}, nil, nil, false},
		{"SELECT * FROM c WHERE c.pk > '1'", []string{"/pk"}, nil, nil, false},
		{"SELECT * FROM c", []string{"/pk"}, nil, nil, false},
		{"SELECT * FROM c WHERE c.parent = 'p1' AND c.child = 'c1'", []string{"/parent", "/child"}, nil, []any{"p1", "c1"}, true},
		{"SELECT * FROM c WHERE c.parent = 'p1'", []string{"/parent", "/child"}, nil, nil, false},
		{"SELECT * FROM c WHERE IS_NULL(c.pk) AND c.id IN (@param_id0)", []string{"/pk"}, nil, []any{nil}, true},
		{"SELECT * FROM c WHERE c[\"address\"][\"zip\"] = '9'", []string{"/address/zip"}, nil, []any{"9"}, true},
		{"SELECT * FROM r WHERE r.pk = 'x'", []string{"/pk"}, nil, []any{"x"}, true},
		{"SELECT * FROM r WHERE c.pk = 'x'", []string{"/pk"}, nil, nil, false},
	}
	for _, tc := range cases {
		q, err := Parse(tc.query)
		if err != nil {
			// "c" unresolved in the last case
			require.False(t, tc.ok, tc.query)
			continue
		}
		got, ok := q.PartitionKeyFilter(tc.paths, tc.params)
		require.Equal(t, tc.ok, ok, tc.query)
		require.Equal(t, tc.want, got, tc.query)
	}
}
