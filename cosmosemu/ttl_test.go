package cosmosemu_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/stretchr/testify/require"
)

// manualClock is a cosmosemu.Clock that moves only when told to.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func newManualClock() *manualClock { return &manualClock{now: time.Unix(1_700_000_000, 0)} }

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func ttlPtr(n int32) *int32 { return &n }

// ttlContainer starts a server on clk with one physical range per
// container and creates database "db" and container "c" (partition key
// /pk) with the given defaultTtl (nil: TTL off).
func ttlContainer(t *testing.T, clk *manualClock, defaultTTL *int32) (*cosmosemu.Server, *azcosmos.ContainerClient) {
	t.Helper()
	srv := startServer(t, cosmosemu.Options{Clock: clk, PartitionCount: 1})
	client, err := srv.NewClient()
	require.NoError(t, err)
	ctx := context.Background()
	_, err = client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "db"}, nil)
	require.NoError(t, err)
	db, err := client.NewDatabase("db")
	require.NoError(t, err)
	_, err = db.CreateContainer(ctx, azcosmos.ContainerProperties{
		ID:                     "c",
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}, Version: 2},
		DefaultTimeToLive:      defaultTTL,
	}, nil)
	require.NoError(t, err)
	c, err := db.NewContainer("c")
	require.NoError(t, err)
	return srv, c
}

// item is a test document in partition "p"; ttl nil leaves "ttl" out.
func item(t *testing.T, id string, ttl any) []byte {
	t.Helper()
	doc := map[string]any{"id": id, "pk": "p"}
	if ttl != nil {
		doc["ttl"] = ttl
	}
	return mustJSON(t, doc)
}

var pkP = azcosmos.NewPartitionKeyString("p")

func requireVisible(t *testing.T, c *azcosmos.ContainerClient, id string, want bool) {
	t.Helper()
	_, err := c.ReadItem(context.Background(), pkP, id, nil)
	if want {
		require.NoError(t, err, "item %s should be visible", id)
		return
	}
	require.Equal(t, http.StatusNotFound, statusOf(err), "item %s should have expired: %v", id, err)
}

func requireBadRequest(t *testing.T, err error, msg string) {
	t.Helper()
	require.Equal(t, http.StatusBadRequest, statusOf(err), "%v", err)
	require.Contains(t, err.Error(), msg)
}

func TestTTLContainerDefaultRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name      string
		create    *int32
		replaceTo *int32
	}{
		{"off, then on with a default", nil, ttlPtr(5)},
		{"default, then off", ttlPtr(10), nil},
		{"default, then on without a default", ttlPtr(10), ttlPtr(-1)},
		{"on without a default, then a default", ttlPtr(-1), ttlPtr(2147483647)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, c := ttlContainer(t, newManualClock(), tc.create)
			read, err := c.Read(ctx, nil)
			require.NoError(t, err)
			require.Equal(t, tc.create, read.ContainerProperties.DefaultTimeToLive)

			props := *read.ContainerProperties
			props.DefaultTimeToLive = tc.replaceTo
			replaced, err := c.Replace(ctx, props, nil)
			require.NoError(t, err)
			require.Equal(t, tc.replaceTo, replaced.ContainerProperties.DefaultTimeToLive)
			read, err = c.Read(ctx, nil)
			require.NoError(t, err)
			require.Equal(t, tc.replaceTo, read.ContainerProperties.DefaultTimeToLive)

			raw := rawRequest(t, srv, http.MethodGet, "/dbs/db/colls/c", "colls", "dbs/db/colls/c", nil, nil)
			require.Equal(t, http.StatusOK, raw.Status)
			var body map[string]any
			require.NoError(t, json.Unmarshal(raw.Body, &body))
			got, present := body["defaultTtl"]
			if tc.replaceTo == nil {
				require.False(t, present, "TTL off is reported by leaving defaultTtl out: %s", raw.Body)
			} else {
				require.Equal(t, float64(*tc.replaceTo), got)
			}
		})
	}
}

