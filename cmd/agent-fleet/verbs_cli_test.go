package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/fleettest"
)

// execute runs cmd with args, as the root command does (errors returned,
// not printed).
func execute(cmd *cobra.Command, args ...string) error {
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs(args)
	return cmd.ExecuteContext(context.Background())
}

// The first layer of a verb: its argv becomes its options, and nothing
// runs (cli/cli's runF).
func TestFleetVerbFlagsFillTheirOptions(t *testing.T) {
	t.Parallel()
	s, _, _ := testStreams()
	f := testFactory(s)

	var spawn *spawnOptions
	require.NoError(t, execute(newSpawnCmd(f, func(o *spawnOptions) error { spawn = o; return nil }),
		"--id", "w1", "--kind", "codex", "--role", "r", "--env", "A=1", "--env", "B=2", "--lease", "30m",
		"--max-runtime", "2h", "--turn-timeout", "45m", "--model", "m", "--effort", "high", "--permission", "read-only",
		"--json", "--", "codex", "--flag"))
	require.Equal(t, verbs.Args{Action: "spawn", ID: "w1", Spawn: fleet.SpawnRequest{Kind: "codex", Role: "r", Env: []string{"A=1", "B=2"},
		Lease: 30 * time.Minute, MaxRuntime: 2 * time.Hour, TurnTimeout: 45 * time.Minute, Model: "m", Effort: "high",
		Permission: "read-only", Command: []string{"codex", "--flag"}}}, spawn.Args)
	require.True(t, spawn.JSON)

	var list *listOptions
	require.NoError(t, execute(newListCmd(f, func(o *listOptions) error { list = o; return nil }), "--all", "--json"))
	require.True(t, list.All && list.JSON)
	var logs *logsOptions
	require.NoError(t, execute(newLogsCmd(f, func(o *logsOptions) error { logs = o; return nil }), "w1", "-n", "7"))
	require.Equal(t, "w1", logs.Args.ID)
	require.Equal(t, 7, logs.Args.Lines)
	require.NoError(t, execute(newLogsCmd(f, func(o *logsOptions) error { logs = o; return nil }), "w1", "--all", "--since", "10m", "--timestamps", "-f"))
	require.True(t, logs.Args.All && logs.Args.Timestamps && logs.Follow)
	require.Zero(t, logs.Args.Lines, "--all reads every line")
	require.WithinDuration(t, time.Now().Add(-10*time.Minute), logs.Args.Since, time.Minute)
	require.Error(t, execute(newLogsCmd(f, func(*logsOptions) error { return nil }), "w1", "--all", "-n", "5"))
	// --since without -n reads every line since then, as journalctl does.
	require.NoError(t, execute(newLogsCmd(f, func(o *logsOptions) error { logs = o; return nil }), "w1", "--since", "10m"))
	require.Zero(t, logs.Args.LogQuery().Lines, "every line since then")
	require.NoError(t, execute(newLogsCmd(f, func(o *logsOptions) error { logs = o; return nil }), "w1", "--since", "10m", "-n", "5"))
	require.Equal(t, 5, logs.Args.LogQuery().Lines)
	since := newLogsCmd(f, nil).Flags().Lookup("since").Usage
	require.True(t, strings.HasPrefix(since, "only lines written since then"), since)
	require.NotContains(t, since, "turns")
	var adopt *adoptOptions
	require.NoError(t, execute(newAdoptCmd(f, func(o *adoptOptions) error { adopt = o; return nil }), "--orphans"))
	require.True(t, adopt.Orphans)
	require.Empty(t, adopt.ID)
	require.NoError(t, execute(newAdoptCmd(f, func(o *adoptOptions) error { adopt = o; return nil }), "w1", "--force"))
	require.Equal(t, "w1", adopt.ID)
	require.True(t, adopt.Force)
	err := execute(newAdoptCmd(f, func(*adoptOptions) error { return nil }), "w1", "--orphans")
	require.ErrorContains(t, err, "a worker id or --orphans, not both")
	err = execute(newAdoptCmd(f, func(*adoptOptions) error { return nil }))
	require.ErrorContains(t, err, "give a worker id, or --orphans")
	var prune *pruneOptions
	require.NoError(t, execute(newPruneCmd(f, func(o *pruneOptions) error { prune = o; return nil }), "--acknowledge", "--older-than", "1h", "--all"))
	require.True(t, prune.Acknowledge && prune.All)
	require.Equal(t, time.Hour, prune.OlderThan)
	var stop *stopOptions
	require.NoError(t, execute(newStopCmd(f, func(o *stopOptions) error { stop = o; return nil }), "w1", "w2", "--timeout", "3s", "--json"))
	require.Equal(t, []string{"w1", "w2"}, stop.IDs)
	require.Equal(t, 3*time.Second, stop.Timeout)
	require.True(t, stop.JSON)
	require.NoError(t, execute(newStopCmd(f, func(o *stopOptions) error { stop = o; return nil }), "--all", "--kill"))
	require.True(t, stop.All && stop.Kill)
	require.Empty(t, stop.IDs)
	var cleanup *cleanupOptions
	require.NoError(t, execute(newCleanupCmd(f, func(o *cleanupOptions) error { cleanup = o; return nil }), "--execute"))
	require.True(t, cleanup.Execute)

	for _, c := range []struct {
		cmd  *cobra.Command
		args []string
	}{
		{newSpawnCmd(f, nil), []string{"--", "sleep", "1"}},              // no --id
		{newSpawnCmd(f, nil), []string{"--id", "w1"}},                    // an exec worker without a command
		{newSpawnCmd(f, nil), []string{"--id", "w1", "--lease", "soon"}}, // not a duration
		{newAdoptCmd(f, nil), nil},                                       // neither an id nor --orphans
		{newLogsCmd(f, nil), []string{"w1", "-n", "0"}},
	} {
		err := execute(c.cmd, c.args...)
		require.Error(t, err, "%s %v", c.cmd.Name(), c.args)
	}
}

