package changefeed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/cosmosemu"
)

// Example reads a whole container in a single process, without a lease
// store, against an in-process emulator.
func Example() {
	ctx := context.Background()
	srv, _ := cosmosemu.Start(ctx, cosmosemu.Options{})
	defer srv.Close()
	client, _ := srv.NewClient()
	defer client.Close()
	_, _ = client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "shop"}, nil)
	db, _ := client.NewDatabase("shop")
	_, _ = db.CreateContainer(ctx, azcosmos.ContainerProperties{ID: "orders",
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/customer"}, Version: 2}}, nil)
	orders, _ := db.NewContainer("orders")
	for i, customer := range []string{"ada", "grace", "alan"} {
		item := fmt.Sprintf(`{"id":"order-%d","customer":%q}`, i, customer)
		_, _ = orders.CreateItem(ctx, azcosmos.NewPartitionKeyString(customer), []byte(item), nil)
	}

	// One lease over the whole container; checkpoints kept in memory here
	// (pass a save function to persist them).
	lease := changefeed.NewLocalLease("orders", changefeed.FullRange, "", nil)
	var mu sync.Mutex
	var seen []string
	all := make(chan struct{})
	p, err := changefeed.New(orders, changefeed.StaticSource(lease), func(ctx context.Context, b changefeed.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		for _, raw := range b.Documents {
			var o struct {
				ID       string `json:"id"`
				Customer string `json:"customer"`
			}
			if err := json.Unmarshal(raw, &o); err != nil {
				return err // retried; a poison document needs the handler's own policy
			}
			seen = append(seen, o.ID+" for "+o.Customer)
		}
		if len(seen) == 3 {
			close(all)
		}
		return nil
	}, changefeed.Options{})
	if err != nil {
		panic(err)
	}
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	<-all
	_ = p.Stop(ctx)
	<-done

	slices.Sort(seen)
	for _, s := range seen {
		fmt.Println(s)
	}
	// Output:
	// order-0 for ada
	// order-1 for grace
	// order-2 for alan
}
