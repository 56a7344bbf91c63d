//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// A worker's role and command come from whoever spawned it, an agent
// perhaps: list, status and team show them with their control characters
// escaped — the command still pasteable, its odd argument ANSI-C quoted —
// so no table row breaks and no terminal obeys them; --json keeps them
// exact.
func TestWorkerRoleAndCommandAreEscapedForPeople(t *testing.T) {
	t.Parallel()
	unitstest.Require(t)
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	run := func(args ...string) (string, string) {
		t.Helper()
		cmd := as(t, dir, "operator-esc", args...)
		cmd.Env = append(cmd.Env, unitstest.Require(t).Env()...)
		cmd.Env = append(cmd.Env, "PATH="+os.Getenv("PATH"))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "%v\nstdout:\n%s\nstderr:\n%s", args, stdout.String(), stderr.String())
		return stdout.String(), stderr.String()
	}
	role, odd := "r\x1b[31mx\ny", "\x1b[31mred\n"
	run("spawn", "--id", "esc1", "--role", role, "--", "sh", "-c", "exec sleep 300", odd)
	t.Cleanup(func() { run("stop", "esc1", "--kill") })
	const shownRole = "r^[[31mx^Jy"
	const shownCommand = `sh -c 'exec sleep 300' $'\e[31mred\n'` // after sh's directory

	noControls := func(what, text string) {
		t.Helper()
		require.Equal(t, output.Lines(text), text, "%s passes on a control character:\n%q", what, text)
	}
	list, _ := run("list")
	noControls("list", list)
	lines := strings.Split(strings.TrimSuffix(list, "\n"), "\n")
	require.Len(t, lines, 2, "a header and one row:\n%s", list)
	require.Contains(t, lines[1], shownRole)
	require.Regexp(t, `  /\S*sh -c 'exec sleep 300' \$'\\e\[\S*…$`, lines[1], "the command (sh resolved), cut to 40 bytes")

	status, _ := run("status", "esc1")
	noControls("status", status)
	require.Contains(t, status, "\n  role:     "+shownRole+"\n")
	require.Regexp(t, `\n  command:  /\S*`+regexp.QuoteMeta(shownCommand)+`\n`, status)
	for _, l := range strings.Split(strings.TrimSuffix(status, "\n"), "\n")[1:] {
		require.True(t, strings.HasPrefix(l, "  "), "every line after the first is indented: %q", l)
	}

	team, _ := run("team")
	noControls("team", team)
	require.Contains(t, team, "- esc1 target=esc1 (exec, "+shownRole+", running)")

	out, _ := run("list", "--json")
	var ws []output.Worker
	require.NoError(t, json.Unmarshal([]byte(out), &ws), out)
	require.Len(t, ws, 1)
	require.Equal(t, role, ws[0].Role, "JSON carries the role exactly")
	require.Len(t, ws[0].Command, 4)
	require.Equal(t, []string{"-c", "exec sleep 300", odd}, ws[0].Command[1:])
}
