//go:build !windows

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/fleettest"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/teams"
)

// commands lists every command a user can run (and root), hidden ones
// excluded, cobra's help command included.
func commands(root *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{root}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Deprecated != "" {
				continue
			}
			out = append(out, sub)
			walk(sub)
		}
	}
	walk(root)
	return out
}

// Every command has --help with an example (the issue asks for it of
// every command, cobra's own help and completion included).
func TestEveryCommandHasHelpWithAnExample(t *testing.T) {
	t.Parallel()
	root := newRootCmd(testFactory(factory.System()))
	all := commands(root)
	require.Greater(t, len(all), 40)
	for _, c := range all {
		require.NotEmpty(t, strings.TrimSpace(c.Example), "%q has no example in its --help", c.CommandPath())
		require.NotEmpty(t, c.Short, "%q has no summary", c.CommandPath())
		args := append(strings.Fields(strings.TrimPrefix(c.CommandPath(), "agent-fleet")), "--help")
		out, err := runCLI(t, args...)
		require.NoError(t, err, "%v", args)
		require.Contains(t, out, "Examples:\n", "%v", args)
		require.Contains(t, out, strings.SplitN(c.Example, "\n", 2)[0], "%v", args)
	}
}

func TestVersionAndBuildInfo(t *testing.T) {
	t.Parallel()
	out, err := runCLI(t, "--version")
	require.NoError(t, err)
	require.Equal(t, "agent-fleet "+factory.BuildVersion(version)+"\n", out)
	out, err = runCLI(t, "version")
	require.NoError(t, err)
	require.Contains(t, out, "agent-fleet "+factory.BuildVersion(version)+"\nprotocol: pi-intercom v4\ngo: ")
	out, err = runCLI(t, "version", "--json")
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Equal(t, factory.BuildVersion(version), v["version"])
	require.Equal(t, "pi-intercom v4", v["protocol"])

	// A release build names its version at link time.
	bin := filepath.Join(t.TempDir(), "agent-fleet")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=v9.8.7", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	res, err := build.CombinedOutput()
	require.NoError(t, err, "%s", res)
	res, err = exec.Command(bin, "--version").Output()
	require.NoError(t, err)
	require.Equal(t, "agent-fleet v9.8.7\n", string(res))
	res, err = exec.Command(bin, "version", "--json").Output()
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(res, &v))
	require.Equal(t, "github.com/agent-fleet/agent-fleet", v["module"])
	require.Equal(t, "0", v["cgo"])
}

func TestCompletionScripts(t *testing.T) {
	t.Parallel()
	for _, sh := range []string{"bash", "zsh", "fish", "powershell"} {
		out, err := runCLI(t, "completion", sh)
		require.NoError(t, err, sh)
		require.Contains(t, out, "agent-fleet", sh)
		require.Contains(t, out, "__complete", "%s: completions come from the binary, so they follow the command tree", sh)
	}
	bash, err := exec.LookPath("bash")
	require.NoError(t, err)
	script, _ := runCLI(t, "completion", "bash")
	path := filepath.Join(t.TempDir(), "agent-fleet.bash")
	require.NoError(t, os.WriteFile(path, []byte(script), 0o644))
	out, err := exec.Command(bash, "-c", "source "+path+" && complete -p agent-fleet").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "__start_agent-fleet")

	// Worker ids complete from the registry, with state and manager; a
	// missing registry is not created by a completion.
	dir := shortDir(t)
	in := cliIn{env: map[string]string{"PI_CODING_AGENT_DIR": dir, "AGENT_INTERCOM_SESSION_ID": "operator-me"}}
	p := intercom.NewPaths(dir)
	comp, err := in.run(t, "__complete", "stop", "")
	require.NoError(t, err)
	require.NotContains(t, comp, "\t")
	require.NoDirExists(t, p.OrchestratorDir())
	fleettest.RecordWorkers(t, p, "operator-me", "w-alpha", "w-beta")
	for _, verb := range []string{"stop", "status", "logs", "renew"} {
		comp, err = in.run(t, "__complete", verb, "")
		require.NoError(t, err)
		require.Contains(t, comp, "w-alpha\trunning, manager operator-me\n", verb)
		require.Contains(t, comp, "w-beta\t", verb)
	}
	comp, err = in.run(t, "__complete", "stop", "w-alpha", "")
	require.NoError(t, err)
	require.NotContains(t, comp, "w-beta", "one worker per stop")
	comp, err = runCLI(t, "__complete", "spawn", "--kind", "")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(comp, "exec\n"), comp)
	comp, err = runCLI(t, "__complete", "intercom", "reply", "--which", "")
	require.NoError(t, err)
	require.Contains(t, comp, "oldest\nlatest\n")
	comp, err = runCLI(t, "__complete", "usage", "--by", "")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(comp, "worker\nmanager\nkind\n"), comp)
}

