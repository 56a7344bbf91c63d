//go:build !windows

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/fleet"
)

// `mcp --help` registers the server the way the README and contrib/mcp do:
// no session id in the registration (every session started from it would
// claim the same id), the id given to each session as it starts.
func TestMCPHelpRegistersWithoutAFixedID(t *testing.T) {
	t.Parallel()
	out, err := runCLI(t, "mcp", "--help")
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	script, err := os.ReadFile(filepath.Join("..", "..", "contrib", "mcp", "claude-mcp-add.sh"))
	require.NoError(t, err)
	adds := regexp.MustCompile(`claude mcp add [^\n`+"`"+`]*`).FindAllString(out, -1)
	require.NotEmpty(t, adds, "mcp --help shows how to register the server:\n%s", out)
	for _, add := range adds {
		add = strings.TrimSpace(add)
		require.NotContains(t, add, "INTERCOM_SESSION_ID", "a fixed id in a registration is what the README forbids")
		require.NotContains(t, add, " -e ", add)
		require.Contains(t, string(readme), "`"+add+"`", "the README registers the server the same way")
		require.Contains(t, string(script), add+"\n", "contrib/mcp/claude-mcp-add.sh registers it the same way")
	}
	require.Contains(t, out, "AGENT_INTERCOM_SESSION_ID=reviewer claude", "the id goes to the session as it starts")
}

// A missing or extra argument is named, with the usage line, not cobra's
// "accepts 1 arg(s), received 0"; an unknown command gets cobra's "Did
// you mean this?". All exit 2.
func TestUsageMessagesNameTheArgument(t *testing.T) {
	t.Parallel()
	in := cliIn{env: map[string]string{"PI_CODING_AGENT_DIR": shortDir(t), "AGENT_INTERCOM_SESSION_ID": "usage-test"}}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"stop"}, "stop needs a worker ID, or --all (usage: agent-fleet stop ID... | --all"},
		{[]string{"status"}, "status needs a worker ID (usage: agent-fleet status ID"},
		{[]string{"logs"}, "logs needs a worker ID"},
		{[]string{"forget", "--acknowledge"}, "forget needs a worker ID"},
		{[]string{"status", "a", "b c"}, `status takes one worker ID, not 2 ("a" "b c")`},
		{[]string{"renew", "a", "b"}, `renew takes at most one worker ID, not 2 ("a" "b")`},
		{[]string{"adopt", "a", "b"}, `adopt takes at most one worker ID, not 2`},
		{[]string{"intercom", "send"}, "send needs a target session (its id or name), then the text or - for stdin"},
		{[]string{"intercom", "ask"}, "ask needs a target session"},
		{[]string{"intercom", "send", "a", "b", "c"}, "send takes a target and one text, not 3 arguments: quote the text"},
		{[]string{"intercom", "reply", "a", "b"}, "reply takes at most one text, not 2"},
		{[]string{"man", "a", "b"}, "man takes at most one directory, not 2"},
		{[]string{"stpo"}, "unknown command \"stpo\" for \"agent-fleet\" (see agent-fleet --help)\n\nDid you mean this?\n\tstop"},
		{[]string{"intercom", "sedn"}, "Did you mean this?\n\tsend"},
		{[]string{"teams", "lst"}, "Did you mean this?\n\tlist"},
	} {
		out, err := in.run(t, c.args...)
		require.Error(t, err, "%v", c.args)
		require.Equal(t, exitUsage, exitCode(err), "%v: %v", c.args, err)
		require.Contains(t, err.Error(), c.want, "%v", c.args)
		require.NotContains(t, err.Error()+out, "arg(s)", "%v", c.args)
	}
	_, err := in.run(t, "frobnicate")
	require.NotContains(t, err.Error(), "Did you mean", "nothing near enough to suggest")
}

// Counts in fleet texts agree with their nouns.
func TestFleetTextsArePluralCorrect(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		r    output.Report
		want string
	}{
		{output.DeletedReport{ID: "w1", Deleted: 1}, "Forgot 1 ended record of w1."},
		{output.DeletedReport{ID: "w1", Deleted: 2}, "Forgot 2 ended records of w1."},
		{output.DeletedReport{Deleted: 1}, "Pruned 1 ended record."},
		{output.DeletedReport{Deleted: 0}, "Pruned 0 ended records."},
		{output.StopReport{Res: &fleet.StopResult{Worker: &fleet.Worker{ID: "w1"}, Killed: []int{7}}},
			"Stopped w1; 1 process outlived the stop and was killed; nothing of it is left in its cgroup."},
		{output.StopReport{Res: &fleet.StopResult{Worker: &fleet.Worker{ID: "w1"}, Killed: []int{7, 8}}},
			"Stopped w1; 2 processes outlived the stop and were killed; nothing of it is left in its cgroup."},
	} {
		require.Equal(t, c.want, c.r.Text(output.CLI))
	}
	require.Equal(t, "1 process", output.Plural(1, "process"))
	require.Equal(t, "3 sessions", output.Plural(3, "session"))
}

// A one-line summary that names an optional argument says what happens
// without it: the top-level help is all many people read.
func TestSummariesOfOptionalArgumentsSayTheDefault(t *testing.T) {
	t.Parallel()
	out, err := runCLI(t, "--help")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^  man +Write man pages for every command \(to DIR, default ~/\.local/share/man/man1\)$`, out)
	s, _, _ := testStreams()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, m := range regexp.MustCompile(`\[([A-Z_]+)[]|]`).FindAllStringSubmatch(c.Use, -1) {
			if regexp.MustCompile(`\b` + m[1] + `\b`).MatchString(c.Short) {
				require.Contains(t, c.Short, "default", "%s: %q names the optional %s", c.CommandPath(), c.Short, m[1])
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd(testFactory(s)))
}

// renew takes its worker id as its argument: its help lists no --id flag
// (required, it said), which spawn alone has.
func TestRenewHelpHasNoIDFlag(t *testing.T) {
	out, err := runCLI(t, "renew", "--help")
	require.NoError(t, err)
	require.NotContains(t, out, "--id")
	require.Contains(t, out, "renew [ID]")
	out, err = runCLI(t, "spawn", "--help")
	require.NoError(t, err)
	require.Contains(t, out, "--id string")
}
