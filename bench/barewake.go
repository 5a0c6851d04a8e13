package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/durafeed/durafeed/internal/clock"
	"github.com/durafeed/durafeed/internal/epk"
)

// bareWakeTimeout bounds one bare wake: a document the reader has not
// locked by then is an error, not a wait without end.
const bareWakeTimeout = 10 * time.Second

// measureBareWakes runs n bare feed-woken wakes on container cc (partition
// key path /pk, hash version 2) and returns their latencies: a writer
// (its own client, w) creates a document at a random moment; a reader
// reads the change feed of the document's physical partition every period
// d, on due times as the engine's warm readers do, and on seeing the
// document at once commits a transactional batch creating two documents
// (the least a lock can write). A latency is the batch's return minus the
// create's return, as the scenarios measure a wake: no dispatcher, no
// handler, no lease, only what any feed-woken wake must do. The reader is
// a goroutine of this call, stopped before it returns.
func measureBareWakes(ctx context.Context, w, cc *azcosmos.ContainerClient, d time.Duration, n int, rng *rand.Rand) ([]time.Duration, error) {
	frs, err := cc.ReadFeedRanges(ctx, nil)
	if err != nil {
		return nil, err
	}
	if len(frs) == 0 {
		return nil, errors.New("no feed ranges")
	}
	fr := frs[0]
	first := epk.Range{Min: fr.MinInclusive, Max: fr.MaxExclusive}
	if first.Max == "" {
		first.Max = epk.MaxExclusive
	}
	pkv := ""
	for i := 0; pkv == "" && i < 10_000; i++ {
		v := fmt.Sprintf("bare-%d", i)
		key, err := epk.Compute(epk.Hash, 2, []any{v})
		if err != nil {
			return nil, err
		}
		if first.Contains(key) {
			pkv = v
		}
	}
	if pkv == "" {
		return nil, errors.New("no partition key value falls in the first feed range")
	}
	pk := azcosmos.NewPartitionKeyString(pkv)

	// Position the reader at the feed's current end before any write.
	resp, err := cc.ReadChangeFeed(ctx, &azcosmos.ChangeFeedOptions{FeedRange: &fr, MaxItemCount: 100})
	if err != nil {
		return nil, err
	}
	cont := resp.ContinuationToken
	for len(resp.Items) > 0 {
		if resp, err = cc.ReadChangeFeed(ctx, &azcosmos.ChangeFeedOptions{Continuation: &cont, MaxItemCount: 100}); err != nil {
			return nil, err
		}
		cont = resp.ContinuationToken
	}

	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	type lock struct {
		id string
		at time.Time
	}
	locked := make(chan lock, 1) // the documents the reader locked, in order
	var rerr error
	wg.Go(func() {
		defer close(locked)
		due := time.Now()
		for rctx.Err() == nil {
			due = due.Add(d)
			if !clock.Sleep(rctx, time.Until(due)) {
				return
			}
			resp, err := cc.ReadChangeFeed(rctx, &azcosmos.ChangeFeedOptions{Continuation: &cont, MaxItemCount: 100})
			if err != nil {
				if rctx.Err() == nil {
					rerr = err
				}
				return
			}
			cont = resp.ContinuationToken
			for _, it := range resp.Items {
				var doc struct {
					ID string `json:"id"`
				}
				if json.Unmarshal(it, &doc) != nil || !strings.HasPrefix(doc.ID, "w-") {
					continue
				}
				b := cc.NewTransactionalBatch(pk)
				b.CreateItem(fmt.Appendf(nil, `{"id":"l%s","instanceId":%q,"pad":%q}`, doc.ID, pkv, strings.Repeat("x", 500)), nil)
				b.CreateItem(fmt.Appendf(nil, `{"id":"m%s","instanceId":%q,"pad":%q}`, doc.ID, pkv, strings.Repeat("x", 300)), nil)
				res, err := cc.ExecuteTransactionalBatch(rctx, b, nil)
				if err == nil && !res.Success {
					err = fmt.Errorf("bare batch for %s failed", doc.ID)
				}
				if err != nil {
					if rctx.Err() == nil {
						rerr = err
					}
					return
				}
				select {
				case locked <- lock{doc.ID, time.Now()}:
				case <-rctx.Done():
					return
				}
			}
			if due.Before(time.Now()) {
				due = time.Now() // never catch up with missed periods
			}
		}
	})
	defer func() {
		stop()
		for range locked {
		}
		wg.Wait()
	}()

	out := make([]time.Duration, 0, n)
	for i := range n {
		// A pause as wide as the reader's period puts the write at a
		// uniformly random phase of it, so the wait for the next read is
		// uniform over one period, as the scenarios' wide pauses make it.
		if !clock.Sleep(ctx, d/4+time.Duration(rng.Int64N(int64(d)))) {
			return out, ctx.Err()
		}
		id := fmt.Sprintf("w-%d", i)
		if _, err := w.CreateItem(ctx, pk, fmt.Appendf(nil, `{"id":%q,"instanceId":%q}`, id, pkv), nil); err != nil {
			return out, err
		}
		wrote := time.Now()
		timeout := time.NewTimer(bareWakeTimeout)
		select {
		case <-timeout.C:
			return out, fmt.Errorf("bare reader did not see %s within %v", id, bareWakeTimeout)
		case got, ok := <-locked:
			timeout.Stop()
			if !ok {
				stop()
				wg.Wait()
				if rerr != nil {
					return out, fmt.Errorf("bare reader: %w", rerr)
				}
				return out, ctx.Err()
			}
			if got.id != id {
				return out, fmt.Errorf("bare reader locked %s, want %s", got.id, id)
			}
			out = append(out, got.at.Sub(wrote))
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
	return out, nil
}