func TestTTLContainerValidation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, c := ttlContainer(t, newManualClock(), ttlPtr(10))
	const msg = "is invalid. Ensure to provide a nonzero positive integer"

	t.Run("create through the SDK", func(t *testing.T) {
		client, err := srv.NewClient()
		require.NoError(t, err)
		db, err := client.NewDatabase("db")
		require.NoError(t, err)
		for _, v := range []int32{0, -2, -100} {
			_, err := db.CreateContainer(ctx, azcosmos.ContainerProperties{
				ID:                     "bad",
				PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}},
				DefaultTimeToLive:      ttlPtr(v),
			}, nil)
			requireBadRequest(t, err, msg)
		}
	})

	t.Run("create on the wire", func(t *testing.T) {
		for _, v := range []string{`0`, `-2`, `2147483648`, `1.5`, `"10"`, `true`, `{}`} {
			body := []byte(`{"id":"bad","partitionKey":{"paths":["/pk"],"kind":"Hash","version":2},"defaultTtl":` + v + `}`)
			r := rawRequest(t, srv, http.MethodPost, "/dbs/db/colls", "colls", "dbs/db", nil, body)
			require.Equal(t, http.StatusBadRequest, r.Status, "defaultTtl %s: %s", v, r.Body)
			code, message := errorCode(t, r.Body)
			require.Equal(t, "BadRequest", code)
			require.Contains(t, message, "The input defaultTtl")
		}
		r := rawRequest(t, srv, http.MethodGet, "/dbs/db/colls/bad", "colls", "dbs/db/colls/bad", nil, nil)
		require.Equal(t, http.StatusNotFound, r.Status, "no rejected container may exist")
		body := []byte(`{"id":"nullttl","partitionKey":{"paths":["/pk"],"kind":"Hash","version":2},"defaultTtl":null}`)
		r = rawRequest(t, srv, http.MethodPost, "/dbs/db/colls", "colls", "dbs/db", nil, body)
		require.Equal(t, http.StatusCreated, r.Status, "null turns TTL off: %s", r.Body)
		require.NotContains(t, string(r.Body), "defaultTtl")
	})

	t.Run("replace", func(t *testing.T) {
		read, err := c.Read(ctx, nil)
		require.NoError(t, err)
		props := *read.ContainerProperties
		props.DefaultTimeToLive = ttlPtr(0)
		_, err = c.Replace(ctx, props, nil)
		requireBadRequest(t, err, msg)
		read, err = c.Read(ctx, nil)
		require.NoError(t, err)
		require.Equal(t, ttlPtr(10), read.ContainerProperties.DefaultTimeToLive, "a rejected replace changes nothing")
	})
}

// ttlStep advances the clock and says whether the item is then visible.
type ttlStep struct {
	advance time.Duration // from the previous step
	visible bool
}

