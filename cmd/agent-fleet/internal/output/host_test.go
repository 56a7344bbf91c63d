package output

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
)

// capabilities for a model is a few sentences, not a JSON dump (that is
// its structuredContent): what runs here and what is missing.
func TestCapabilitiesToolText(t *testing.T) {
	c := fleet.Capabilities{Platform: "linux/amd64", Protocol: "pi-intercom v4", FleetBackend: "systemd-user", SystemdVersion: "255",
		WorkerKinds: []string{"exec", "claude", "codex"}, WorkerLogs: "files", CgroupLayout: "unified", CgroupKill: true,
		ResourceLimits: []string{"memory", "tasks"}, Pause: "systemd",
		Harnesses: map[string]string{"claude": "/usr/bin/claude", "codex": ""}, HarnessVersions: map[string]string{"claude": "2.1.3"},
		Profiles: []fleet.ProfileReport{{Profile: "trusted", Enforced: true}, {Profile: "confined", Missing: []string{"PrivateNetwork"}}}}
	require.Equal(t, `Host linux/amd64; intercom protocol pi-intercom v4.
Workers run as systemd user services (systemd 255); spawn kinds: exec, claude, codex; logs read from log files.
Resource limits enforced: memory, tasks; pause works.
Cgroups: unified layout; a stop kills whatever is left at once (cgroup.kill).
Profiles enforced: trusted; degraded: confined (runs without PrivateNetwork).
Coding agents installed: claude (2.1.3); not found: codex (to spawn one, give its executable in command).`, CapabilitiesReport{C: c}.Text(Tool))

	off := fleet.Capabilities{Platform: "darwin/arm64", Protocol: "pi-intercom v4", FleetBackend: "unavailable",
		FleetReason: "worker lifecycle needs Linux with a systemd user manager", Harnesses: map[string]string{}}
	require.Equal(t, "Host darwin/arm64; intercom protocol pi-intercom v4.\n"+
		"Workers cannot run here: worker lifecycle needs Linux with a systemd user manager. Only doctor and capabilities work; the intercom tools do.",
		CapabilitiesReport{C: off}.Text(Tool))
}
