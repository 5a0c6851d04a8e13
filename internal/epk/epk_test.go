package epk

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Sources of the expected values:
//   - svc: the service-conformance vectors of the Java SDK's
//     PartitionKeyHashingTests (also used by the Rust and Python SDKs);
//   - sdk: azcosmos v1.5.0's own functions (ComputeV2HashForRouting,
//     ComputeV2MultiHashForRouting, and its .NET-generated baseline files,
//     top two bits cleared), run in a throwaway program outside the repo;
//   - v1ref: azcosmos's 32-bit MurmurHash plus an independent implementation
//     of the service's version-1 encoding and truncation.

func TestComputeHashV2(t *testing.T) {
	tests := []struct {
		name string
		in   any
		want string
	}{
		// svc
		{"empty string", "", "32E9366E637A71B4E710384B2F4970A0"},
		{"string", "partitionKey", "013AEFCF77FA271571CF665A58C933F1"},
		{"1024 chars", strings.Repeat("a", 1024), "332BDF5512AE49615F32C7D98C2DB86C"},
		{"null", nil, "378867E4430E67857ACE5C908374FE16"},
		{"undefined", Undefined, "11622DAA78F835834610ABE56EFF5CB5"},
		{"true", true, "0E711127C5B5A8E4726AC6DD306A3E59"},
		{"false", false, "2FE1BE91E90A3439635E0E9E37361EF2"},
		{"int8 min", -128.0, "01DAEDABF913540367FE219B2AD06148"},
		{"int8 max", 127.0, "0C507ACAC853ECA7977BF4CEFB562A25"},
		{"int64 min", float64(math.MinInt64), "23D5C6395512BDFEAFADAD15328AD2BB"},
		{"int64 max", float64(math.MaxInt64), "2EDB959178DFCCA18983F89384D1629B"},
		{"int32 min", float64(math.MinInt32), "0B1660D5233C3171725B30D4A5F4CC1F"},
		{"int32 max", float64(math.MaxInt32), "2D9349D64712AEB5EB1406E2F0BE2725"},
		{"smallest denormal", math.SmallestNonzeroFloat64, "0E6CBA63A280927DE485DEF865800139"},
		{"max float", math.MaxFloat64, "31424D996457102634591FF245DBCC4D"},
		{"five", 5.0, "19C08621B135968252FB34B4CF66F811"},
		{"fraction svc", 5.12312419050912359123, "0EF2E2D82460884AF0F6440BE4F726A8"},
		{"redmond", "redmond", "22E342F38A486A088463DFF7838A5963"},
		// sdk
		{"short string", "asdf", "208BF1D598F5B63AD5520F04FE58C5E8"},
		{"99 chars", strings.Repeat("a", 99), "3C02F609961C32AAC2B912B940D1209A"},
		{"100 chars", strings.Repeat("a", 100), "0DBD7D229437BB665DE6417747994D57"},
		{"101 chars, no truncation in v2", strings.Repeat("a", 101), "08042541D30C8BF90D7092B1519AE0BC"},
		{"2048 chars", strings.Repeat("a", 2048), "33E0AE996F53F2CD5DD5574ACAB3BF19"},
		{"200 digits", strings.Repeat("0123456789", 20), "3E2FC7076282FDAEB66311524801DDD1"},
		{"zero", 0.0, "155B95BEDAC4B1E9EC1CDC9BB0DDDE58"},
		{"negative zero", math.Copysign(0, -1), "3D018BB1DF3DB27235766E81FD10406E"},
		{"one", 1.0, "20CD98B339BA78A5D0CF6953B87070B0"},
		{"minus one", -1.0, "19938E7A936C1C5B9E3AE842BBC16839"},
		{"integer", 42.0, "08E6D561F6FD951DCC25E7E4EA2884B5"},
		{"fraction", 3.14159, "01F6E65F21D72B6E2E3F1D159DDCD3F5"},
		{"negative fraction", -2.5, "11DFF5D6B7A8EF74872EE9E3F806A13F"},
		{"tiny", 1e-7, "2D7E2FDA9A61CBCA1BE64F905B0F2B12"},
		{"max safe integer", 9007199254740991.0, "12C221C7032CED1F9E6693CE1428E6CF"},
		{"NaN", math.Float64frombits(0xFFF8000000000000), "1AA4222583D70ECAA0922D8CA8EDFCB1"},
		{"+Inf", math.Inf(1), "3889F7F08A8CE2A5C9829BBB1944B4FF"},
		{"-Inf", math.Inf(-1), "1B63B3FB266DB3B6CD3BC79FE893CDE8"},
		{"japanese", "日本語", "3F0624929BDE45571F050DCA6A1CB775"},
		{"latin accent", "café", "1AE97AF2CC0E6E12FBF8B4684778386F"},
		{"emoji", "🎉party", "27C716F4FE007C0961467A5822DA3ECF"},
		{"tenant", "tenant-42", "1D956EA8C214DED08A6749D6A42F43EB"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Compute(Hash, 2, []any{tc.in})
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestComputeHashV2MultipleComponents(t *testing.T) {
	// svc: one hash over the concatenated serializations.
	got, err := Compute(Hash, 2, []any{5.0, "redmond", true, nil})
	require.NoError(t, err)
	require.Equal(t, "3032DECBE2AB1768D8E0AEDEA35881DF", got)
}

func TestComputeHashV1(t *testing.T) {
	tests := []struct {
		name string
		in   any
		want string
	}{
		// svc
		{"empty string", "", "05C1CF33970FF80800"},
		{"string", "partitionKey", "05C1E1B3D9CD2608716273756A756A706F4C667A00"},
		{"1024 chars truncated to 100", strings.Repeat("a", 1024), "05C1EB5921F70608" + strings.Repeat("62", 100) + "00"},
		{"null", nil, "05C1ED45D7475601"},
		{"undefined", Undefined, "05C1D529E345DC00"},
		{"true", true, "05C1D7C5A903D803"},
		{"false", false, "05C1DB857D857C02"},
		{"int8 min", -128.0, "05C1D73349F54C053FA0"},
		{"int8 max", 127.0, "05C1DD539DDFCC05C05FE0"},
		{"int64 min", float64(math.MinInt64), "05C1DB35F33D1C053C20"},
		{"int64 max", float64(math.MaxInt64), "05C1B799AB2DD005C3E0"},
		{"int32 min", float64(math.MinInt32), "05C1DFBF252BCC053E20"},
		{"int32 max", float64(math.MaxInt32), "05C1E1F503DFB205C1DFFFFFFFFC"},
		{"smallest denormal", math.SmallestNonzeroFloat64, "05C1E5C91F4D3005800101010101010102"},
		{"max float", math.MaxFloat64, "05C1CBE367C53005FFEFFFFFFFFFFFFFFE"},
		// v1ref
		{"150 chars truncated to 100", strings.Repeat("a", 150), "05C1EB5921F70608" + strings.Repeat("62", 100) + "00"},
		{"japanese", "日本語", "05C1E31DE9C91E08E798A6E79DADE9AB9F00"},
		{"latin accent", "café", "05C1D31D0D21E408646267C4AA00"},
		{"emoji", "🎉party", "05C1A3BB03ADE008F1A08F8A716273757A00"},
		// 100 two-byte characters: 200 UTF-8 bytes, encoding keeps 101, no terminator.
		{"100 two-byte chars", strings.Repeat("é", 100), "05C1D9C91DF1D808" + strings.Repeat("C4AA", 50) + "C4"},
		{"101 two-byte chars truncated", strings.Repeat("é", 101), "05C1D9C91DF1D808" + strings.Repeat("C4AA", 50) + "C4"},
		// The 100th UTF-16 unit is half of a surrogate pair: it becomes U+FFFD.
		{"split surrogate pair", strings.Repeat("a", 99) + "😀b", "05C1E153DB455808" + strings.Repeat("62", 99) + "F0C0"},
		{"fraction", 3.14159, "05C1EB8365FFBC05C009917F3F01DD19DC"},
		{"negative fraction", -2.5, "05C1B14D53E5D0053FFC"},
		{"integer", 42.0, "05C1E75FCB273A05C04580"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Compute(Hash, 1, []any{tc.in})
			require.NoError(t, err)
			require.Equal(t, tc.want, got)

			def, err := Compute(Hash, 0, []any{tc.in})
			require.NoError(t, err)
			require.Equal(t, tc.want, def, "version 0 must mean version 1 for Hash")
		})
	}

	t.Run("multiple components", func(t *testing.T) {
		got, err := Compute(Hash, 1, []any{"a", 1.0, true})
		require.NoError(t, err)
		require.Equal(t, "05C1E1A521FF0408620005BFF003", got)
	})
}

func TestComputeMultiHash(t *testing.T) {
	tests := []struct {
		name string
		in   []any
		want string
	}{
		// sdk (.NET baseline "Lists")
		{"1 level", []any{"/path1"}, "3499FD5198AE0F1EB6B77F6E428D2FF0"},
		{"2 levels", []any{"/path1", "/path2"}, "3499FD5198AE0F1EB6B77F6E428D2FF027A1848BD1102A3B65AFF266874D0FF5"},
		{"3 levels", []any{"/path1", "/path2", "/path3"}, "3499FD5198AE0F1EB6B77F6E428D2FF027A1848BD1102A3B65AFF266874D0FF52CA5ABC953544CF9BD94776DA5E6EA52"},
		// Python SDK vectors
		{"tenant/user", []any{"title_player_account!9E711EFBD3BBB492", "Title-B60C1"}, "2306FDF78C35ED4FD1C5835B075FC0B0248E1F58635558D12708326234F93A21"},
		{"false/null", []any{false, nil}, "2FE1BE91E90A3439635E0E9E37361EF2378867E4430E67857ACE5C908374FE16"},
		// sdk
		{"mixed types", []any{"tenant", 42.0, Undefined}, "3B67F777541374F849FC7793DE5DF91508E6D561F6FD951DCC25E7E4EA2884B511622DAA78F835834610ABE56EFF5CB5"},
		{"bool/fraction", []any{true, -1.5}, "0E711127C5B5A8E4726AC6DD306A3E59151793206780805FF6E1DCAE6C787B6A"},
		{"unicode", []any{"日本語", "🎉"}, "3F0624929BDE45571F050DCA6A1CB7752B78EB248F79572A9B6A34CFD1CFABEC"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Compute(MultiHash, 2, tc.in)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)

			def, err := Compute(MultiHash, 0, tc.in)
			require.NoError(t, err)
			require.Equal(t, tc.want, def, "version 0 must mean version 2 for MultiHash")

			// Each level is the single-component V2 hash of that value, so a
			// prefix key's EPK is a prefix of the full key's EPK.
			for i, c := range tc.in {
				one, err := Compute(Hash, 2, []any{c})
				require.NoError(t, err)
				require.Equal(t, one, got[32*i:32*(i+1)])
			}
		})
	}
}

