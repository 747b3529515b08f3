// Package leasequeue runs work that is claimed from the store under leases
// with fences: task generation (package worker) and publication delivery
// (package publish) are two Handlers of one Runner, configured with one
// Options (worker.Config and publish.Config embed it).
//
// The store keeps one lease queue (store.LeaseStore) over its two kinds
// of leased rows, tasks and publication items: a Handler claims its kind
// (the kind's order and payload: store.TaskStore.ClaimTasks,
// store.PublicationStore.ClaimItems) and names each item's store.Lease;
// renewing, completing, failing and releasing are the same calls for
// both. A leased row's life, whatever its kind:
//
//	            claim: fence+1, attempts+1, owner, expiry (database clock)
//	+--------+ -----------------------------------------> +---------+
//	| queued |                                            | running |
//	+--------+ <-- FailLease, transient, attempts left -- |  lease  |
//	  |    ^       (claimable again after run_after)      |  fence  |
//	  |    +------ ReleaseLeases (a stop) --------------- |         |
//	  |                                                   +---------+
//	  |                  lease expired: claimed again     |  ^   |
//	  |                  (fence+1), or failed when out    +--+   |
//	  |                  of attempts                             |
//	  |        CompleteLeases ---------------------------------> succeeded
//	  |        FailLease, permanent or last attempt -----------> failed
//	  +--> canceled <-- the parent asked to cancel (batches only): queued
//	                    at once; running at its next write or renewal
//
// A Runner is the machinery both need and neither should write twice.
// Each Start..Stop of it is one session: its loops and the items it
// holds, of which a Handler sees the *Session:
//
//	Start --> fetch loop: claim up to the room it has (Handler.Claim),
//	          back off with jitter while nothing comes (PollMin..PollMax)
//	          each item: its own goroutine and context (Handler.Run)
//	      --> renewal loop: every ttl/3, one store.RenewLeases
//	          (Config.Leases) for every live lease; "lost", or no
//	          renewal confirmed before the local deadline (claim or last
//	          renewal + ttl): the item's context ends with
//	          store.ErrLeaseLost; "canceled": with ErrCanceled
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
