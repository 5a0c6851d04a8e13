package store

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"
)

// indexingPolicy indexes only what queries filter or sort on; payloads
// (event data, work items, outputs, custom status) are never indexed.
func indexingPolicy() *azcosmos.IndexingPolicy {
	inc := []string{"/type/?", "/instanceId/?", "/dispatchSlot/?", "/visibleAt/?", "/enqueuedAt/?",
		"/lockedUntil/?", "/executionId/?", "/eventId/?", "/status/?", "/sessionId/?", "/ownerId/?",
		"/parentInstanceId/?", "/createdAt/?", "/customStatusVersion/?", "/tag/?", "/lockToken/?",
		"/stagedBy/?", "/lockOwner/?", "/deleting/?", "/deletingAt/?", "/publish/*", "/publish/at/?", "/lastActivity/?", "/activityId/?",
		"/pending/?", "/completedAt/?", "/orchestrationName/?"}
	exc := []string{"/eventData/*", "/workItem/*", "/payload/*", "/output/*", "/customStatus/*", "/*"}
	p := &azcosmos.IndexingPolicy{IndexingMode: azcosmos.IndexingModeConsistent, Automatic: true}
	for _, s := range inc {
		p.IncludedPaths = append(p.IncludedPaths, azcosmos.IncludedPath{Path: s})
	}
	for _, s := range exc {
		p.ExcludedPaths = append(p.ExcludedPaths, azcosmos.ExcludedPath{Path: s})
	}
	asc := azcosmos.CompositeIndexAscending
	p.CompositeIndexes = [][]azcosmos.CompositeIndex{
		{{Path: "/type", Order: asc}, {Path: "/dispatchSlot", Order: asc}, {Path: "/visibleAt", Order: asc}, {Path: "/enqueuedAt", Order: asc}},
		{{Path: "/type", Order: asc}, {Path: "/executionId", Order: asc}, {Path: "/eventId", Order: asc}},
		{{Path: "/type", Order: asc}, {Path: "/status", Order: asc}},
	}
	return p
}

// ContainerProperties returns the container the store expects, with the
// given id: partition key /instanceId (Hash, version 2), an indexing policy
// that indexes only the paths its queries filter or sort on, and time to
// live on with no default (only request records, which carry a ttl,
// expire). The store creates this container when Options.CreateIfMissing
// allows; a deployment that creates it beforehand (the Bicep under
// infra/bicep, or any other tool) must create exactly this. Each call
// returns a fresh value the caller may change.
func ContainerProperties(id string) azcosmos.ContainerProperties {
	ttlOnNoDefault := int32(-1)
	return azcosmos.ContainerProperties{
		ID: id,
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{
			Paths: []string{"/instanceId"}, Kind: azcosmos.PartitionKeyKindHash, Version: 2,
		},
		IndexingPolicy:    indexingPolicy(),
		DefaultTimeToLive: &ttlOnNoDefault,
	}
}

// ensureContainer checks that the container exists and, when allowed,
// creates the database and container, retrying metadata throttling.
// It warns when the container has no time to live: request records then
// never expire (see Options.RequestRetention).
func ensureContainer(ctx context.Context, client *azcosmos.Client, database, container string, create bool, log *zap.Logger) error {
	b := backoff.WithContext(backoff.WithMaxRetries(newMetaBackoff(), 10), ctx)
	return backoff.Retry(func() error {
		err := ensureOnce(ctx, client, database, container, create, log)
		if err == nil || retryableStatus(statusOf(err)) {
			return err
		}
		return backoff.Permanent(err)
	}, b)
}

func newMetaBackoff() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 500 * time.Millisecond
	b.MaxInterval = 8 * time.Second
	b.MaxElapsedTime = 0
	return b
}

func ensureOnce(ctx context.Context, client *azcosmos.Client, database, container string, create bool, log *zap.Logger) error {
	db, err := client.NewDatabase(database)
	if err != nil {
		return err
	}
	cc, err := db.NewContainer(container)
	if err != nil {
		return err
	}
	resp, err := cc.Read(ctx, nil)
	if err == nil {
		if resp.ContainerProperties != nil && resp.ContainerProperties.DefaultTimeToLive == nil {
			log.Warn("the container has no time to live (defaultTtl): request records will not expire; set it to -1",
				zap.String("database", database), zap.String("container", container))
		}
		return nil
	}
	if isStatus(err, http.StatusForbidden) {
		return fmt.Errorf("store: the identity may not read container %q in database %q: check the container's name and that a Cosmos DB data-plane role is assigned on it, its database or the account: %w", container, database, err)
	}
	if !isStatus(err, http.StatusNotFound) {
		return err
	}
	if !create {
		return fmt.Errorf("store: container %q in database %q does not exist (with Entra ID the store does not create it, as data-plane roles cannot: deploy it, or set Options.CreateIfMissing with a key)", container, database)
	}
	if _, err := client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: database}, nil); err != nil && !isStatus(err, http.StatusConflict) {
		return err
	}
	if _, err := db.CreateContainer(ctx, ContainerProperties(container), nil); err != nil && !isStatus(err, http.StatusConflict) {
		return err
	}
	return nil
}
