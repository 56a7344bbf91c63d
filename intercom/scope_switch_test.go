package intercom_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// TestSwitchScopeIsNoLoss: the broker ends the connection a scope switch
// replaces, and that can happen before the client installs the new one
// (a busy machine). That end is no loss: the client must not reconnect
// over its new connection, which would end it under the next send. The
// hook holds the install until the old connection's reader has ended,
// the order that lost a send in CI.
func TestSwitchScopeIsNoLoss(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	lead := open(t, p, "lead", "Lead")
	mate := open(t, p, "mate", "Mate", func(c *intercom.SessionConfig) { c.Reconnect = true })
	const scope = "team-scope-for-the-switch-test-0123456789"
	require.NoError(t, lead.SwitchScope(ctx, scope))

	ended := make(chan struct{}, 4)
	intercom.SetScopeSwitchHooks(mate.Client(), func() { ended <- struct{}{} }, func() {
		select {
		case <-ended:
		case <-time.After(30 * time.Second):
			t.Error("the broker never ended the replaced connection")
		}
	})
	require.NoError(t, mate.SwitchScope(ctx, scope))
	require.Zero(t, intercom.Reconnects(mate.Client()), "a replaced connection is not a lost one")

	res, err := mate.Send(ctx, intercom.SendRequest{To: "lead", Text: "in the new scope"})
	require.NoError(t, err)
	require.True(t, res.OK, "%+v", res)
	require.Zero(t, intercom.Reconnects(mate.Client()))
}