func TestTTLItemExpiry(t *testing.T) {
	t.Parallel()
	type step = ttlStep
	tests := []struct {
		name       string
		defaultTTL *int32
		itemTTL    any // nil: no "ttl" property
		steps      []step
	}{
		{"default n expires n seconds after the write", ttlPtr(10), nil,
			[]step{{0, true}, {9 * time.Second, true}, {time.Second, false}}},
		{"item ttl -1 overrides the default", ttlPtr(10), -1,
			[]step{{10 * time.Second, true}, {1000 * time.Hour, true}}},
		{"item ttl longer than the default", ttlPtr(10), 30,
			[]step{{20 * time.Second, true}, {10 * time.Second, false}}},
		{"item ttl shorter than the default", ttlPtr(10), 5,
			[]step{{4 * time.Second, true}, {time.Second, false}}},
		{"default -1 keeps items without ttl", ttlPtr(-1), nil,
			[]step{{1000 * time.Hour, true}}},
		{"default -1 honours item ttl", ttlPtr(-1), 5,
			[]step{{4 * time.Second, true}, {time.Second, false}}},
		{"TTL off ignores item ttl", nil, 5,
			[]step{{1000 * time.Hour, true}}},
		{"TTL off ignores an invalid item ttl", nil, 0,
			[]step{{1000 * time.Hour, true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := newManualClock()
			_, c := ttlContainer(t, clk, tc.defaultTTL)
			_, err := c.CreateItem(context.Background(), pkP, item(t, "x", tc.itemTTL), nil)
			require.NoError(t, err)
			for _, s := range tc.steps {
				clk.Advance(s.advance)
				requireVisible(t, c, "x", s.visible)
			}
		})
	}
}

// TestTTLWriteRestartsExpiry: the time to live counts from the last write.
func TestTTLWriteRestartsExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newManualClock()
	_, c := ttlContainer(t, clk, ttlPtr(10))
	_, err := c.CreateItem(ctx, pkP, item(t, "x", nil), nil)
	require.NoError(t, err)
	clk.Advance(8 * time.Second)
	_, err = c.UpsertItem(ctx, pkP, item(t, "x", nil), nil)
	require.NoError(t, err)
	clk.Advance(9 * time.Second)
	requireVisible(t, c, "x", true)
	clk.Advance(time.Second)
	requireVisible(t, c, "x", false)
}

// TestTTLExpiredItemInvisible expires one item ("gone") next to one that
// never expires ("kept") and checks every way of reaching it.
func TestTTLExpiredItemInvisible(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name string
		run  func(t *testing.T, c *azcosmos.ContainerClient)
	}{
		{"point read", func(t *testing.T, c *azcosmos.ContainerClient) {
			requireVisible(t, c, "gone", false)
			requireVisible(t, c, "kept", true)
		}},
		{"single-partition and cross-partition queries", func(t *testing.T, c *azcosmos.ContainerClient) {
			for _, pk := range []azcosmos.PartitionKey{pkP, azcosmos.NewPartitionKey()} {
				docs, _, err := collect(t, c.NewQueryItemsPager("SELECT * FROM c", pk, nil))
				require.NoError(t, err)
				require.Equal(t, []string{"kept"}, ids(docs))
			}
		}},
		{"aggregate", func(t *testing.T, c *azcosmos.ContainerClient) {
			pager := c.NewQueryItemsPager("SELECT VALUE COUNT(1) FROM c", pkP, nil)
			page, err := pager.NextPage(ctx)
			require.NoError(t, err)
			require.Equal(t, []string{"1"}, rawItems(page.Items))
		}},
		{"read many", func(t *testing.T, c *azcosmos.ContainerClient) {
			res, err := c.ReadManyItems(ctx, []azcosmos.ItemIdentity{{ID: "gone", PartitionKey: pkP}, {ID: "kept", PartitionKey: pkP}}, nil)
			require.NoError(t, err)
			require.Len(t, res.Items, 1)
			require.Contains(t, string(res.Items[0]), `"id":"kept"`)
		}},
		{"change feed", func(t *testing.T, c *azcosmos.ContainerClient) {
			resp, err := c.ReadChangeFeed(ctx, &azcosmos.ChangeFeedOptions{FeedRange: &azcosmos.FeedRange{MinInclusive: "", MaxExclusive: "FF"}})
			require.NoError(t, err)
			require.Equal(t, []string{`"id":"kept"`}, idFragments(resp.Items))
		}},
		{"replace, patch and delete answer 404", func(t *testing.T, c *azcosmos.ContainerClient) {
			_, err := c.ReplaceItem(ctx, pkP, "gone", item(t, "gone", nil), nil)
			require.Equal(t, http.StatusNotFound, statusOf(err), "replace: %v", err)
			ops := azcosmos.PatchOperations{}
			ops.AppendSet("/v", 1)
			_, err = c.PatchItem(ctx, pkP, "gone", ops, nil)
			require.Equal(t, http.StatusNotFound, statusOf(err), "patch: %v", err)
			_, err = c.DeleteItem(ctx, pkP, "gone", nil)
			require.Equal(t, http.StatusNotFound, statusOf(err), "delete: %v", err)
		}},
		{"create of the same id succeeds", func(t *testing.T, c *azcosmos.ContainerClient) {
			resp, err := c.CreateItem(ctx, pkP, item(t, "gone", -1), nil)
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, resp.RawResponse.StatusCode)
			requireVisible(t, c, "gone", true)
		}},
		{"upsert of the same id creates", func(t *testing.T, c *azcosmos.ContainerClient) {
			resp, err := c.UpsertItem(ctx, pkP, item(t, "gone", nil), nil)
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, resp.RawResponse.StatusCode)
			requireVisible(t, c, "gone", true)
		}},
		{"batch", func(t *testing.T, c *azcosmos.ContainerClient) {
			b := c.NewTransactionalBatch(pkP)
			b.ReadItem("gone", nil)
			res, err := c.ExecuteTransactionalBatch(ctx, b, nil)
			require.NoError(t, err)
			require.False(t, res.Success)
			require.Equal(t, int32(http.StatusNotFound), res.OperationResults[0].StatusCode)

			b = c.NewTransactionalBatch(pkP)
			b.CreateItem(item(t, "gone", nil), nil)
			b.ReadItem("kept", nil)
			res, err = c.ExecuteTransactionalBatch(ctx, b, nil)
			require.NoError(t, err)
			require.True(t, res.Success)
			require.Equal(t, int32(http.StatusCreated), res.OperationResults[0].StatusCode)
			requireVisible(t, c, "gone", true)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := newManualClock()
			_, c := ttlContainer(t, clk, ttlPtr(10))
			_, err := c.CreateItem(ctx, pkP, item(t, "gone", nil), nil)
			require.NoError(t, err)
			_, err = c.CreateItem(ctx, pkP, item(t, "kept", -1), nil)
			require.NoError(t, err)
			clk.Advance(10 * time.Second)
			tc.run(t, c)
		})
	}
}

