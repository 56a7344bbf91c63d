package mcpserver

import (
	"io"
	"log/slog"
	"testing"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
)

var discard = slog.New(slog.DiscardHandler)

// testFactory is a factory writing nowhere.
func testFactory() *factory.Factory {
	return factory.New(&factory.IOStreams{In: io.MultiReader(), Out: io.Discard, Err: io.Discard}, "test")
}

func shortDir(t *testing.T) string { return intercomtest.ShortDir(t) }

// startTestBroker runs a broker in this process on p until the test ends.
func startTestBroker(t *testing.T, p intercom.Paths) {
	t.Helper()
	intercomtest.StartBroker(t, func(c *broker.Config) {
		c.Paths = p
		c.CheckPeerUID = false
		c.Logger = nil
	})
}
