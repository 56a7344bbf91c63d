package intercom

import "time"

// SetScopeSwitchHooks installs c's test hooks: lost runs whenever a
// connection's reader ended, afterRegister between a SetScope's
// registration and its install of the new connection. Set them before
// the connections they watch exist.
func SetScopeSwitchHooks(c *Client, lost, afterRegister func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lostHook, c.afterScopeRegister = lost, afterRegister
}

// Reconnects is how many reconnect loops c started.
func Reconnects(c *Client) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reconnects
}

// SetOutcomeWait replaces SendOutcomeTimeout for the sends of s.
func SetOutcomeWait(s *Session, d time.Duration) { s.client.outcomeWait = d }