// Each verb completes the workers it can act on, through the binary's
// __complete: stop and renew the caller's live ones, forget its ended
// ones, adopt other managers' live ones, status and logs all; send and ask
// complete the sessions of a running broker (and start none), teams join
// the named teams, spawn --permission its values.
func TestCompletionOffersWhatEachVerbTakes(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	p := intercom.NewPaths(dir)
	complete := func(args ...string) string {
		t.Helper()
		out, err := as(t, dir, "operator-me", append([]string{"__complete"}, args...)...).Output()
		require.NoError(t, err, "%v", args)
		return string(out)
	}
	ids := func(out string) []string {
		var got []string
		for _, line := range strings.Split(out, "\n") {
			if line != "" && !strings.HasPrefix(line, ":") {
				id, _, _ := strings.Cut(line, "\t")
				got = append(got, id)
			}
		}
		return got
	}
	fleettest.RecordWorkers(t, p, "operator-me", "w-mine")
	fleettest.RecordWorkers(t, p, "someone-else", "w-theirs")
	reg := fleettest.RecordWorkers(t, p, "operator-me", "w-done")
	ws, err := reg.List(context.Background(), fleet.Filter{})
	require.NoError(t, err)
	for _, w := range ws {
		if w.ID == "w-done" {
			_, err := reg.Update(context.Background(), w.ID, w.RunID, func(r *fleet.Worker) error { r.State = fleet.StateExited; return nil })
			require.NoError(t, err)
		}
	}
	for verb, want := range map[string][]string{
		"stop": {"w-mine"}, "renew": {"w-mine"}, "forget": {"w-done"}, "adopt": {"w-theirs"},
		"status": {"w-done", "w-mine", "w-theirs"}, "logs": {"w-done", "w-mine", "w-theirs"},
	} {
		require.ElementsMatch(t, want, ids(complete(verb, "")), verb)
	}

	perm := ids(complete("spawn", "--permission", ""))
	require.Subset(t, perm, []string{"read-only", "workspace-write", "full"})

	require.Empty(t, ids(complete("teams", "join", "")), "no named teams yet")
	_, _, err = teams.NewStore(p).Create(context.Background(), "billing", "operator-me")
	require.NoError(t, err)
	require.Equal(t, []string{"billing"}, ids(complete("teams", "join", "")))

	require.Empty(t, ids(complete("intercom", "send", "")), "no broker runs")
	require.NoFileExists(t, filepath.Join(dir, "intercom", "broker.pid"), "a completion starts no broker")
	cmd := as(t, dir, "alpha", "intercom", "listen", "--json")
	cmd.Env = append(cmd.Env, "AGENT_INTERCOM_SESSION_NAME=Reviewer")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.Eventually(t, func() bool { return intercom.HolderAlive(p, "alpha") }, 10*time.Second, 10*time.Millisecond)
	for _, verb := range []string{"send", "ask"} {
		got := ids(complete("intercom", verb, ""))
		require.Contains(t, got, "alpha", verb)
		require.Contains(t, got, "Reviewer", verb)
	}
	require.Empty(t, ids(complete("intercom", "send", "alpha", "")), "the text is not completed")
}

func TestManPages(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "man1")
	out, err := runCLI(t, "man", dir, "--section", "")
	require.Equal(t, exitUsage, exitCode(err), "%v", err)
	require.Contains(t, err.Error(), "a man section is a name", out)
	out, err = runCLI(t, "man", dir)
	require.NoError(t, err, out)
	root := newRootCmd(testFactory(factory.System()))
	n := 0
	for _, c := range commands(root) {
		if c.Name() == "help" {
			continue // cobra's help command gets no page of its own
		}
		n++
		page := filepath.Join(dir, strings.ReplaceAll(c.CommandPath(), " ", "-")+".1")
		data, err := os.ReadFile(page)
		require.NoError(t, err, "no man page for %q", c.CommandPath())
		title := strings.ToUpper(strings.ReplaceAll(c.CommandPath(), " ", "-"))
		require.Contains(t, string(data), `.TH "`+title+`" "1"`, "each page is titled after its command")
		require.Contains(t, string(data), ".SH EXAMPLE", page)
	}
	require.Contains(t, out, fmt.Sprintf("wrote %d man pages", n))
	require.NoFileExists(t, filepath.Join(dir, "agent-fleet-worker-shim.1"), "hidden commands stay hidden")
	if man, err := exec.LookPath("man"); err == nil {
		cmd := exec.Command(man, "-l", filepath.Join(dir, "agent-fleet-spawn.1"))
		cmd.Env = append(os.Environ(), "MANPAGER=cat", "PAGER=cat", "MANWIDTH=100")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "agent-fleet-spawn")
		require.Contains(t, string(out), "AGENT-FLEET-SPAWN(1)")
		require.Contains(t, string(out), "EXAMPLE")
	}
}