func rawItems(items [][]byte) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = string(it)
	}
	return out
}

// idFragments returns the `"id":"..."` fragment of each stored body.
func idFragments(items [][]byte) []string {
	out := []string{}
	for _, it := range items {
		var d map[string]any
		if json.Unmarshal(it, &d) == nil {
			out = append(out, `"id":"`+d["id"].(string)+`"`)
		}
	}
	return out
}

func TestTTLPatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name       string
		defaultTTL *int32
		patch      func(*azcosmos.PatchOperations)
		steps      []ttlStep // from the patch, which leaves ttl 1000 otherwise
	}{
		{"set /ttl on a container without a default", ttlPtr(-1),
			func(p *azcosmos.PatchOperations) { p.AppendSet("/ttl", 5) },
			[]ttlStep{{4 * time.Second, true}, {time.Second, false}}},
		{"set /ttl -1 overrides the default", ttlPtr(10),
			func(p *azcosmos.PatchOperations) { p.AppendSet("/ttl", -1) },
			[]ttlStep{{1000 * time.Hour, true}}},
		{"remove /ttl falls back to the default", ttlPtr(10),
			func(p *azcosmos.PatchOperations) { p.AppendRemove("/ttl") },
			[]ttlStep{{9 * time.Second, true}, {time.Second, false}}},
		{"incr /ttl", ttlPtr(-1),
			func(p *azcosmos.PatchOperations) { p.AppendIncrement("/ttl", 10) },
			[]ttlStep{{1009 * time.Second, true}, {time.Second, false}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := newManualClock()
			_, c := ttlContainer(t, clk, tc.defaultTTL)
			_, err := c.CreateItem(ctx, pkP, item(t, "x", 1000), nil)
			require.NoError(t, err)
			ops := azcosmos.PatchOperations{}
			tc.patch(&ops)
			_, err = c.PatchItem(ctx, pkP, "x", ops, nil)
			require.NoError(t, err)
			for _, s := range tc.steps {
				clk.Advance(s.advance)
				requireVisible(t, c, "x", s.visible)
			}
		})
	}

	t.Run("set /ttl 0 is rejected", func(t *testing.T) {
		t.Parallel()
		_, c := ttlContainer(t, newManualClock(), ttlPtr(-1))
		_, err := c.CreateItem(ctx, pkP, item(t, "x", nil), nil)
		require.NoError(t, err)
		ops := azcosmos.PatchOperations{}
		ops.AppendSet("/ttl", 0)
		_, err = c.PatchItem(ctx, pkP, "x", ops, nil)
		requireBadRequest(t, err, "The input ttl '0' is invalid")
	})
}

