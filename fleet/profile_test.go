package fleet

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/units"
)

func TestDefaultProfile(t *testing.T) {
	for _, c := range []struct {
		kind, permission string
		want             Profile
	}{
		{"exec", "", ProfileTrusted},
		{"claude", "", ProfileWorkspace},
		{"claude", "full", ProfileWorkspace},
		{"claude", "bypassPermissions", ProfileWorkspace},
		{"codex", "danger-full-access", ProfileWorkspace},
		{"codex", "workspace-write", ProfileWorkspace},
		{"pi", "read-only", ProfileReadOnly},
		{"claude", "plan", ProfileReadOnly},
		{"claude", "dontAsk", ProfileReadOnly},
	} {
		require.Equal(t, c.want, DefaultProfile(c.kind, c.permission), "%s %q", c.kind, c.permission)
	}
	_, err := ParseProfile("sandboxed")
	require.ErrorIs(t, err, ErrInvalidRequest)
}

func lookup(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestCompileWorkspaceProfile(t *testing.T) {
	env := lookup(map[string]string{"HOME": "/home/u", "XDG_RUNTIME_DIR": "/run/user/1000", "CODEX_HOME": "/srv/codex"})
	caller := lookup(map[string]string{"SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1", "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1000/bus,guid=1"})
	sb := compileSandbox(sandboxInput{profile: ProfileWorkspace, kind: "codex", cwd: "/home/u/src/app", env: env, callerEnv: caller,
		agentDir: "/home/u/.pi/agent", intercomDir: "/home/u/.pi/agent/intercom", executables: []string{"/usr/bin/agent-fleet", "/tmp/bin/tool"}})
	require.Equal(t, "strict", sb.ProtectSystem)
	require.Equal(t, "read-only", sb.ProtectHome)
	require.True(t, sb.PrivateTmp)
	require.True(t, sb.NoNewPrivileges)
	require.Equal(t, []string{"/home/u/.pi/agent/intercom", "/home/u/src/app", "-/srv/codex"}, sb.ReadWritePaths)
	require.Empty(t, sb.ReadOnlyPaths, "the home is under ProtectHome")
	require.Equal(t, []string{"/tmp/bin/tool"}, sb.BindReadOnlyPaths, "a command below /tmp stays visible")
	for _, hidden := range []string{"-/home/u/.ssh", "-/home/u/.gnupg", "-/home/u/.aws", "-/home/u/.config/gcloud",
		"-/tmp/ssh-x/agent.1", "-/run/user/1000/bus", "-/run/user/1000/systemd/private", "-/run/user/1000/gnupg",
		"-/run/user/1000/docker.sock", "-/run/user/1000/podman", "-/var/run/docker.sock"} {
		require.Contains(t, sb.InaccessiblePaths, hidden)
	}
	require.NotContains(t, sb.InaccessiblePaths, "-/run/user/1000/systemd/notify", "READY=1 must reach the manager")

	ro := compileSandbox(sandboxInput{profile: ProfileReadOnly, kind: "claude", cwd: "/tmp/w", env: lookup(map[string]string{"HOME": "/tmp/h"}),
		callerEnv: lookup(nil), agentDir: "/tmp/a", intercomDir: "/tmp/a/intercom"})
	require.Empty(t, ro.ReadWritePaths)
	require.Equal(t, []string{"/tmp/a/intercom", "-/tmp/h/.claude", "-/tmp/h/.cache/claude-cli-nodejs", "-/tmp/h/.local/state/claude",
		"-/tmp/h/.local/share/claude", "-/tmp/h/.claude.json"}, ro.BindPaths)
	require.Equal(t, []string{"/tmp/w", "/tmp/h"}, ro.BindReadOnlyPaths, "cwd and home visible, read-only, in the private /tmp")

	require.True(t, compileSandbox(sandboxInput{profile: ProfileTrusted}).Zero())
}

func TestGitWorktreeDirsStayWritable(t *testing.T) {
	repo, wt := t.TempDir(), t.TempDir()
	gitdir := filepath.Join(repo, ".git", "worktrees", "w")
	require.NoError(t, os.MkdirAll(gitdir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(gitdir, "commondir"), []byte("../..\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(wt, ".git"), []byte("gitdir: "+gitdir+"\n"), 0o600))
	require.Equal(t, []string{gitdir, filepath.Join(repo, ".git")}, gitDirs(wt))
	require.Nil(t, gitDirs(repo), "a .git directory lies inside cwd")
}

// partialManager enforces everything but InaccessiblePaths.
type partialManager struct{ units.Manager }

func (partialManager) ProbeSandbox(context.Context, units.ProbeSandboxOptions) (units.SandboxSupport, error) {
	var sup units.SandboxSupport
	for _, p := range units.SandboxProperties {
		sup.Checks = append(sup.Checks, units.SandboxCheck{Property: p, Enforced: p != units.PropInaccessiblePaths, Detail: "probed"})
	}
	return sup, nil
}

func TestAProfileThatCannotBeEnforcedIsNeverSilent(t *testing.T) {
	f := &Fleet{cfg: Config{Units: partialManager{}}}
	in := sandboxInput{profile: ProfileWorkspace, kind: "claude", cwd: "/home/u/w", env: lookup(map[string]string{"HOME": "/home/u"}),
		callerEnv: lookup(nil), agentDir: "/home/u/.pi/agent", intercomDir: "/home/u/.pi/agent/intercom"}
	ctx := context.Background()

	_, _, err := f.sandboxFor(ctx, SpawnRequest{Profile: "workspace"}, in, true)
	require.ErrorIs(t, err, ErrProfileUnenforceable)
	require.ErrorContains(t, err, "InaccessiblePaths (probed)")
	require.ErrorContains(t, err, "--allow-degraded")

	sb, degraded, err := f.sandboxFor(ctx, SpawnRequest{Profile: "workspace", AllowDegraded: true}, in, true)
	require.NoError(t, err)
	require.Empty(t, sb.InaccessiblePaths, "a unit with it would not start")
	require.Equal(t, "strict", sb.ProtectSystem, "what is enforced stays")
	require.Equal(t, "not enforced here: InaccessiblePaths (probed)", degraded)

	_, degraded, err = f.sandboxFor(ctx, SpawnRequest{}, in, false)
	require.NoError(t, err, "a default profile degrades")
	require.Contains(t, degraded, "InaccessiblePaths")

	reports := ProfileReports(must(partialManager{}.ProbeSandbox(ctx, units.ProbeSandboxOptions{})))
	require.Equal(t, ProfileReport{Profile: ProfileTrusted, Enforced: true}, reports[0])
	require.Equal(t, []string{units.PropInaccessiblePaths}, reports[1].Missing)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
