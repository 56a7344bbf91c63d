package broker_test

import (
	"testing"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
)

// goroutineIO makes startBroker use the goroutine transport, which Linux
// brokers use only when asked (see TestGoroutineTransport).
var goroutineIO bool

// startBroker runs a broker in a fresh short directory (intercomtest).
func startBroker(t *testing.T, tweak ...func(*broker.Config)) *intercomtest.Broker {
	t.Helper()
	return startBrokerIn(t, intercomtest.ShortDir(t), tweak...)
}

// startBrokerIn runs a broker on agentDir.
func startBrokerIn(t *testing.T, agentDir string, tweak ...func(*broker.Config)) *intercomtest.Broker {
	t.Helper()
	return intercomtest.StartBroker(t, func(c *broker.Config) {
		c.Paths = intercom.NewPaths(agentDir)
		if goroutineIO {
			broker.UseGoroutineIO(c)
		}
		for _, f := range tweak {
			f(c)
		}
	})
}

// waitFor polls cond until it holds or 5 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
