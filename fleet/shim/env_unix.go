//go:build !windows

package shim

import (
	"slices"
	"strings"

	"github.com/agent-fleet/agent-fleet/fleet"
)

// serviceVars are what systemd sets for a service's own process, never
// the manager's to pass on: the shim needs NOTIFY_SOCKET for READY
// (commandEnv keeps it and MAINPID from the command; INVOCATION_ID and
// SYSTEMD_EXEC_PID are the worker unit's own).
var serviceVars = []string{"NOTIFY_SOCKET", "MAINPID", "INVOCATION_ID", "SYSTEMD_EXEC_PID"}

// inheritedStripped names the variables of env that match fleet's strip
// list and that the unit did not set itself (per fleet.EnvShimKeep in env):
// the user manager's, for the shim to remove before anything reads its
// environment.
func inheritedStripped(env []string) []string {
	keep := map[string]bool{}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, fleet.EnvShimKeep+"="); ok {
			for _, k := range strings.Split(v, ",") {
				keep[k] = true
			}
		}
	}
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if fleet.Stripped(k) && !keep[k] && !slices.Contains(serviceVars, k) {
			out = append(out, k)
		}
	}
	return out
}

// commandEnv is the shim's environment minus what is systemd's business
// with the shim alone, and fleet's notes to itself (fleet.EnvShimKeep,
// fleet.EnvLease, fleet.EnvMaxRuntime): the environment of the worker's command, or of a coding
// agent's turns.
func commandEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if strings.HasPrefix(kv, "NOTIFY_SOCKET=") || strings.HasPrefix(kv, "MAINPID=") || strings.HasPrefix(kv, fleet.EnvShimKeep+"=") || strings.HasPrefix(kv, fleet.EnvLease+"=") ||
			strings.HasPrefix(kv, fleet.EnvMaxRuntime+"=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}