func TestComputeEquivalentInputs(t *testing.T) {
	mustCompute := func(kind Kind, version int, in []any) string {
		t.Helper()
		s, err := Compute(kind, version, in)
		require.NoError(t, err)
		return s
	}

	t.Run("Go numeric types convert to float64", func(t *testing.T) {
		want := mustCompute(Hash, 2, []any{42.0})
		for _, n := range []any{42, int8(42), int16(42), int32(42), int64(42), uint(42), uint8(42),
			uint16(42), uint32(42), uint64(42), float32(42), json.Number("42"), json.Number("4.2e1")} {
			require.Equal(t, want, mustCompute(Hash, 2, []any{n}), "%T", n)
		}
		require.Equal(t, mustCompute(Hash, 1, []any{-2.5}), mustCompute(Hash, 1, []any{json.Number("-2.5")}))
	})

	t.Run("every NaN hashes like .NET's NaN", func(t *testing.T) {
		want := mustCompute(Hash, 2, []any{math.Float64frombits(0xFFF8000000000000)})
		require.Equal(t, want, mustCompute(Hash, 2, []any{math.NaN()}))
		require.Equal(t, want, mustCompute(Hash, 2, []any{math.Float64frombits(0x7FF0000000000001)}))
	})

	t.Run("empty components mean undefined", func(t *testing.T) {
		for _, kind := range []Kind{Hash, MultiHash} {
			for _, v := range []int{0, 2} {
				want := mustCompute(kind, v, []any{Undefined})
				require.Equal(t, want, mustCompute(kind, v, nil))
				require.Equal(t, want, mustCompute(kind, v, []any{}))
			}
		}
		require.Equal(t, mustCompute(Hash, 1, []any{Undefined}), mustCompute(Hash, 1, nil))
	})

	t.Run("empty kind means Hash", func(t *testing.T) {
		require.Equal(t, mustCompute(Hash, 2, []any{"x"}), mustCompute("", 2, []any{"x"}))
		require.Equal(t, mustCompute(Hash, 0, []any{"x"}), mustCompute("", 0, []any{"x"}))
	})

	t.Run("null, undefined, false, empty string and zero all differ", func(t *testing.T) {
		for _, v := range []int{1, 2} {
			seen := map[string]any{}
			for _, c := range []any{nil, Undefined, false, "", 0.0, "null", "undefined"} {
				got := mustCompute(Hash, v, []any{c})
				prev, dup := seen[got]
				require.False(t, dup, "version %d: %#v collides with %#v", v, c, prev)
				seen[got] = c
			}
		}
	})

	t.Run("Compute does not modify its input", func(t *testing.T) {
		long := strings.Repeat("x", 300)
		in := []any{long}
		mustCompute(Hash, 1, in)
		require.Equal(t, long, in[0])
	})
}

