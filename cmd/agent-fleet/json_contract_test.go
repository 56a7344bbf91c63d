package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver/mcptest"
	"github.com/agent-fleet/agent-fleet/fleet/fleettest"
)

// How a worker ended is numbers in JSON: exitCode as a shell reports it
// (128 + the signal when killed), exitStatus systemd's, and the kind of
// ending a string of its own — the same on the CLI and in agent_fleet's
// structuredContent.
func TestWorkerEndingIsNumbersInJSON(t *testing.T) {
	t.Parallel()
	e := fleettest.New(t, "operator-me")
	s, _, _ := testStreams()
	f := testFactory(s)
	f.Getenv, f.ConnectUnits = e.Getenv, e.Connect
	call := mcptest.Caller(t, mcptest.Connect(t, mcpserver.New(nil, mcpserver.Options{Fleet: f, Caller: "operator-me"})))
	worker := func(id string) (cli, tool map[string]any) {
		t.Helper()
		out, _, err := fakeCLI(t, e, "operator-me", "status", id, "--json")
		require.NoError(t, err, out)
		var st map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &st), out)
		r := call("agent_fleet", map[string]any{"action": "status", "id": id})
		require.False(t, r.IsError, r.Text)
		return st["worker"].(map[string]any), r.Structured["worker"].(map[string]any)
	}

	out, _, err := fakeCLI(t, e, "operator-me", "spawn", "--id", "end-killed", "--", "sleep", "300")
	require.NoError(t, err, out)
	out, _, err = fakeCLI(t, e, "operator-me", "stop", "end-killed")
	require.NoError(t, err, out)
	cli, tool := worker("end-killed")
	for _, w := range []map[string]any{cli, tool} {
		require.Equal(t, float64(128+15), w["exitCode"], "killed by SIGTERM: %v", w)
		require.Equal(t, "killed", w["exitKind"])
		require.Equal(t, float64(15), w["exitStatus"])
	}

	_, _, err = fakeCLI(t, e, "operator-me", "spawn", "--id", "end-exited", "--", "false")
	require.Error(t, err, "a command that fails at once fails the spawn")
	cli, tool = worker("end-exited")
	for _, w := range []map[string]any{cli, tool} {
		require.Equal(t, float64(1), w["exitCode"], "%v", w)
		require.Equal(t, "exited", w["exitKind"])
		require.Equal(t, float64(1), w["exitStatus"])
	}
}

// A command given --json that fails without a report prints the error
// object on stdout — agent_fleet's structuredContent for a failure — beside
// the message on stderr, with the exit status it always had.
func TestFailuresUnderJSONPrintTheErrorObject(t *testing.T) {
	t.Parallel()
	e := fleettest.New(t, "operator-me")
	out, _, err := fakeCLI(t, e, "operator-me", "spawn", "--id", "jf-done", "--", "sleep", "300")
	require.NoError(t, err, out)
	out, _, err = fakeCLI(t, e, "operator-me", "stop", "jf-done")
	require.NoError(t, err, out)
	out, _, err = fakeCLI(t, e, "operator-other", "spawn", "--id", "jf-theirs", "--", "sleep", "300")
	require.NoError(t, err, out)
	s, _, _ := testStreams()
	f := testFactory(s)
	f.Getenv, f.ConnectUnits = e.Getenv, e.Connect
	call := mcptest.Caller(t, mcptest.Connect(t, mcpserver.New(nil, mcpserver.Options{Fleet: f, Caller: "operator-me"})))

	for _, c := range []struct {
		args []string
		exit int
		tool map[string]any // the same failure through agent_fleet
	}{
		{[]string{"status", "jf-nobody"}, exitNotFound, map[string]any{"action": "status", "id": "jf-nobody"}},
		{[]string{"logs", "jf-nobody"}, exitNotFound, map[string]any{"action": "logs", "id": "jf-nobody"}},
		{[]string{"stop", "jf-theirs"}, exitConflict, map[string]any{"action": "stop", "id": "jf-theirs"}},
		{[]string{"renew", "jf-theirs"}, exitConflict, map[string]any{"action": "renew", "id": "jf-theirs"}},
		{[]string{"forget", "jf-done"}, exitUsage, map[string]any{"action": "forget", "id": "jf-done"}},
		{[]string{"adopt", "jf-nobody"}, exitNotFound, map[string]any{"action": "adopt", "id": "jf-nobody"}},
		{[]string{"prune"}, exitUsage, map[string]any{"action": "prune"}},
		{[]string{"spawn", "--id", "bad id", "--", "true"}, exitUsage, nil},
		{[]string{"logs", "jf-done", "-n", "0"}, exitUsage, nil},
		{[]string{"status"}, exitUsage, nil},
		// A flag that cannot be parsed stops the parse before --json.
		{[]string{"list", "--bogus"}, exitUsage, nil},
		{[]string{"logs", "jf-done", "-n", "many"}, exitUsage, nil},
		{[]string{"spawn", "--id", "jf-x", "--lease", "soon", "--", "true"}, exitUsage, nil},
		{[]string{"intercom", "bogus"}, exitUsage, nil},
		{[]string{"bogus"}, exitUsage, nil},
	} {
		args := append(append([]string{}, c.args...), "--json")
		if i := slices.Index(c.args, "--"); i >= 0 {
			args = slices.Concat(c.args[:i], []string{"--json"}, c.args[i:])
		}
		stdout, stderr, err := fakeCLI(t, e, "operator-me", args...)
		require.Equal(t, c.exit, exitCode(err), "%v: %v\n%s", args, err, stderr)
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &v), "%v: stdout is the error object: %q", args, stdout)
		require.Equal(t, map[string]any{"ok": false, "error": err.Error()}, v, "%v", args)
		if c.tool != nil {
			r := call("agent_fleet", c.tool)
			require.True(t, r.IsError, "%v: %s", c.tool, r.Text)
			require.Equal(t, v, r.Structured, "the CLI's error object is agent_fleet's: %v", c.tool)
		}
	}

	// An intercom verb too: a session id that is no id is refused before
	// anything is sent.
	stdout, _, err := fakeCLI(t, e, "not an id", "intercom", "whoami", "--json")
	require.Equal(t, exitUsage, exitCode(err), "%v", err)
	require.JSONEq(t, `{"ok": false, "error": `+strconv.Quote(err.Error())+`}`, stdout)
	// Without --json, stdout stays empty.
	stdout, _, err = fakeCLI(t, e, "operator-me", "status", "jf-nobody")
	require.Equal(t, exitNotFound, exitCode(err))
	require.Empty(t, stdout)
	stdout, _, err = fakeCLI(t, e, "operator-me", "list", "--bogus")
	require.Equal(t, exitUsage, exitCode(err))
	require.Empty(t, stdout)
	// A "--json" that is another flag's value, or an argument after "--",
	// asks for nothing.
	stdout, _, err = fakeCLI(t, e, "operator-me", "spawn", "--id", "jf-role", "--role", "--json", "--", "false")
	require.Equal(t, exitFailure, exitCode(err), "%v", err)
	require.Empty(t, stdout)
	stdout, _, err = fakeCLI(t, e, "operator-me", "spawn", "--id", "bad id", "--", "echo", "--json")
	require.Equal(t, exitUsage, exitCode(err), "%v", err)
	require.Empty(t, stdout)
}

