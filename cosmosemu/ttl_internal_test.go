package cosmosemu

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"
)

// stepClock is a Clock that moves only when told to.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestTTLPurgeReclaimsStorage checks that expired items leave storage on
// the next write to their partition, and that the expiry heap stays
// bounded under rewrites and follows changes of the container's setting.
func TestTTLPurgeReclaimsStorage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := &stepClock{now: time.Unix(1_700_000_000, 0)}
	srv, err := Start(ctx, Options{Clock: clk, PartitionCount: 1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	client, err := srv.NewClient()
	require.NoError(t, err)
	_, err = client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "db"}, nil)
	require.NoError(t, err)
	db, err := client.NewDatabase("db")
	require.NoError(t, err)
	ten := int32(10)
	props := azcosmos.ContainerProperties{ID: "c", PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}, Version: 2}, DefaultTimeToLive: &ten}
	_, err = db.CreateContainer(ctx, props, nil)
	require.NoError(t, err)
	cc, err := db.NewContainer("c")
	require.NoError(t, err)
	coll, aerr := srv.store.container("db", "c")
	require.Nil(t, aerr)
	p := coll.partitions()[0]
	stats := func() (docs, scheduled int) {
		p.mu.RLock()
		defer p.mu.RUnlock()
		return p.docs, len(p.expiries)
	}
	pk := azcosmos.NewPartitionKeyString("p")
	upsert := func(id string, ttl int) {
		t.Helper()
		doc := `{"id":"` + id + `","pk":"p"}`
		if ttl != 0 {
			doc = `{"id":"` + id + `","pk":"p","ttl":` + strconv.Itoa(ttl) + `}`
		}
		_, err := cc.UpsertItem(ctx, pk, []byte(doc), nil)
		require.NoError(t, err)
	}

	for i := 0; i < 50; i++ {
		upsert(strconv.Itoa(i), 0)
	}
	upsert("forever", -1)
	docs, scheduled := stats()
	require.Equal(t, 51, docs)
	require.Equal(t, 50, scheduled, "items that never expire are not scheduled")

	clk.advance(10 * time.Second)
	_, err = cc.ReadItem(ctx, pk, "0", nil)
	require.Error(t, err)
	docs, _ = stats()
	require.Equal(t, 51, docs, "reads hide expired items without purging")

	upsert("w", 0)
	docs, scheduled = stats()
	require.Equal(t, 2, docs, "a write purges what expired")
	require.Equal(t, 1, scheduled)

	for i := 0; i < 500; i++ {
		upsert("w", 0)
	}
	docs, scheduled = stats()
	require.Equal(t, 2, docs)
	require.LessOrEqual(t, scheduled, 2*docs+64+1, "superseded versions do not accumulate")

	// Turning the default off-by-default (-1) reschedules on the next write:
	// only items with their own ttl remain scheduled.
	read, err := cc.Read(ctx, nil)
	require.NoError(t, err)
	replaced := *read.ContainerProperties
	minusOne := int32(-1)
	replaced.DefaultTimeToLive = &minusOne
	_, err = cc.Replace(ctx, replaced, nil)
	require.NoError(t, err)
	upsert("short", 5)
	docs, scheduled = stats()
	require.Equal(t, 3, docs)
	require.Equal(t, 1, scheduled)
	clk.advance(5 * time.Second)
	upsert("w", 0)
	docs, scheduled = stats()
	require.Equal(t, 2, docs, "the item with its own ttl expired and was purged")
	require.Equal(t, 0, scheduled)

	// TTL off: nothing is scheduled, nothing is purged.
	replaced.DefaultTimeToLive = nil
	_, err = cc.Replace(ctx, replaced, nil)
	require.NoError(t, err)
	upsert("short", 1)
	clk.advance(time.Hour)
	upsert("w", 0)
	docs, scheduled = stats()
	require.Equal(t, 3, docs)
	require.Equal(t, 0, scheduled)
}
