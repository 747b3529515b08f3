// Package leasequeue runs work that is claimed from the store under leases
// with fences: task generation (package worker) and publication delivery
// (package publish) are two Handlers of one Runner.
//
// A Runner is the machinery both need and neither should write twice:
//
//	Start --> fetch loop: claim up to the room it has (Handler.Claim),
//	          back off with jitter while nothing comes (PollMin..PollMax)
//	          each item: its own goroutine and context (Handler.Run)
//	      --> renewal loop: every ttl/3, one Handler.Renew for every
//	          live lease; "lost", or no renewal confirmed before the local
//	          deadline (claim or last renewal + ttl): the item's context
//	          ends with store.ErrLeaseLost; "canceled": with ErrCanceled
//	      --> Config.Loops (batch writers, sweeps) for the session
//	Stop  --> no more claims (Session.StopContext ends); running items
//	          get Grace to end, then their contexts end with ErrStopping;
//	          once every item has ended, the loops and renewals stop.
//
// Start and Stop may be called any number of times, in any order, from
// any goroutine (like River's startstop): a second Start does nothing, a
// Stop waits for the one stop in progress, a Start during a stop waits for
// it to end and starts again.
//
// What an item does, and how its end is recorded (complete, fail with a
// Backoff, hand the lease back), is the Handler's: every such write names
// the item's fence, and one that matches no row answers
// store.ErrLeaseLost. A Batcher turns the writes of many items into one
// transaction.
package leasequeue
