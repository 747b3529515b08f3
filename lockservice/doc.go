// Package lockservice holds lock-engine leases on behalf of remote clients
// (the HTTP routes under /v1/locks/): a client acquires a key, gets a fence
// and a secret lease id, renews within its TTL and releases.
//
// Each granted lease is one goroutine running the engine's Hold. Its fn
// waits until the client releases, or lets its TTL pass without a renewal
// (the lease is then "expired" and the key freed), or the engine loses the
// store's lease (then "lost"); meanwhile the engine renews the store's
// lease every ttl/3. So a client that vanishes never holds a key past its
// TTL, and a server that vanishes holds nothing past the TTL in a shared
// store either.
//
//	acquire ──► held ──renew──► held ──release──► released
//	              │                 │
//	              │ no renewal      │ engine lost the store lease,
//	              ▼ within TTL      ▼ or the server closed
//	           expired             lost
//
// Keys are scoped per actor: (actor, name, key) maps to one engine key
// (the engine's named lock Scope(actor, name), with key as its id) that no
// other triple makes.
//
// Acquires are named by a request id: a retry whose answer was lost gets
// the same lease back instead of taking (and orphaning) a second one.
package lockservice
