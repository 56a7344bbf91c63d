//go:build !windows

package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// agent_fleet refuses arguments its action would ignore.
func TestFleetToolRefusesArgumentsItWouldIgnore(t *testing.T) {
	for _, c := range []struct {
		args fleetArgs
		want string
	}{
		{fleetArgs{Action: "renew", ID: "w1", Lease: "2h"}, "lease"},
		{fleetArgs{Action: "stop", ID: "w1", Force: true}, "force"},
		{fleetArgs{Action: "status", ID: "w1", Lines: 10}, "lines"},
		{fleetArgs{Action: "list", Command: []string{"true"}}, "command"},
		{fleetArgs{Action: "cleanup", Acknowledge: true}, "acknowledge"},
		{fleetArgs{Action: "spawn", ID: "w1", Execute: true}, "execute"},
		{fleetArgs{Action: "spawn", ID: "w1", Kind: "claude", Task: "t", Lease: "1h", Env: map[string]string{"K": "v"}}, ""},
		{fleetArgs{Action: "adopt", All: true}, ""},
		{fleetArgs{Action: "logs", ID: "w1", Lines: 5}, ""},
		{fleetArgs{Action: "prune", All: true, Acknowledge: true}, ""},
	} {
		require.Equal(t, c.want, misplaced(c.args), "%+v", c.args)
		if c.want != "" {
			res := decodeResult(t, runFleetAction(t.Context(), "caller", c.args))
			require.True(t, res.isError)
			require.Contains(t, res.text, "does not take "+c.want)
		}
	}
}
