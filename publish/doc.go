// Package publish carries out publication items: a Runner claims items
// from the store under leases with fences, exactly as workers claim tasks,
// hands each to its channel, and records the end with the fence.
//
// An item moves like this (the store keeps the state; the fence is bumped
// by every claim and named by every later write):
//
//	queued --claim--> running --complete--> succeeded
//	   ^                 |
//	   |                 +--fail (transient, attempts left)--> queued (after a backoff)
//	   |                 +--fail (permanent, or the last attempt)--> failed
//	   +----release------+ (the runner stops: at once, not counted against the maximum)
//	   +----lease expired, claimed again under a higher fence (a crash)
//
// A runner that lost a lease records nothing for the item: its writes name
// a fence that is no longer live. The item's channel may still have done
// its work, and will do it again under the new lease, so every channel is
// idempotent: the gallery writes each file to a fixed name (a temporary
// file, then a rename over it) or, over a shared asset store, only checks
// bytes the store holds already, and the webhook sends the item id as the
// Idempotency-Key of every delivery, so a receiver can drop a duplicate.
package publish
