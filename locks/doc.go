// Package locks is studio's locks engine.
package locks
