// Package replay is the deterministic core of the durafeed runtime: given an
// instance's history, the messages fetched for a turn and the key-value
// snapshot, Execute runs the orchestration code and returns everything the
// turn must commit (new events with their ids, worker and orchestrator work
// items, execution metadata, cancelled activities) and the turn's outcome.
//
// The package performs no I/O and reads no clock: the caller passes "now".
// Orchestration code runs on a goroutine that the engine drives one step at
// a time: the goroutine runs until it waits on a durable task (an activity,
// a timer, an event, a sub-orchestration), then hands control back. The
// engine walks the history in order, matching every scheduling event with
// the action the code emitted at the same point (a mismatch is
// nondeterminism and fails the instance), and delivering completions; after
// each delivery it resumes the code if what it waits for is ready. When the
// history is exhausted, actions the code emitted but history does not know
// become new events, processed exactly like history so that the next replay
// takes the same path. At the end of a turn a goroutine still waiting is
// unwound with a private panic that the engine recovers: no goroutine
// outlives Execute.
//
// Orchestration code must be deterministic: everything it decides must
// depend only on its input and on the values the Context returns. It must
// not read clocks, random sources or the environment, start goroutines that
// use the Context, or block on anything but the Context.
package replay