// outcome is the status and message of an SDK call's error (200 for none).
func outcome(err error) (int, string) {
	if err == nil {
		return http.StatusOK, ""
	}
	return statusOf(err), err.Error()
}

func TestTTLItemValidation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	invalid := []any{0, -2, 1.5, 2147483648.0, "10", true, nil}
	write := []struct {
		name string
		id   string // the item written; "x" exists beforehand
		do   func(c *azcosmos.ContainerClient, body []byte) (int, string)
	}{
		{"create", "", func(c *azcosmos.ContainerClient, body []byte) (int, string) {
			_, err := c.CreateItem(ctx, pkP, body, nil)
			return outcome(err)
		}},
		{"upsert", "x", func(c *azcosmos.ContainerClient, body []byte) (int, string) {
			_, err := c.UpsertItem(ctx, pkP, body, nil)
			return outcome(err)
		}},
		{"replace", "x", func(c *azcosmos.ContainerClient, body []byte) (int, string) {
			_, err := c.ReplaceItem(ctx, pkP, "x", body, nil)
			return outcome(err)
		}},
		{"batch upsert", "x", func(c *azcosmos.ContainerClient, body []byte) (int, string) {
			b := c.NewTransactionalBatch(pkP)
			b.UpsertItem(body, nil)
			res, err := c.ExecuteTransactionalBatch(ctx, b, nil)
			if err != nil || res.Success {
				return outcome(err)
			}
			return int(res.OperationResults[0].StatusCode), ""
		}},
	}
	for _, ttlOn := range []bool{true, false} {
		var def *int32
		name := "TTL off: accepted and kept"
		if ttlOn {
			def, name = ttlPtr(-1), "TTL on: 400"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, c := ttlContainer(t, newManualClock(), def)
			_, err := c.CreateItem(ctx, pkP, item(t, "x", nil), nil)
			require.NoError(t, err)
			for _, w := range write {
				for i, v := range invalid {
					id := w.id
					if id == "" {
						id = "new" + strings.Repeat("+", i)
					}
					status, msg := w.do(c, mustJSON(t, map[string]any{"id": id, "pk": "p", "ttl": v}))
					if ttlOn {
						require.Equal(t, http.StatusBadRequest, status, "%s with ttl %v: %s", w.name, v, msg)
						if msg != "" { // batch results carry no message
							require.Contains(t, msg, "The input ttl '", "%s with ttl %v", w.name, v)
						}
						continue
					}
					require.Less(t, status, 300, "%s with ttl %v: %s", w.name, v, msg)
					read, err := c.ReadItem(ctx, pkP, id, nil)
					require.NoError(t, err)
					var doc map[string]any
					require.NoError(t, json.Unmarshal(read.Value, &doc))
					require.Contains(t, doc, "ttl", "an ordinary property when TTL is off")
					require.JSONEq(t, string(mustJSON(t, v)), string(mustJSON(t, doc["ttl"])))
				}
			}
			requireVisible(t, c, "x", true)
		})
	}
}

