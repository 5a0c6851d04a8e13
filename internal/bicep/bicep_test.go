package bicep

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func readerObj(t *testing.T, v Value) Object {
	t.Helper()
	o, ok := v.(Object)
	require.Truef(t, ok, "want Object, got %T %#v", v, v)
	return o
}

func readerAt(t *testing.T, v Value, path ...string) Value {
	t.Helper()
	got, ok := readerObj(t, v).Get(path...)
	require.Truef(t, ok, "missing %v", path)
	return got
}

func TestParseBicep(t *testing.T) {
	tests := []struct {
		name  string
		src   string
		check func(t *testing.T, f *File)
	}{{
		name: "param with decorators",
		src: `targetScope = 'resourceGroup'
@description('Replica count')
@minValue(1)
@maxValue(10)
param replicas int = 2

@allowed([
  'dev'
  'prod'
])
@sys.description('env')
param env string = 'dev'

@secure()
param key string
param kinds 'a' | 'b' = 'a'
param tags object = {}
param names string[] = [ 'x' ]
`,
		check: func(t *testing.T, f *File) {
			require.Equal(t, "resourceGroup", f.TargetScope)
			r := f.Param("replicas")
			require.Equal(t, &Param{Name: "replicas", Type: "int", Default: int64(2), HasDefault: true, Line: 5,
				Decorators: []Decorator{
					{Name: "description", Args: []Value{"Replica count"}},
					{Name: "minValue", Args: []Value{int64(1)}},
					{Name: "maxValue", Args: []Value{int64(10)}},
				}}, r)
			e := f.Param("env")
			require.Equal(t, []Decorator{
				{Name: "allowed", Args: []Value{Array{"dev", "prod"}}},
				{Name: "sys.description", Args: []Value{"env"}},
			}, e.Decorators)
			k := f.Param("key")
			require.Equal(t, []Decorator{{Name: "secure"}}, k.Decorators)
			require.False(t, k.HasDefault)
			require.Nil(t, k.Default)
			require.Equal(t, "'a' | 'b'", f.Param("kinds").Type)
			require.Equal(t, Object{Values: map[string]Value{}}, f.Param("tags").Default)
			require.Equal(t, "string[]", f.Param("names").Type)
			require.Nil(t, f.Param("nope"))
		},
	}, {
		name: "vars, literals and expressions",
		src: `var n = -1
var name = 'app'
var env = '${name}-env'
var cpu = json('0.5')
var id = uami.properties.clientId
var grace = '${ grace }s'
var cmp = 'a' == b ? 1 : 2
var sum = 1 + x
var esc = 'it\'s \\ \u{41}\$'
var ml = '''
line1
  'quoted' ${not}'''
var items = [for i in range(0, 3): {
  n: i
}]
var merged = union(base, {
  x: 1
})
`,
		check: func(t *testing.T, f *File) {
			want := map[string]Value{
				"n":      int64(-1),
				"name":   "app",
				"env":    Expr{"'${name}-env'"},
				"cpu":    Expr{"json('0.5')"},
				"id":     Expr{"uami.properties.clientId"},
				"grace":  Expr{"'${ grace }s'"},
				"cmp":    Expr{"'a' == b ? 1 : 2"},
				"sum":    Expr{"1 + x"},
				"esc":    "it's \\ A$",
				"ml":     "line1\n  'quoted' ${not}",
				"items":  Expr{"[for i in range(0, 3): { n: i }]"},
				"merged": Expr{"union(base, { x: 1 })"},
			}
			require.Len(t, f.Vars, len(want))
			for name, v := range want {
				require.Equal(t, v, f.Var(name).Value, name)
			}
			require.Equal(t, 3, f.Var("env").Line)
		},
	}, {
		name: "resource with nested values",
		src: `resource app 'Microsoft.App/containerApps@2024-03-01' = {
  name: '${prefix}-app' // trailing comment
  location: location
  /* block
     comment */
  properties: {
    'weird-key': true
    template: {
      containers: [
        {
          image: 'img'
          resources: { cpu: json('0.5'), memory: '1Gi' }
        }
      ]
      scale: {
        minReplicas: 0
        maxReplicas: -1
        rules: null
        pair: [1, 2]
        flag: false
      }
    }
    choice: cond ? {
      a: 1
    } : {}
  }
}
`,
		check: func(t *testing.T, f *File) {
			r := f.Resource("app")
			require.Equal(t, "Microsoft.App/containerApps", r.Type)
			require.Equal(t, "2024-03-01", r.APIVersion)
			require.False(t, r.Existing)
			require.Nil(t, r.Condition)
			require.Nil(t, r.Loop)
			require.Equal(t, 1, r.Line)
			require.Equal(t, []string{"name", "location", "properties"}, readerObj(t, r.Body).Keys)
			require.Equal(t, Expr{"'${prefix}-app'"}, readerAt(t, r.Body, "name"))
			require.Equal(t, true, readerAt(t, r.Body, "properties", "weird-key"))
			scale := readerAt(t, r.Body, "properties", "template", "scale")
			require.Equal(t, int64(0), readerAt(t, scale, "minReplicas"))
			require.Equal(t, int64(-1), readerAt(t, scale, "maxReplicas"))
			v, ok := readerObj(t, scale).Get("rules")
			require.True(t, ok)
			require.Nil(t, v)
			require.Equal(t, Array{int64(1), int64(2)}, readerAt(t, scale, "pair"))
			require.Equal(t, false, readerAt(t, scale, "flag"))
			containers := readerAt(t, r.Body, "properties", "template", "containers").(Array)
			require.Len(t, containers, 1)
			res := readerAt(t, containers[0], "resources")
			require.Equal(t, Expr{"json('0.5')"}, readerAt(t, res, "cpu"))
			require.Equal(t, "1Gi", readerAt(t, res, "memory"))
			require.Equal(t, Expr{"cond ? { a: 1 } : {}"}, readerAt(t, r.Body, "properties", "choice"))
			require.Len(t, f.ResourcesOfType("microsoft.app/CONTAINERAPPS"), 1)
			require.Empty(t, f.ResourcesOfType("Microsoft.App/managedEnvironments"))
		},
	}, {
		name: "condition, loop, existing, nested",
		src: `resource kv 'Microsoft.KeyVault/vaults@2023-07-01' existing = {
  name: kvName
}
resource la 'Microsoft.OperationalInsights/workspaces@2023-09-01' = if (deployLogs && !x) {
  name: 'la'
}
@batchSize(1)
resource ids 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = [for (n, i) in names: {
  name: n
}]
resource sa 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  name: 'sa'
  #disable-next-line no-unnecessary-dependson
  dependsOn: [
    kv
    ids
  ]
  resource blobs 'blobServices' = {
    name: 'default'
  }
}
`,
		check: func(t *testing.T, f *File) {
			require.True(t, f.Resource("kv").Existing)
			require.Equal(t, &Expr{"deployLogs && !x"}, f.Resource("la").Condition)
			ids := f.Resource("ids")
			require.Equal(t, &Expr{"(n, i) in names"}, ids.Loop)
			require.Equal(t, Expr{"n"}, readerAt(t, ids.Body, "name"))
			require.Equal(t, []Decorator{{Name: "batchSize", Args: []Value{int64(1)}}}, ids.Decorators)
			blobs := f.Resource("sa::blobs")
			require.Equal(t, "Microsoft.Storage/storageAccounts/blobServices", blobs.Type)
			require.Equal(t, "2023-05-01", blobs.APIVersion)
			require.Equal(t, []string{"name", "dependsOn"}, readerObj(t, f.Resource("sa").Body).Keys)
			require.Equal(t, Array{Expr{"kv"}, Expr{"ids"}}, readerAt(t, f.Resource("sa").Body, "dependsOn"))
		},
	}, {
		name: "comments everywhere",
		src: `// header
/* block */ targetScope = 'subscription' // after
@description('d') // after decorator
/* between
   lines */
param p int = 1 /* trailing */
var a = [ // open
  1 // one
  /* two */ 2
] // close
var b = f(x, // arg
  /* y */ y)
var c = { /* k */ k: 'v' /* after */ } // end
`,
		check: func(t *testing.T, f *File) {
			require.Equal(t, "subscription", f.TargetScope)
			p := f.Param("p")
			require.Equal(t, int64(1), p.Default)
			require.Equal(t, 6, p.Line)
			require.Equal(t, []Decorator{{Name: "description", Args: []Value{"d"}}}, p.Decorators)
			require.Equal(t, Array{int64(1), int64(2)}, f.Var("a").Value)
			require.Equal(t, Expr{"f(x, y)"}, f.Var("b").Value)
			require.Equal(t, "v", readerAt(t, f.Var("c").Value, "k"))
		},
	}, {
		name: "module and outputs",
		src: `import * as t from 'types.bicep'
type pair = {
  @description('left')
  a: string
  b: int
}
func twice(x int) int => x * 2
metadata owner = 'me'
#disable-next-line no-unused-params
module env 'modules/env.bicep' = if (enabled) {
  name: 'env'
  params: { location: location, replicas: 3 }
}
@description('The id')
output id string = app.id
output cfg object = {
  a: 1
}
`,
		check: func(t *testing.T, f *File) {
			m := f.Module("env")
			require.Equal(t, "modules/env.bicep", m.Path)
			require.Equal(t, &Expr{"enabled"}, m.Condition)
			require.Equal(t, int64(3), readerAt(t, m.Body, "params", "replicas"))
			require.Equal(t, 10, m.Line)
			id := f.Output("id")
			require.Equal(t, "string", id.Type)
			require.Equal(t, Expr{"app.id"}, id.Value)
			require.Equal(t, []Decorator{{Name: "description", Args: []Value{"The id"}}}, id.Decorators)
			require.Equal(t, int64(1), readerAt(t, f.Output("cfg").Value, "a"))
			require.Nil(t, f.Module("x"))
			require.Nil(t, f.Output("x"))
			require.Nil(t, f.Var("x"))
			require.Nil(t, f.Resource("x"))
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("test.bicep", []byte(tc.src))
			require.NoError(t, err)
			tc.check(t, f)
		})
	}
}

