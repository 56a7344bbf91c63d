package units

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestServiceProperties(t *testing.T) {
	spec, err := ServiceSpec{
		Name: "agent-fleet-worker-w1-r1.service", Argv: []string{"/bin/sh", "-c", `echo "$HOME" $$`},
		Type: ServiceNotify, WorkingDirectory: "/srv", Env: []string{"A=1"}, UnsetEnv: []string{"TMUX"},
		StartTimeout: 5 * time.Second, StopTimeout: 1500 * time.Millisecond, MaxRuntime: time.Hour,
		LogFile: "/tmp/w.log", Stderr: OutputJournal, StopPost: []string{"/bin/echo", "$EXIT_STATUS"}, ExitRecord: "/tmp/w.exit",
	}.WithDefaults()
	require.NoError(t, err)
	got := map[string]any{}
	for _, p := range serviceProperties(spec) {
		got[p.Name] = p.Value.Value()
	}
	want := map[string]any{
		"Description":                "agent-fleet-worker-w1-r1.service",
		"Type":                       "notify",
		"NotifyAccess":               "main",
		"Slice":                      "agent-fleet.slice",
		"KillMode":                   "control-group",
		"CollectMode":                "inactive-or-failed",
		"WorkingDirectory":           "/srv",
		"Environment":                []string{"A=1"},
		"UnsetEnvironment":           []string{"TMUX"},
		"TimeoutStartUSec":           uint64(5_000_000),
		"TimeoutStopUSec":            uint64(1_500_000),
		"RuntimeMaxUSec":             uint64(3_600_000_000),
		"StandardOutputFileToAppend": "/tmp/w.log",
		"StandardError":              "journal",
	}
	for k, v := range want {
		require.Equal(t, v, got[k], k)
	}
	// systemd would expand $VAR itself: every "$" is doubled so the
	// command gets its argv verbatim.
	exec := got["ExecStart"].([]execCommand)
	require.Equal(t, []execCommand{{Path: "/bin/sh", Argv: []string{"/bin/sh", "-c", `echo "$$HOME" $$$$`}}}, exec)
	post := got["ExecStopPost"].([]execCommand)
	require.Len(t, post, 2)
	require.Equal(t, []string{"/bin/echo", "$$EXIT_STATUS"}, post[0].Argv)
	require.Equal(t, "/bin/sh", post[1].Path)
	require.Equal(t, "/tmp/w.exit", post[1].Argv[len(post[1].Argv)-1])
	require.True(t, post[1].IgnoreFailure)
}

func TestSandboxProperties(t *testing.T) {
	sb := Sandbox{ProtectSystem: "strict", ProtectHome: "read-only", PrivateTmp: true, NoNewPrivileges: true,
		ReadWritePaths: []string{"/home/u/w"}, InaccessiblePaths: []string{"-/home/u/.ssh"},
		BindPaths: []string{"/tmp/a"}, BindReadOnlyPaths: []string{"-/tmp/h"}}
	spec, err := ServiceSpec{Name: "p.service", Argv: []string{"/bin/true"}, Sandbox: sb}.WithDefaults()
	require.NoError(t, err)
	got := map[string]any{}
	for _, p := range serviceProperties(spec) {
		got[p.Name] = p.Value.Value()
	}
	require.Equal(t, "strict", got["ProtectSystem"])
	require.Equal(t, "read-only", got["ProtectHome"])
	require.Equal(t, true, got["PrivateTmp"])
	require.Equal(t, true, got["NoNewPrivileges"])
	require.Equal(t, []string{"/home/u/w"}, got["ReadWritePaths"])
	require.Equal(t, []string{"-/home/u/.ssh"}, got["InaccessiblePaths"], "systemd takes the '-' in the string")
	require.Equal(t, []bindMount{{Source: "/tmp/a", Destination: "/tmp/a", Flags: msRec}}, got["BindPaths"])
	require.Equal(t, []bindMount{{Source: "/tmp/h", Destination: "/tmp/h", IgnoreMissing: true, Flags: msRec}}, got["BindReadOnlyPaths"])
	_, none := got["ReadOnlyPaths"]
	require.False(t, none, "an empty list sets nothing")

	require.Equal(t, []string{PropProtectSystem, PropProtectHome, PropPrivateTmp, PropNoNewPrivileges, PropReadWritePaths,
		PropInaccessiblePaths, PropBindPaths}, sb.Uses())
	require.Equal(t, []string{PropProtectSystem, PropProtectHome, PropPrivateTmp, PropNoNewPrivileges, PropReadWritePaths},
		sb.Without([]string{PropInaccessiblePaths, PropBindPaths}).Uses())
	for _, bad := range []Sandbox{{ReadWritePaths: []string{"rel"}}, {BindPaths: []string{"/a:/b"}}, {ProtectSystem: "maybe"}} {
		_, err := ServiceSpec{Name: "p.service", Argv: []string{"/bin/true"}, Sandbox: bad}.WithDefaults()
		require.ErrorIs(t, err, ErrInvalidSpec)
	}
}
