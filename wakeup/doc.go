// Package wakeup is the per-slot wakeup hub that lets a provider's fetch
// long-poll until work lands in the caller's slots, instead of polling
// Cosmos DB. It is pure and in memory: the change-feed engine signals what
// it sees, fetch waits and locks the instance it is handed.
//
//	h, err := wakeup.New(wakeup.Options{})          // 256 slots
//	defer h.Close()
//	h.Signal(slot, instance, visibleAt)               // from the change feed
//	w, ok := h.Wait(ctx, share, pollTimeout)          // from fetch
//	// ok && w.Kind == wakeup.Instance: lockInstance(w.Instance)
//	// ok && w.Kind == wakeup.Scan:     candidate query on slot w.Slot
//
// The orchestrator and worker queues use two hubs.
//
// # Slots
//
// Slots are durafeed's dispatch slots (package slots: 256 by default); a
// contiguous block of slots is one change-feed range. A Set is a bitset of
// slots; Range and BlockSet build contiguous blocks.
//
// # Semantics
//
// Level-triggered: a signal stays pending until some Wait takes it, so a
// signal that arrives between a fetch's failed attempt and its Wait is never
// lost (checking and blocking are one step under the hub's lock). Pending
// wakeups are keyed by (slot, instance): signals for the same key coalesce
// into one wakeup with the earliest visibility time. Taking a wakeup covers
// what is visible when it is taken and no more, so a coalesced time still in
// the future (an instance with work now and a timer at t) is kept as a
// follow-up: once the wakeup is taken, it is re-armed at the first
// follow-up still in the future. Follow-ups already reached are dropped.
//
// Time: a visibility time in the future (timers, delayed retries, abandon
// delays, lock expiries through SignalAt) sits in a timer heap and becomes
// takeable exactly when the hub's Clock reaches it. What is due is computed
// on demand by every operation; a single goroutine, started on first need
// and stopped by Close, sleeps until the earliest future time only to hand
// it to a blocked waiter.
//
// Order: Wait takes, among the due wakeups of its slots, the one that became
// due first (its visibility time, or the time it was signalled if that was
// later), ties in arrival order. Order is global across slots, so no slot
// starves. Requeue restores a wakeup's place in line.
//
// Delivery: each wakeup goes to exactly one waiter. A wakeup that becomes
// due while Waits are blocked is handed to the oldest blocked Wait whose
// set holds its slot, and only that one is woken: waiters on other slots
// never wake (no thundering herd).
//
// Overflow: a slot remembers at most Options.MaxPendingPerSlot times (its
// instance wakeups plus their follow-ups). The signal that would exceed
// that collapses the slot into one Scan wakeup: visible at the earliest
// time the slot held and in the place in line of its oldest wakeup. With
// Options.MaxPending, the signal that would take the hub as a whole past
// that bound collapses the slot remembering the most. While a Scan is
// pending, signals for the slot fold into it (an earlier time moves it
// forward; a later one is forgotten). A Scan tells the taker to run the
// candidate query for the slot; since the hub has forgotten the slot's
// other times, the taker signals any work it sees there that is not yet
// visible (or a lock expiry it meets) again. A Scan carries no follow-up:
// once taken it is gone, so the taker's own signals are never folded into
// a scan the hub re-armed.
//
// Ownership: Drop discards the pending wakeups of slots no longer owned;
// after gaining slots, SignalScan covers their unsignalled backlog.
package wakeup
