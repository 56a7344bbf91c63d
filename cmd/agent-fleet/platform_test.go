//go:build !windows

package main

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"strings"
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
	return cliIn{}.run(t, args...)
}

// cliIn is where an in-process agent-fleet runs: its environment (over
// the process's; nil: the process's alone) and the platform its fleet
// surfaces answer for ("": this one's).
type cliIn struct {
	env  map[string]string
	goos string
}

// factory is the factory of a command run in c, writing to io.
func (c cliIn) factory(io *factory.IOStreams) *factory.Factory {
	f := testFactory(io)
	if c.goos != "" {
		f.GOOS = c.goos
	}
	if c.env != nil {
		f.Getenv = func(k string) string {
			if v, ok := c.env[k]; ok {
				return v
			}
			return os.Getenv(k)
		}
	}
	return f
}

// run runs agent-fleet in process with args; stdout and stderr together.
func (c cliIn) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := execCLI(context.Background(), c.factory(&factory.IOStreams{In: bytes.NewReader(nil), Out: &out, Err: &out}), args)
	return out.String(), err
}

// withEnv is env with the variables of kvs ("K=V") added.
func withEnv(env map[string]string, kvs ...string) map[string]string {
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

// What macOS and Windows users get from the fleet surfaces, checked on
// Linux: every worker verb and agent_fleet action answers plainly that
// worker lifecycle needs Linux with a systemd user manager (exit 5) and
// touches nothing; doctor and capabilities say the same and pass.
func TestBrokerOnlyPlatformsAnswerUnsupported(t *testing.T) {
	t.Parallel()
	for _, goos := range []string{"darwin", "windows"} {
		t.Run(goos, func(t *testing.T) {
			t.Parallel()
			dir := shortDir(t)
			in := cliIn{goos: goos, env: map[string]string{"PI_CODING_AGENT_DIR": dir, "AGENT_INTERCOM_SESSION_ID": "mac-user"}}
			f := in.factory(factory.System())
			for _, args := range [][]string{
				{"spawn", "--id", "w1", "--", "true"}, {"list"}, {"status", "w1"}, {"stop", "w1"}, {"logs", "w1"},
				{"adopt", "w1"}, {"adopt", "--orphans"}, {"renew"}, {"forget", "w1", "--acknowledge"}, {"prune", "--acknowledge"},
				{"cleanup"}, {"install"}, {"uninstall"},
			} {
				_, err := in.run(t, args...)
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
			out, err := in.run(t, "doctor")
			require.NoError(t, err, "a broker-only host is healthy: %s", out)
			require.Contains(t, out, "broker and intercom only")
			out, err = in.run(t, "capabilities")
			require.NoError(t, err, out)
			require.Contains(t, out, "fleet:         unavailable: worker lifecycle needs Linux")
		})
	}
}
