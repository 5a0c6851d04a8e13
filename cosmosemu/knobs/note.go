package knobs

import "context"

// outcome is what an inner knob did to a request, reported to the counters
// through the request context.
type outcome uint8

const (
	outcomeNone outcome = iota
	outcomeThrottled
	outcomeFaulted
	outcomeDropped
)

type noteKey struct{}

// noteCtx carries a per-request note from the counters middleware to the
// knobs inside it. It embeds the request context (deadline, cancellation
// and values pass through) and costs a single allocation.
type noteCtx struct {
	context.Context
	outcome outcome
}

// Value answers the note for noteKey and defers to the request context
// otherwise.
func (c *noteCtx) Value(key any) any {
	if _, ok := key.(noteKey); ok {
		return c
	}
	return c.Context.Value(key)
}

// noteOutcome records o on the request's note, if a Counters middleware
// installed one.
func noteOutcome(ctx context.Context, o outcome) {
	if n, ok := ctx.Value(noteKey{}).(*noteCtx); ok {
		n.outcome = o
	}
}