func TestComputeErrors(t *testing.T) {
	tests := []struct {
		name    string
		kind    Kind
		version int
		in      []any
		errPart string
	}{
		{"struct component", Hash, 2, []any{struct{}{}}, "unsupported type struct {}"},
		{"slice component", Hash, 2, []any{[]any{"a"}}, "unsupported type"},
		{"map component", MultiHash, 2, []any{"a", map[string]any{}}, "component 1"},
		{"pointer component", Hash, 1, []any{new(string)}, "unsupported type *string"},
		{"undefined pointer", Hash, 2, []any{&Undefined}, "unsupported type"},
		{"invalid json.Number", Hash, 2, []any{json.Number("12abc")}, "invalid number"},
		{"overflowing json.Number", Hash, 2, []any{json.Number("1e400")}, "invalid number"},
		{"hash version 3", Hash, 3, []any{"a"}, "unsupported partition key version 3"},
		{"negative version", Hash, -1, []any{"a"}, "unsupported partition key version -1"},
		{"multihash version 1", MultiHash, 1, []any{"a"}, "require version 2"},
		{"multihash version 7", MultiHash, 7, []any{"a"}, "require version 2"},
		{"multihash too deep", MultiHash, 2, []any{"a", "b", "c", "d"}, "at most 3"},
		{"range kind", Kind("Range"), 1, []any{"a"}, `unsupported partition key kind "Range"`},
		{"lowercase kind", Kind("hash"), 2, []any{"a"}, "unsupported partition key kind"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Compute(tc.kind, tc.version, tc.in)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.errPart)
			require.Empty(t, got)
		})
	}
}

