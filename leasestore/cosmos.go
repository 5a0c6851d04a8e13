package leasestore

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/internal/epk"
)

// statusOf returns the HTTP status of a Cosmos DB error, 0 if it has none
// (transport errors, cancellations).
func statusOf(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

// permanentStatus reports whether a status means retrying cannot help.
func permanentStatus(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden,
		http.StatusNotFound, http.StatusRequestEntityTooLarge:
		return true
	}
	return false
}

// meta is what Run learns from the container once.
type meta struct {
	pkProp    string
	pk        azcosmos.PartitionKey
	feedRange azcosmos.FeedRange
}

// loadMeta reads the container's partition key definition, checks it
// against the options and computes the feed range of the lease partition.
func (s *Store) loadMeta(ctx context.Context) (meta, error) {
	resp, err := s.c.Read(ctx, nil)
	if err != nil {
		return meta{}, fmt.Errorf("leasestore: read container %q: %w", s.c.ID(), err)
	}
	def := resp.ContainerProperties.PartitionKeyDefinition
	if len(def.Paths) != 1 || def.Kind == azcosmos.PartitionKeyKindMultiHash {
		return meta{}, fmt.Errorf("leasestore: container %q has partition key paths %v (kind %q); only a single-path hash key is supported", s.c.ID(), def.Paths, def.Kind)
	}
	if s.opts.PartitionKey != "" && s.opts.PartitionKey != def.Paths[0] {
		return meta{}, fmt.Errorf("leasestore: Options.PartitionKey %q does not match container %q's partition key path %q", s.opts.PartitionKey, s.c.ID(), def.Paths[0])
	}
	prop, err := pkProperty(def.Paths[0])
	if err != nil {
		return meta{}, err
	}
	e, err := epk.Compute(epk.Kind(def.Kind), int(def.Version), []any{s.opts.PartitionKeyValue})
	if err != nil {
		return meta{}, fmt.Errorf("leasestore: effective partition key of %q: %w", s.opts.PartitionKeyValue, err)
	}
	// A range holding only the lease partition's EPK: it lies inside one
	// physical partition, so each change-feed poll is a single request.
	return meta{
		pkProp:    prop,
		pk:        azcosmos.NewPartitionKeyString(s.opts.PartitionKeyValue),
		feedRange: azcosmos.FeedRange{MinInclusive: e, MaxExclusive: e + "FF"},
	}, nil
}