// TestTTLContainerReplaceAppliesAtOnce: turning TTL on (or shortening the
// default) expires existing items measured from their _ts.
func TestTTLContainerReplaceAppliesAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newManualClock()
	_, c := ttlContainer(t, clk, nil)
	for _, doc := range [][]byte{item(t, "plain", nil), item(t, "short", 5), item(t, "forever", -1)} {
		_, err := c.CreateItem(ctx, pkP, doc, nil)
		require.NoError(t, err)
	}
	clk.Advance(100 * time.Second)
	for _, id := range []string{"plain", "short", "forever"} {
		requireVisible(t, c, id, true)
	}
	setDefault := func(v *int32) {
		read, err := c.Read(ctx, nil)
		require.NoError(t, err)
		props := *read.ContainerProperties
		props.DefaultTimeToLive = v
		_, err = c.Replace(ctx, props, nil)
		require.NoError(t, err)
	}
	setDefault(ttlPtr(1000))
	requireVisible(t, c, "plain", true)
	requireVisible(t, c, "short", false)
	requireVisible(t, c, "forever", true)
	setDefault(ttlPtr(50))
	requireVisible(t, c, "plain", false)
	requireVisible(t, c, "forever", true)

	// A write purges the expired items; a new one still expires on time.
	_, err := c.CreateItem(ctx, pkP, item(t, "new", nil), nil)
	require.NoError(t, err)
	clk.Advance(49 * time.Second)
	requireVisible(t, c, "new", true)
	clk.Advance(time.Second)
	requireVisible(t, c, "new", false)
	docs, _, err := collect(t, c.NewQueryItemsPager("SELECT * FROM c", pkP, nil))
	require.NoError(t, err)
	require.Equal(t, []string{"forever"}, ids(docs))
}

// TestTTLAcrossSplit: a split carries each item's time to live to the
// child that takes it.
func TestTTLAcrossSplit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newManualClock()
	srv, c := ttlContainer(t, clk, ttlPtr(10))
	var all []string
	for i := 0; i < 20; i++ {
		pk := "k" + strings.Repeat("x", i)
		for _, d := range []struct {
			id  string
			ttl any
		}{{"d", nil}, {"f", -1}, {"l", 30}} {
			id := d.id + pk
			doc := map[string]any{"id": id, "pk": pk}
			if d.ttl != nil {
				doc["ttl"] = d.ttl
			}
			_, err := c.CreateItem(ctx, azcosmos.NewPartitionKeyString(pk), mustJSON(t, doc), nil)
			require.NoError(t, err)
			all = append(all, id)
		}
	}
	clk.Advance(5 * time.Second)
	kids, err := srv.SplitPartition(ctx, "db", "c", "0")
	require.NoError(t, err)
	require.Len(t, kids, 2)

	visible := func() []string {
		docs, _, err := collect(t, c.NewQueryItemsPager("SELECT c.id FROM c", azcosmos.NewPartitionKey(), nil))
		require.NoError(t, err)
		out := ids(docs)
		sort.Strings(out)
		return out
	}
	want := func(prefixes ...string) []string {
		var out []string
		for _, id := range all {
			for _, p := range prefixes {
				if strings.HasPrefix(id, p) {
					out = append(out, id)
				}
			}
		}
		sort.Strings(out)
		return out
	}
	require.Equal(t, want("d", "f", "l"), visible())
	clk.Advance(5 * time.Second)
	require.Equal(t, want("f", "l"), visible())
	// Writes on both children purge; expiry continues on time.
	for i := 0; i < 20; i++ {
		pk := "k" + strings.Repeat("x", i)
		_, err := c.UpsertItem(ctx, azcosmos.NewPartitionKeyString(pk), mustJSON(t, map[string]any{"id": "w" + pk, "pk": pk, "ttl": -1}), nil)
		require.NoError(t, err)
		all = append(all, "w"+pk)
	}
	clk.Advance(20 * time.Second)
	require.Equal(t, want("f", "w"), visible())
}
