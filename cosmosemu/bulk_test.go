package cosmosemu_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/stretchr/testify/require"
)

// keysInRange returns n keys "<prefix><i>" whose EPKs lie in range idx.
func keysInRange(tb testing.TB, ranges []cosmosemu.PartitionKeyRange, idx int, prefix string, n int) []string {
	tb.Helper()
	var out []string
	for i := 0; len(out) < n; i++ {
		require.Less(tb, i, 100000)
		k := prefix + strconv.Itoa(i)
		if rangeIndex(ranges, keyEPK(tb, k)) == idx {
			out = append(out, k)
		}
	}
	return out
}

// bulkRequest sends operations as the SDKs' bulk executors do: a
// non-atomic batch addressed by partition key range.
func bulkRequest(tb testing.TB, srv *cosmosemu.Server, rangeID, continueOnError string, ops []map[string]any) rawResponse {
	tb.Helper()
	return rawRequest(tb, srv, http.MethodPost, "/dbs/db/colls/c/docs", "docs", "dbs/db/colls/c", map[string]string{
		"Content-Type":                        "application/json",
		"x-ms-cosmos-is-batch-request":        "True",
		"x-ms-cosmos-batch-atomic":            "False",
		"x-ms-cosmos-batch-continue-on-error": continueOnError,
		"x-ms-documentdb-partitionkeyrangeid": rangeID,
	}, mustJSON(tb, ops))
}

type bulkResult struct {
	StatusCode    int             `json:"statusCode"`
	SubStatusCode int             `json:"subStatusCode"`
	RequestCharge float64         `json:"requestCharge"`
	ETag          string          `json:"eTag"`
	ResourceBody  json.RawMessage `json:"resourceBody"`
}

func TestBulkByPartitionKeyRange(t *testing.T) {
	t.Parallel()
	srv, _, c := newContainer(t)
	ctx := context.Background()
	ranges, err := srv.PartitionKeyRanges("db", "c")
	require.NoError(t, err)
	require.Greater(t, len(ranges), 1)
	in := keysInRange(t, ranges, 0, "in", 8)
	out := keysInRange(t, ranges, 1, "out", 1)[0]
	_, err = c.CreateItem(ctx, azcosmos.NewPartitionKeyString(in[0]), mustJSON(t, map[string]any{"id": "dup", "pk": in[0]}), nil)
	require.NoError(t, err)

	// create builds an operation with the key as the SDKs send it: the JSON
	// text of the key array in a JSON string (asArray: the array itself).
	create := func(id, pk string, asArray bool) map[string]any {
		var key any = `["` + pk + `"]`
		if asArray {
			key = []string{pk}
		}
		return map[string]any{"operationType": "Create", "id": id, "partitionKey": key, "resourceBody": map[string]any{"id": id, "pk": pk}}
	}
	tests := []struct {
		name            string
		ops             []map[string]any
		continueOnError string
		status          int
		want            []int // per-operation status
		wantSub         map[int]int
		exists          map[string]string // id -> pk expected present
		absent          map[string]string // id -> pk expected absent
	}{
		{
			name: "all succeed", continueOnError: "True", status: http.StatusOK,
			ops:    []map[string]any{create("a1", in[1], false), create("a2", in[2], true), {"operationType": "Upsert", "partitionKey": `["` + in[3] + `"]`, "resourceBody": map[string]any{"id": "a3", "pk": in[3]}}, {"operationType": "Read", "id": "dup", "partitionKey": `["` + in[0] + `"]`}},
			want:   []int{201, 201, 201, 200},
			exists: map[string]string{"a1": in[1], "a2": in[2], "a3": in[3]},
		},
		{
			name: "a conflict fails only its operation", continueOnError: "True", status: http.StatusMultiStatus,
			ops:    []map[string]any{create("b1", in[4], false), create("dup", in[0], false), create("b2", in[5], false)},
			want:   []int{201, 409, 201},
			exists: map[string]string{"b1": in[4], "b2": in[5]},
		},
		{
			name: "an operation outside the range answers 410/1002", continueOnError: "True", status: http.StatusMultiStatus,
			ops:     []map[string]any{create("c1", out, false), create("c2", in[6], false)},
			want:    []int{410, 201},
			wantSub: map[int]int{0: 1002},
			exists:  map[string]string{"c2": in[6]},
			absent:  map[string]string{"c1": out},
		},
		{
			name: "without continue-on-error the rest is not attempted", continueOnError: "False", status: http.StatusMultiStatus,
			ops:    []map[string]any{create("d1", in[7], false), create("dup", in[0], false), create("d2", in[7], false)},
			want:   []int{201, 409, 424},
			exists: map[string]string{"d1": in[7]},
			absent: map[string]string{"d2": in[7]},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := bulkRequest(t, srv, ranges[0].ID, tc.continueOnError, tc.ops)
			require.Equal(t, tc.status, r.Status, string(r.Body))
			var res []bulkResult
			require.NoError(t, json.Unmarshal(r.Body, &res), string(r.Body))
			require.Len(t, res, len(tc.ops))
			var sum float64
			for i, op := range res {
				require.Equal(t, tc.want[i], op.StatusCode, "operation %d: %s", i, string(r.Body))
				require.Equal(t, tc.wantSub[i], op.SubStatusCode, "operation %d", i)
				if op.StatusCode < 300 {
					require.NotEmpty(t, op.ETag, "operation %d", i)
					require.NotEmpty(t, op.ResourceBody, "operation %d", i)
				}
				sum += op.RequestCharge
			}
			charge, err := strconv.ParseFloat(r.Header.Get("x-ms-request-charge"), 64)
			require.NoError(t, err)
			require.InDelta(t, sum, charge, 0.01, "the charge is the operations' sum")
			for id, pk := range tc.exists {
				_, err := c.ReadItem(ctx, azcosmos.NewPartitionKeyString(pk), id, nil)
				require.NoError(t, err, id)
			}
			for id, pk := range tc.absent {
				_, err := c.ReadItem(ctx, azcosmos.NewPartitionKeyString(pk), id, nil)
				require.Equal(t, http.StatusNotFound, statusOf(err), id)
			}
		})
	}

	t.Run("more than 100 operations", func(t *testing.T) {
		ops := make([]map[string]any, 101)
		for i := range ops {
			ops[i] = map[string]any{"operationType": "Read", "id": "dup", "partitionKey": `["` + in[0] + `"]`}
		}
		r := bulkRequest(t, srv, ranges[0].ID, "True", ops)
		require.Equal(t, http.StatusBadRequest, r.Status)
		_, msg := errorCode(t, r.Body)
		require.Contains(t, msg, "Batch request has more operations than what is supported.")
		r = bulkRequest(t, srv, ranges[0].ID, "True", ops[:100])
		require.Equal(t, http.StatusOK, r.Status, "100 operations are accepted")
	})

	t.Run("a range that does not exist answers 410/1002", func(t *testing.T) {
		r := bulkRequest(t, srv, "999", "True", []map[string]any{create("e1", in[0], false)})
		require.Equal(t, http.StatusGone, r.Status)
		require.Equal(t, "1002", r.Header.Get("x-ms-substatus"))
	})
}
