package lockservice

import "studio/locks"

// EngineKey is the engine key the service holds for (actor, name, key):
// the key of the named lock Scope(actor, name) with key as its id. The
// tests check that it is the key held and that no two triples share one.
func EngineKey(actor, name, key string) string {
	return locks.KeyOf(Scope(actor, name), key)
}
