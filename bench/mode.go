package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/durafeed/durafeed/engine"
	"github.com/durafeed/durafeed/provider"
	"github.com/durafeed/durafeed/store"
)

// Mode is the provider's dispatch mode under test.
type Mode string

// The modes compared.
const (
	// ModeEventDriven is the provider's change-feed mode: fetches long-poll
	// on wakeups.
	ModeEventDriven Mode = "event-driven"
	// ModePolling is the seeds' algorithm: a fetch queries and returns nil
	// at once when there is no work; the caller sleeps and polls again.
	ModePolling Mode = "polling"
)

// Modes lists every mode, event-driven first.
var Modes = []Mode{ModeEventDriven, ModePolling}

// ParseMode parses a mode name.
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("bench: unknown mode %q (want %q or %q)", s, ModeEventDriven, ModePolling)
}

// providerConfig is the configuration of one replica in mode m: provider
// defaults except for the store's address. This is the only place that
// maps a Mode onto provider.Config.
func (e *Env) providerConfig(container string, m Mode) (provider.Config, error) {
	cfg := provider.Config{Store: store.Options{
		Endpoint:      e.Server.Endpoint(),
		Key:           e.Server.Key(),
		Database:      Database,
		Container:     container,
		ClientOptions: e.Server.ClientOptions(), // its own connections: a separate replica
	}}
	switch m {
	case ModePolling:
		cfg.Mode = provider.ModePolling
		return cfg, nil
	case ModeEventDriven:
		cfg.Mode = provider.ModeEventDriven
		cfg.EventDriven = &engine.Options{Feed: &engine.FeedOptions{EmptyReadBudget: e.opts.FeedBudget, ReadsPerChange: e.opts.FeedReadsPerChange}}
		if e.opts.PeerWake {
			cfg.EventDriven.PeerWake = &engine.PeerWakeOptions{}
		}
		return cfg, nil
	}
	return cfg, fmt.Errorf("bench: unknown mode %q", m)
}

// clientMode is the mode of the separate provider instance that enqueues
// in the cross-replica scenarios: the fetcher's. It never fetches, and an
// event-driven provider joins the lease group (takes slots) only on its
// first fetch, so it stays a plain client of the same container.
func clientMode(m Mode) Mode { return m }

// activeFeedDelay is the delay between change-feed reads while changes
// flow, with default settings (the latency target is this plus five round
// trips).
func activeFeedDelay() time.Duration { return engine.DefaultFeedActiveDelay }

// feedBudget is the empty-read budget an event-driven replica runs with
// when configured with b.
func feedBudget(b float64) float64 {
	if b == 0 {
		return engine.DefaultFeedEmptyReadBudget
	}
	return b
}

// readsPerChange is the ReadsPerChange an event-driven replica runs with
// when configured with m (engine defaults: none with the peer wake
// channel on).
func readsPerChange(m float64, peerWake bool) float64 {
	switch {
	case m < 0:
		return 0
	case m > 0:
		return m
	case peerWake:
		return 0
	}
	return engine.DefaultFeedReadsPerChange
}

// openProvider opens one replica.
func (e *Env) openProvider(ctx context.Context, container string, m Mode) (*provider.Provider, error) {
	cfg, err := e.providerConfig(container, m)
	if err != nil {
		return nil, err
	}
	return provider.New(ctx, cfg)
}