// The real binary, as a script runs it: an unknown flag before --json
// still gets the error object on stdout and the message on stderr.
func TestUnknownFlagUnderJSONPrintsTheErrorObject(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	cmd := agentFleet(t, shortDir(t), "list", "--bogus", "--json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	requireExit(t, cmd.Run(), exitUsage)
	var v map[string]any
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &v), "stdout: %q", stdout.String())
	require.Equal(t, map[string]any{"ok": false, "error": "unknown flag: --bogus"}, v)
	require.Equal(t, "agent-fleet: unknown flag: --bogus\n", stderr.String())
}

// An empty log is an empty list of lines on both surfaces, never null.
func TestEmptyLogIsAnEmptyList(t *testing.T) {
	t.Parallel()
	e := fleettest.New(t, "operator-me")
	out, _, err := fakeCLI(t, e, "operator-me", "spawn", "--id", "quiet", "--", "sleep", "300")
	require.NoError(t, err, out)
	t.Cleanup(func() { _, _, _ = fakeCLI(t, e, "operator-me", "stop", "quiet") })
	out, _, err = fakeCLI(t, e, "operator-me", "logs", "quiet", "--json")
	require.NoError(t, err, out)
	require.Equal(t, "{\"lines\":[]}\n", out)
	s, _, _ := testStreams()
	f := testFactory(s)
	f.Getenv, f.ConnectUnits = e.Getenv, e.Connect
	cs := mcptest.Connect(t, mcpserver.New(nil, mcpserver.Options{Fleet: f, Caller: "operator-me"}))
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "agent_fleet", Arguments: map[string]any{"action": "logs", "id": "quiet"}})
	require.NoError(t, err)
	raw, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	require.JSONEq(t, `{"lines": []}`, string(raw), "the wire form, not null")
	require.Len(t, res.Content, 1)
	require.Equal(t, "(the log of quiet is empty)", res.Content[0].(*mcp.TextContent).Text, "a model is told, not given an empty text")
	// The CLI prints nothing, as tail does; the note is for a terminal only.
	out, stderr, err := fakeCLI(t, e, "operator-me", "logs", "quiet")
	require.NoError(t, err, out)
	require.Empty(t, out)
	require.Empty(t, stderr)
}

// Every command that reports something takes --json; what does not is a
// server, an interactive show or a generator of help and scripts (the
// user-manager verbs print shell lines for eval, as completion does).
func TestEveryVerbTakesJSON(t *testing.T) {
	t.Parallel()
	s, _, _ := testStreams()
	exempt := []string{"agent-fleet broker", "agent-fleet mcp", "agent-fleet worker-shim", "agent-fleet demo",
		"agent-fleet help", "agent-fleet man", "agent-fleet completion bash", "agent-fleet completion fish",
		"agent-fleet completion powershell", "agent-fleet completion zsh",
		"agent-fleet user-manager start", "agent-fleet user-manager stop", "agent-fleet node run"}
	var lacking []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if !c.HasSubCommands() && c.Flags().Lookup("json") == nil && !slices.Contains(exempt, c.CommandPath()) {
			lacking = append(lacking, c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd(testFactory(s)))
	require.Empty(t, lacking)
}
