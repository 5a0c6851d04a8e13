package tagged

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

type sample struct {
	Name     string   `json:"name"`
	Count    uint64   `json:"count"`
	Note     *string  `json:"note"`
	Optional string   `json:"optional,omitempty"`
	List     []string `json:"list,omitempty"`
}

func TestMarshalPutsTypeFirst(t *testing.T) {
	b, err := Marshal("Sample", sample{Name: "a", Count: 2})
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"Sample","name":"a","count":2,"note":null}`, string(b))
	require.Equal(t, `{"type":"Sample",`, string(b[:17]))

	b, err = Marshal("Empty", struct{}{})
	require.NoError(t, err)
	require.Equal(t, `{"type":"Empty"}`, string(b))

	_, err = Marshal("NotObject", 5)
	require.Error(t, err)
}

func TestDecodeRules(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    sample
		wantErr string
	}{
		{name: "all fields", in: `{"type":"S","name":"a","count":3,"note":"n","optional":"o","list":["x"]}`,
			want: sample{Name: "a", Count: 3, Note: ptr("n"), Optional: "o", List: []string{"x"}}},
		{name: "optional absent", in: `{"type":"S","name":"a","count":3,"note":null}`, want: sample{Name: "a", Count: 3}},
		{name: "required absent", in: `{"type":"S","name":"a","note":null}`, wantErr: `missing required field "count"`},
		{name: "unknown member", in: `{"type":"S","name":"a","count":1,"note":null,"extra":1}`, wantErr: `no field "extra"`},
		{name: "null for value field", in: `{"type":"S","name":null,"count":1,"note":null}`, wantErr: `"name" must not be null`},
		{name: "negative for unsigned", in: `{"type":"S","name":"a","count":-1,"note":null}`, wantErr: `field "count"`},
		{name: "fraction for unsigned", in: `{"type":"S","name":"a","count":1.5,"note":null}`, wantErr: `field "count"`},
		{name: "wrong type", in: `{"type":"S","name":5,"count":1,"note":null}`, wantErr: `field "name"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tag, m, err := Split([]byte(tc.in))
			require.NoError(t, err)
			require.Equal(t, "S", tag)
			var got sample
			err = Decode("sample", m, &got)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, ErrMalformed)
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestSplitRejectsNonObjects(t *testing.T) {
	for _, in := range []string{``, `null`, `[]`, `"x"`, `{}`, `{"type":5}`, `{"type":""}`, `{"type":null}`, `{"type":"A"`} {
		_, _, err := Split([]byte(in))
		require.ErrorIs(t, err, ErrMalformed, "input %q", in)
	}
}

func TestTakeMovesMembers(t *testing.T) {
	m := Members{"a": json.RawMessage(`1`), "b": json.RawMessage(`2`)}
	got := m.Take("a", "missing")
	require.Equal(t, Members{"a": json.RawMessage(`1`)}, got)
	require.Equal(t, Members{"b": json.RawMessage(`2`)}, m)
}

func TestDecodeTargetMustBeStructPointer(t *testing.T) {
	var s sample
	require.Error(t, Decode("x", Members{}, s))
	require.Error(t, Decode("x", Members{}, (*sample)(nil)))
}

func ptr(s string) *string { return &s }
