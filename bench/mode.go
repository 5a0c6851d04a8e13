package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/durafeed/durafeed/engine"
	"github.com/durafeed/durafeed/polling"
	"github.com/durafeed/durafeed/provider"
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
// defaults except for the store's address, and in polling mode po (nil:
// the polling dispatcher's defaults, what every scenario but the stress
// phase uses). This is the only place that maps a Mode onto
// provider.Config.
func (e *Env) providerConfig(container string, m Mode, po *polling.Options) (provider.Config, error) {
	// Its own client and connections: a separate replica.
	cfg := provider.Config{Store: e.acct.StoreOptions(container)}
	switch m {
	case ModePolling:
		cfg.Mode = provider.ModePolling
		cfg.Polling = po
		return cfg, nil
	case ModeEventDriven:
		cfg.Mode = provider.ModeEventDriven
		cfg.EventDriven = engineOptions(e.opts.PeerWake, e.opts.FeedBudget, e.opts.FeedReadsPerChange, e.opts.SiblingWait, e.opts.NoEager)
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

// sweepPeriod is the event-driven replicas' safety sweep period (the
// engine's default: the bench does not set it).
func (e *Env) sweepPeriod() time.Duration { return engine.DefaultSafetySweepInterval }

// engineOptions is the engine configuration of an event-driven replica:
// engine defaults except for the peer wake channel, the feed's spending
// the sibling wait (zero: the engine's defaults) and whether eager
// dispatch is off.
func engineOptions(peerWake bool, budget, perChange float64, siblingWait time.Duration, noEager bool) *engine.Options {
	o := &engine.Options{Feed: &engine.FeedOptions{EmptyReadBudget: budget, ReadsPerChange: perChange}, SiblingWait: siblingWait,
		DisableEager: noEager}
	if peerWake {
		o.PeerWake = &engine.PeerWakeOptions{}
	}
	return o
}

// openProvider opens one replica with the polling dispatcher's defaults.
func (e *Env) openProvider(ctx context.Context, container string, m Mode) (*provider.Provider, error) {
	return e.openProviderWith(ctx, container, m, nil)
}

// openProviderWith opens one replica; in polling mode po configures the
// dispatcher (nil: its defaults). po is ignored in event-driven mode.
func (e *Env) openProviderWith(ctx context.Context, container string, m Mode, po *polling.Options) (*provider.Provider, error) {
	cfg, err := e.providerConfig(container, m, po)
	if err != nil {
		return nil, err
	}
	return provider.New(ctx, cfg)
}