// The second layer: the fleet verbs in process on the fake user manager,
// printing what people read.
func TestFleetVerbsInProcess(t *testing.T) {
	t.Parallel()
	e := fleettest.New(t, "operator-me")
	cli := func(args ...string) (string, error) {
		t.Helper()
		var out bytes.Buffer
		f := testFactory(&factory.IOStreams{In: strings.NewReader(""), Out: &out, Err: &out})
		f.Getenv, f.ConnectUnits = e.Getenv, e.Connect
		root := newRootCmd(f)
		root.SetArgs(args)
		err := root.ExecuteContext(context.Background())
		return out.String(), err
	}
	out, err := cli("spawn", "--id", "w1", "--role", "tester", "--", "sleep", "300")
	require.NoError(t, err, out)
	require.Regexp(t, `^Spawned worker w1: run [0-9a-f]{12}, unit agent-fleet-worker-w1-[0-9a-f]{12}\.service, pid \d+, running\.\n$`, out)

	out, err = cli("list")
	require.NoError(t, err, out)
	require.Regexp(t, `(?m)^ID\s+RUN\s+STATE\s+ROLE\s+MANAGER\s+AGE\s+LEASE\s+USAGE\s+COMMAND$`, out)
	require.Regexp(t, `(?m)^w1\s+[0-9a-f]{12}\s+running\s+tester\s+operator-me\s+\S+\s+-\s+-\s+/usr/bin/sleep 300$`, out, "an operator's worker has no lease, an exec worker no usage")

	out, err = cli("status", "w1", "--json")
	require.NoError(t, err, out)
	var st output.Status
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, "w1", st.Worker.ID)
	require.Equal(t, "running", st.UnitSub)

	out, err = cli("logs", "w1", "--json")
	require.NoError(t, err, out)
	require.JSONEq(t, `{"lines": []}`, out)

	out, err = cli("stop", "w1")
	require.NoError(t, err, out)
	require.Equal(t, "Stopped w1; nothing of it is left in its cgroup.\n", out)
	out, err = cli("forget", "w1")
	require.Equal(t, exitUsage, exitCode(err), out)
	out, err = cli("forget", "w1", "--acknowledge", "--json")
	require.NoError(t, err, out)
	require.JSONEq(t, `{"deleted": 1}`, out)
	out, err = cli("status", "w1")
	require.Equal(t, exitNotFound, exitCode(err), out)
}
