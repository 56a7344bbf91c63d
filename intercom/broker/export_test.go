package broker

import "time"

// Hooks for the black-box tests (package broker_test).

// UseGoroutineIO makes a broker serve its connections with goroutines, the
// transport off Linux, instead of the Linux event loop.
func UseGoroutineIO(c *Config) { c.goroutineIO = true }

// Unregistered is how many connections b holds that have not registered.
func Unregistered(b *Broker) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.unregistered.Len()
}

// SetDrainWait changes how long a half-closed connection waits for the
// peer's EOF; restore puts the old value back.
func SetDrainWait(d time.Duration) (restore func()) {
	saved := drainWait
	drainWait = d
	return func() { drainWait = saved }
}
