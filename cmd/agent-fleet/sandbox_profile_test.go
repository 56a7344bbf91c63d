//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// sandboxProbeScript is what a confined worker tries, reported to its
// manager "boss" in one message: read planted credentials, write outside
// its cwd (the home, another directory), write inside it.
const sandboxProbeScript = `#!/bin/sh
try() { if sh -c "$2" >/dev/null 2>&1; then r="$r $1=allowed"; else r="$r $1=denied"; fi; }
r="probe:"
try read-ssh 'grep -q ssh-secret "$HOME/.ssh/id_test"'
try read-aws 'grep -q aws-secret "$HOME/.aws/credentials"'
try write-home 'echo x > "$HOME/outside.txt"'
try write-other 'echo x > "$OTHER/outside.txt"'
try write-cwd 'echo x > ./inside.txt'
./agent-fleet intercom send boss "$r"
exec sleep 300
`

// A workspace worker on the real user manager cannot read the user's
// planted credentials nor write outside its cwd, while its intercom
// session works; a readonly one cannot write its cwd either. Where
// doctor says this manager cannot enforce the profile, the spawn fails
// saying so, and with --allow-degraded runs with the degradation in
// status.
func TestSandboxProfilesOnTheUserManager(t *testing.T) {
	t.Parallel()
	dir, home, other := shortDir(t), t.TempDir(), t.TempDir()
	for path, text := range map[string]string{".ssh/id_test": "ssh-secret\n", ".aws/credentials": "aws-secret\n"} {
		require.NoError(t, os.MkdirAll(filepath.Join(home, filepath.Dir(path)), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(home, path), []byte(text), 0o600))
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	run := func(args ...string) ([]byte, error) {
		cmd := as(t, dir, "boss", args...)
		cmd.Env = append(cmd.Env, unitstest.Require(t).Env()...)
		cmd.Env = append(cmd.Env, "HOME="+home)
		return cmd.Output()
	}
	boss := startListener(t, dir, "boss")
	t.Cleanup(func() {
		_, _ = run("stop", "--all")
		stopBroker(t, dir)
	})

	out, err := run("doctor", "--json")
	var doc struct{ Checks []fleet.Check }
	require.NoError(t, json.Unmarshal(out, &doc), "%s", out)
	var profileCheck *fleet.Check
	for i, c := range doc.Checks {
		if c.Name == "profile workspace" {
			profileCheck = &doc.Checks[i]
		}
	}
	require.NotNil(t, profileCheck, "doctor reports the workspace profile: %s", out)
	out, err = run("capabilities", "--json")
	require.NoError(t, err, "%s", out)
	var caps fleet.Capabilities
	require.NoError(t, json.Unmarshal(out, &caps))
	require.NotNil(t, caps.Sandbox, "capabilities reports the sandbox probe: %s", out)
	var workspace fleet.ProfileReport
	for _, p := range caps.Profiles {
		if p.Profile == fleet.ProfileWorkspace {
			workspace = p
		}
	}
	require.Equal(t, profileCheck.Status == fleet.CheckOK, workspace.Enforced, "doctor and capabilities agree: %+v %+v", profileCheck, workspace)

	spawn := func(id string, profile string, extra ...string) (output.Worker, string, error) {
		cwd := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(cwd, "probe.sh"), []byte(sandboxProbeScript), 0o755))
		// The worker reaches agent-fleet (this test binary, which it can
		// see: it is its shim) through a wrapper in its cwd.
		wrapper := fmt.Sprintf("#!/bin/sh\nAGENT_FLEET_RUN_MAIN=1 exec %q \"$@\"\n", exe)
		require.NoError(t, os.WriteFile(filepath.Join(cwd, "agent-fleet"), []byte(wrapper), 0o755))
		args := append([]string{"spawn", "--id", id, "--profile", profile, "--cwd", cwd, "--env", "OTHER=" + other, "--json"}, extra...)
		out, err := run(append(args, "--", "./probe.sh")...)
		var w output.Worker
		if err == nil {
			require.NoError(t, json.Unmarshal(out, &w), "%s", out)
		}
		return w, cwd, err
	}
	probe := func(id string) string {
		var text string
		require.Eventually(t, func() bool {
			for _, m := range boss.messages() {
				if m.From.ID == id {
					text = m.Text
					return true
				}
			}
			return false
		}, 60*time.Second, 20*time.Millisecond, "boss never got the probe of %s", id)
		return text
	}

	if !workspace.Enforced {
		// This manager cannot: the spawn says what is missing, and runs
		// degraded only when asked to, with status saying so.
		_, _, err := spawn("sbx-refused", "workspace")
		requireExit(t, err, exitUnsupported)
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		require.Contains(t, string(ee.Stderr), "needs what this user manager does not enforce: "+workspace.Missing[0])
	}

	// workspace.
	var extra []string
	if !workspace.Enforced {
		extra = []string{"--allow-degraded"}
	}
	w, cwd, err := spawn("sbx-ws", "workspace", extra...)
	require.NoError(t, err)
	require.Equal(t, "workspace", w.Profile)
	got := probe("sbx-ws")
	t.Logf("workspace enforced here: %v (doctor: %s); the worker saw %q", workspace.Enforced, profileCheck.Detail, got)
	require.Contains(t, got, "write-cwd=allowed", "the intercom session works and the cwd is writable")
	require.FileExists(t, filepath.Join(cwd, "inside.txt"))
	out, err = run("status", "sbx-ws")
	require.NoError(t, err, "%s", out)
	if workspace.Enforced {
		require.Empty(t, w.ProfileDegraded)
		require.Contains(t, string(out), "profile:  workspace\n")
		for _, denied := range []string{"read-ssh=denied", "read-aws=denied", "write-home=denied", "write-other=denied"} {
			require.Contains(t, got, denied)
		}
		require.NoFileExists(t, filepath.Join(home, "outside.txt"))
		require.NoFileExists(t, filepath.Join(other, "outside.txt"))
	} else {
		for _, p := range workspace.Missing {
			require.Contains(t, w.ProfileDegraded, p, "the record says what is not enforced")
		}
		require.Contains(t, string(out), "DEGRADED")
	}

	// readonly: the cwd is read-only too.
	readonly := caps.Profiles[2]
	require.Equal(t, fleet.ProfileReadOnly, readonly.Profile)
	extra = nil
	if !readonly.Enforced {
		extra = []string{"--allow-degraded"}
	}
	w, cwd, err = spawn("sbx-ro", "readonly", extra...)
	require.NoError(t, err)
	require.Equal(t, "readonly", w.Profile)
	got = probe("sbx-ro")
	if readonly.Enforced {
		require.Contains(t, got, "write-cwd=denied")
		require.Contains(t, got, "read-ssh=denied")
		require.NoFileExists(t, filepath.Join(cwd, "inside.txt"))
	}
	out, err = run("stop", "sbx-ws", "sbx-ro")
	require.NoError(t, err, "%s", out)
	require.Equal(t, 2, strings.Count(string(out), "nothing of it is left in its cgroup"), "%s", out)
}