func TestParseBicepErrors(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"unterminated string", "var a = 1\nvar b = 'abc\n", "test.bicep:2:9: unterminated string"},
		{"unterminated multi-line string", "var a = '''abc\n", "test.bicep:1:9: unterminated multi-line"},
		{"unbalanced brace", "var a = {\n  b: 1\n", "test.bicep:3:1: expected '}' to close '{' at 1:9"},
		{"unbalanced expr", "var a = f(1,\n  2\n", "test.bicep:3:1: expected ')' to close '(' at 1:10"},
		{"mismatched bracket", "var a = f(1]\n", "test.bicep:1:12: expected ')'"},
		{"duplicate key", "var a = {\n  b: 1\n  b: 2\n}\n", "test.bicep:3:3: duplicate property \"b\""},
		{"missing =", "param p string\nvar a 1\n", "test.bicep:2:8: expected '='"},
		{"missing = in resource", "resource r 'A.B/c@1' {\n}\n", "test.bicep:1:22: expected '='"},
		{"two values on a line", "var a = {\n  b: 1 c: 2\n}\n", "test.bicep:2:8: expected an operator"},
		{"no version", "resource r 'A.B/c' = {}\n", "test.bicep:1:12: expected 'type@apiVersion'"},
		{"bad escape", "var a = 'x\\q'\n", "test.bicep:1:11: expected one of"},
		{"unknown statement", "foo bar\n", "test.bicep:1:1: expected a statement keyword"},
		{"dangling decorator", "@secure()\n", "expected a declaration after decorator"},
		{"unterminated comment", "var a = 1 /* x\n", "test.bicep:1:11: unterminated comment"},
		{"interpolated module path", "module m '${p}.bicep' = {}\n", "test.bicep:1:10: expected a module path string without interpolation"},
		{"trailing junk", "var a = 1\n}\n", "test.bicep:2:1: expected a statement keyword"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("test.bicep", []byte(tc.src))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestBicepLiteral(t *testing.T) {
	f, err := Parse("test.bicep", []byte(`var ok = {
  a: [1, 'x', true, null]
  b: { c: -2 }
}
var bad = {
  a: [1, { c: uami.id }]
}
`))
	require.NoError(t, err)
	got, err := Literal(f.Var("ok").Value)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"a": []any{1.0, "x", true, nil}, "b": map[string]any{"c": -2.0}}, got)
	_, err = Literal(f.Var("bad").Value)
	require.ErrorContains(t, err, `$.a[1].c is the expression "uami.id"`)
}

