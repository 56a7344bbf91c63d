package broker

// LoopState reports whether b's event loop runs and how many connections
// it holds.
func LoopState(b *Broker) (running bool, conns int) {
	b.mu.Lock()
	lp := b.loop
	b.mu.Unlock()
	if lp == nil {
		return false, 0
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return lp.running, len(lp.conns)
}
