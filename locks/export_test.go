package locks

// SetMemoryFence sets the last fence m handed out, for the conformance
// suite's exhaustion test.
func SetMemoryFence(m *MemoryStore, v int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fence = v
}