// Without a directory, man writes to ~/.local/share/man/man1 and says
// how to make man search there when it does not; where MANPATH names
// the directory, `man agent-fleet-spawn` finds the page.
func TestManPagesWhereManFindsThem(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("manpath"); err != nil {
		t.Skip("no man-db here:", err)
	}
	home := t.TempDir()
	base := filepath.Join(home, ".local", "share", "man")
	in := cliIn{env: map[string]string{"HOME": home, "MANPATH": "/usr/share/man", "PATH": "/usr/bin:/bin"}}
	out, err := in.run(t, "man")
	require.NoError(t, err, out)
	require.Contains(t, out, "man pages to "+filepath.Join(base, "man1")+"\n")
	require.FileExists(t, filepath.Join(base, "man1", "agent-fleet-spawn.1"))
	require.Contains(t, out, "man does not search "+base)
	require.Contains(t, out, `export MANPATH="`+base+`:/usr/share/man"`)

	in.env["MANPATH"] = base + ":"
	out, err = in.run(t, "man")
	require.NoError(t, err, out)
	require.NotContains(t, out, "man does not search", "man searches it now")
	cmd := exec.Command("man", "agent-fleet-spawn")
	cmd.Env = append(os.Environ(), "MANPATH="+base+":", "MANPAGER=cat", "PAGER=cat", "MANWIDTH=100")
	page, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", page)
	require.Contains(t, string(page), "AGENT-FLEET-SPAWN(1)")

	// A directory not named man1 is no MANPATH entry's: no MANPATH line.
	other := filepath.Join(home, "pages")
	out, err = in.run(t, "man", other)
	require.NoError(t, err, out)
	require.FileExists(t, filepath.Join(other, "agent-fleet-spawn.1"))
	require.NotContains(t, out, "MANPATH=")
	require.Contains(t, out, "man finds section 1 pages only in a directory named man1 (agent-fleet man "+filepath.Join(other, "man1")+")")
	require.Contains(t, out, "man -l "+filepath.Join(other, "agent-fleet-spawn.1"))
}

// Command-line mistakes exit 2, whichever layer catches them: cobra's
// argument checks, unknown commands at every level, missing required flags,
// bad flag values; a grouping command alone prints its help (exit 0).
func TestUsageMistakesExit2(t *testing.T) {
	t.Parallel()
	in := cliIn{env: map[string]string{"PI_CODING_AGENT_DIR": shortDir(t), "AGENT_INTERCOM_SESSION_ID": "usage-test"}}
	for _, args := range [][]string{
		{"frobnicate"}, {"intercom", "frob"}, {"teams", "frob"}, {"bench", "frob"},
		{"status"}, {"stop"}, {"logs"}, {"list", "foo"}, {"spawn", "--", "sleep", "5"},
		{"intercom", "send"}, {"intercom", "send", "a", "b", "c"}, {"intercom", "ask"},
		{"help", "nosuch"}, {"help", "intercom", "nosuch"},
		{"spawn", "--id", "w1", "--no-such-flag"}, {"spawn", "--id", "w1"}, {"spawn", "--id", "w1", "--kind", "exec"}, {"logs", "w1", "-n", "x"}, {"logs", "w1", "-n", "0"}, {"logs", "w1", "-n", "-5"},
	} {
		_, err := in.run(t, args...)
		require.Error(t, err, "%v", args)
		require.Equal(t, exitUsage, exitCode(err), "%v: %v", args, err)
	}
	for _, args := range [][]string{{}, {"intercom"}, {"teams"}, {"bench"}, {"help"}, {"help", "intercom", "send"}} {
		out, err := in.run(t, args...)
		require.NoError(t, err, "%v", args)
		require.Contains(t, out, "Usage:", "%v", args)
	}
}

// doctor's --timeout is --pair's: given alone, it is a usage error, not
// ignored.
func TestDoctorTimeoutNeedsPair(t *testing.T) {
	t.Parallel()
	for _, d := range []string{"1s", "1m"} { // 1m is the default: given, it is still refused
		_, err := runCLI(t, "doctor", "--timeout", d)
		require.Equal(t, exitUsage, exitCode(err), "%s: %v", d, err)
		require.Contains(t, err.Error(), "it needs --pair")
	}
}