func TestBicepObjectGet(t *testing.T) {
	o := Object{Keys: []string{"a", "s"}, Values: map[string]Value{
		"a": Object{Keys: []string{"b"}, Values: map[string]Value{"b": int64(1)}},
		"s": "str",
	}}
	tests := []struct {
		path []string
		want Value
		ok   bool
	}{
		{[]string{"a", "b"}, int64(1), true},
		{[]string{"s"}, "str", true},
		{[]string{"a", "x"}, nil, false},
		{[]string{"s", "x"}, nil, false},
		{nil, o, true},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.path), func(t *testing.T) {
			got, ok := o.Get(tc.path...)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestOnlyResourceOfType(t *testing.T) {
	f, err := Parse("x.bicep", []byte("resource a 'A.B/c@1' = {}\nresource b 'a.b/C@2' = {}\nresource d 'A.B/d@1' = {}\n"))
	require.NoError(t, err)
	r, err := f.OnlyResourceOfType("A.B/d")
	require.NoError(t, err)
	require.Equal(t, "d", r.Symbol)
	_, err = f.OnlyResourceOfType("A.B/c")
	require.ErrorContains(t, err, "declares 2 resources of type A.B/c")
	_, err = f.OnlyResourceOfType("A.B/e")
	require.ErrorContains(t, err, "declares 0 resources")
}

func TestReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.bicep")
	require.NoError(t, os.WriteFile(path, []byte("param p int = 1\r\n"), 0o600))
	f, err := ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, path, f.Path)
	require.Equal(t, int64(1), f.Param("p").Default)
	_, err = ReadFile(filepath.Join(t.TempDir(), "missing.bicep"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// FuzzParseBicep checks that no input makes the reader panic.
func FuzzParseBicep(f *testing.F) {
	for _, seed := range []string{
		"param p int = 1\n",
		"var a = '${x ? 'y' : '\\u{41}'}'\nvar b = [for i in r: { a: i }]\n",
		"resource r 'A.B/c@1' existing = if (x) {\n  resource k 'd' = {}\n  p: { q: [1, -2, null] }\n}\n",
		"@a.b(1, [\n  2\n])\noutput o object = { 'k': '''x''' }\n",
		"var a = f(\n /* c */ {\n a: 1\n})",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		file, err := Parse("fuzz.bicep", src)
		if err != nil {
			return
		}
		for _, v := range file.Vars {
			_, _ = Literal(v.Value)
		}
	})
}