func TestTruncateUTF16(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"short", "abc", "abc"},
		{"exact", strings.Repeat("a", 100), strings.Repeat("a", 100)},
		{"ascii", strings.Repeat("a", 101), strings.Repeat("a", 100)},
		{"two-byte runes count once", strings.Repeat("é", 120), strings.Repeat("é", 100)},
		{"pair fits", strings.Repeat("a", 98) + "😀b", strings.Repeat("a", 98) + "😀"},
		{"pair split", strings.Repeat("a", 99) + "😀b", strings.Repeat("a", 99) + "\uFFFD"},
		{"pair at end, not split", strings.Repeat("a", 98) + "😀", strings.Repeat("a", 98) + "😀"},
		{"invalid bytes count once", strings.Repeat("\xff", 101), strings.Repeat("\xff", 100)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, truncateUTF16(tc.in, 100))
		})
	}
}

func TestDocumentKeys(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"a", "b"}, SplitPath("/a/b"))
	require.Equal(t, []string{"a b", "c"}, SplitPath(`/"a b"/c`))
	require.Equal(t, []string{"pk"}, SplitPath("/pk"))

	paths := [][]string{{"pk"}, {"a", "b"}}
	doc := map[string]any{"pk": "x", "a": map[string]any{"b": 2.0}}
	require.Equal(t, []any{"x", 2.0}, Components(doc, paths))
	require.Equal(t, []any{Undefined, Undefined}, Components(map[string]any{"pk": []any{1.0}, "a": "flat"}, paths))

	none, err := Compute(MultiHash, 2, nil)
	require.NoError(t, err)
	got, err := KeyOf(MultiHash, 2, []any{Undefined, Undefined})
	require.NoError(t, err)
	require.Equal(t, none, got, "a document with no component is the none key")
	one, err := KeyOf(MultiHash, 2, []any{"x", Undefined})
	require.NoError(t, err)
	want, err := Compute(MultiHash, 2, []any{"x", Undefined})
	require.NoError(t, err)
	require.Equal(t, want, one)
}
