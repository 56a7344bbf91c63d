//go:build !windows

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver/mcptest"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/units"
)

// runCLI runs agent-fleet in process with args.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runCLIOn(t, runtime.GOOS, args...)
}

// runCLIOn runs agent-fleet in process with args, its fleet surfaces
// answering as on goos.
func runCLIOn(t *testing.T, goos string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	f := testFactory(&factory.IOStreams{In: bytes.NewReader(nil), Out: &out, Err: &out})
	f.GOOS = goos
	root := newRootCmd(f)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// What macOS and Windows users get from the fleet surfaces, checked on
// Linux: every worker verb and agent_fleet action answers plainly that
// worker lifecycle needs Linux with a systemd user manager (exit 5) and
// touches nothing; doctor and capabilities say the same and pass.
func TestBrokerOnlyPlatformsAnswerUnsupported(t *testing.T) {
	for _, goos := range []string{"darwin", "windows"} {
		t.Run(goos, func(t *testing.T) {
			f := testFactory(factory.System())
			f.GOOS = goos
			dir := shortDir(t)
			t.Setenv("PI_CODING_AGENT_DIR", dir)
			t.Setenv("AGENT_INTERCOM_SESSION_ID", "mac-user")
			for _, args := range [][]string{
				{"spawn", "--id", "w1", "--", "true"}, {"list"}, {"status", "w1"}, {"stop", "w1"}, {"logs", "w1"},
				{"adopt", "w1"}, {"adopt", "--orphans"}, {"renew"}, {"forget", "w1", "--acknowledge"}, {"prune", "--acknowledge"},
				{"cleanup"}, {"install"}, {"uninstall"},
			} {
				_, err := runCLIOn(t, goos, args...)
				require.ErrorIs(t, err, units.ErrUnsupported, "%v", args)
				require.Equal(t, exitUnsupported, exitCode(err), "%v", args)
				require.Contains(t, err.Error(), "needs Linux with a systemd user manager", "%v", args)
			}
			_, err := os.Stat(dir + "/intercom/orchestrator")
			require.True(t, errors.Is(err, os.ErrNotExist), "no fleet state was created")

			cs := mcptest.Connect(t, mcpserver.New(nil, mcpserver.Options{Fleet: f, Caller: "mac-user"}))
			call := mcptest.Caller(t, cs)
			res := call("agent_fleet", map[string]any{"action": "spawn", "id": "w1", "command": []any{"true"}})
			require.True(t, res.IsError)
			require.Contains(t, res.Text, "worker lifecycle needs Linux with a systemd user manager: this is "+goos)
			res = call("agent_fleet", map[string]any{"action": "list"})
			require.True(t, res.IsError)
			require.Contains(t, mcptest.Tools(t, cs)["agent_fleet"].Description, "Unavailable on this host ("+goos+") except doctor and capabilities")

			c := f.Capabilities(context.Background())
			require.Equal(t, "unavailable", c.FleetBackend)
			require.Empty(t, c.WorkerKinds)
			require.Contains(t, c.FleetReason, "needs Linux with a systemd user manager")

			checks := f.DoctorChecks(context.Background(), fleet.DoctorConfig{Paths: intercom.NewPaths(dir)})
			var names []string
			for _, ch := range checks {
				names = append(names, ch.Name)
				require.NotEqual(t, fleet.CheckFail, ch.Status, "%+v", ch)
			}
			require.Equal(t, "platform", checks[0].Name)
			require.Equal(t, fleet.CheckWarn, checks[0].Status)
			require.Contains(t, checks[0].Fix, "needs Linux with a systemd user manager")
			require.NotContains(t, names, "user bus", "no systemd checks where there is no systemd")
			require.NotContains(t, names, "systemd units")
			require.Contains(t, names, "broker")
			out, err := runCLIOn(t, goos, "doctor")
			require.NoError(t, err, "a broker-only host is healthy: %s", out)
			require.Contains(t, out, "broker and intercom only")
			out, err = runCLIOn(t, goos, "capabilities")
			require.NoError(t, err, out)
			require.Contains(t, out, "fleet:         unavailable: worker lifecycle needs Linux")
		})
	}
}
