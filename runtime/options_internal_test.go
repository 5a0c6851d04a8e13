package runtime

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/internal/memprovider"
)

// pacedProvider states a poll interval (durable.PollPacer).
type pacedProvider struct {
	durable.Provider
	every time.Duration
}

func (p pacedProvider) PollInterval() time.Duration { return p.every }

// TestIdleBackoffDefault: the pause after an empty fetch defaults to the
// provider's poll interval when it states one, to 100 ms otherwise; an
// explicit IdleBackoff wins.
func TestIdleBackoffDefault(t *testing.T) {
	t.Parallel()
	mem := memprovider.NewStore().Open()
	cases := []struct {
		name string
		p    durable.Provider
		set  time.Duration
		want time.Duration
	}{
		{"no pacer", mem, 0, 100 * time.Millisecond},
		{"pacer", pacedProvider{mem, time.Second}, 0, time.Second},
		{"pacer without an interval", pacedProvider{mem, 0}, 0, 100 * time.Millisecond},
		{"explicit over pacer", pacedProvider{mem, time.Second}, 20 * time.Millisecond, 20 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Options{IdleBackoff: tc.set}.withDefaults(tc.p).IdleBackoff)
		})
	}
}
