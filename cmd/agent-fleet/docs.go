package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/completion"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
)

// finishCommandTree adds what spans the whole command tree once every
// command is in it: `--version`, examples for cobra's own help and
// completion commands, and shell completion of worker ids (each verb the
// workers it can act on), intercom targets, team names and flags with a
// fixed set of values.
func finishCommandTree(root *cobra.Command, f *factory.Factory) {
	root.Version = f.Version
	root.SetVersionTemplate("agent-fleet {{.Version}}\n")
	root.DisableAutoGenTag = true // man pages stay reproducible

	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Example = "  agent-fleet help spawn\n  agent-fleet intercom send --help"
		case "completion":
			c.Example = completionExample
			for _, sh := range c.Commands() {
				sh.Example = completionShellExample[sh.Name()]
			}
		}
	}

	groupExamples(root)

	// Worker ids, each verb offered the workers it can act on.
	workers := func(pick completion.Pick) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return completion.WorkerIDs(context.Background(), f, pick), cobra.ShellCompDirectiveNoFileComp
		}
	}
	firstArg := func(list func(context.Context, *factory.Factory) []string) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return list(context.Background(), f), cobra.ShellCompDirectiveNoFileComp
		}
	}
	for _, a := range []struct {
		path []string
		fn   func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective)
	}{
		{[]string{"status"}, workers(completion.AnyWorker)},
		{[]string{"logs"}, workers(completion.AnyWorker)},
		{[]string{"stop"}, workers(completion.MyLiveWorker)},
		{[]string{"renew"}, workers(completion.MyLiveWorker)},
		{[]string{"forget"}, workers(completion.MyEndedWorker)},
		{[]string{"adopt"}, workers(completion.OthersLiveWorker)},
		{[]string{"intercom", "send"}, firstArg(completion.Sessions)},
		{[]string{"intercom", "ask"}, firstArg(completion.Sessions)},
		{[]string{"teams", "join"}, firstArg(completion.Teams)},
	} {
		if c, _, err := root.Find(a.path); err == nil && c.Name() == a.path[len(a.path)-1] && c.ValidArgsFunction == nil {
			c.ValidArgsFunction = a.fn
		}
	}
	if c, _, err := root.Find([]string{"intercom", "pending"}); err == nil && c.Flags().Lookup("inbox-of") != nil {
		_ = c.RegisterFlagCompletionFunc("inbox-of", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return completion.WorkerIDs(context.Background(), f, completion.MyLiveWorker), cobra.ShellCompDirectiveNoFileComp
		})
	}
	fixed := func(values ...string) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return values, cobra.ShellCompDirectiveNoFileComp
		}
	}
	kinds := []string{"exec"}
	for k := range harness.Executables {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds[1:])
	flagValues := []struct {
		path   []string
		flag   string
		values []string
	}{
		{[]string{"spawn"}, "kind", kinds},
		{[]string{"spawn"}, "permission", harness.PermissionValues()},
		{[]string{"intercom", "reply"}, "which", []string{"oldest", "latest"}},
		{[]string{"usage"}, "by", fleet.UsageBy},
		{[]string{"broker"}, "log-level", []string{"debug", "info", "warn", "error"}},
		{[]string{"mcp"}, "log-level", []string{"debug", "info", "warn", "error"}},
	}
	for _, fv := range flagValues {
		c, _, err := root.Find(fv.path)
		if err != nil || c.Flags().Lookup(fv.flag) == nil {
			continue
		}
		_ = c.RegisterFlagCompletionFunc(fv.flag, fixed(fv.values...))
	}
}

// groupExamples gives a command group without an example of its own the
// first example of each of its subcommands.
func groupExamples(c *cobra.Command) {
	var lines []string
	for _, sub := range c.Commands() {
		groupExamples(sub)
		if sub.IsAvailableCommand() && sub.Example != "" {
			lines = append(lines, strings.SplitN(sub.Example, "\n", 2)[0])
		}
	}
	if c.Example == "" && len(lines) > 0 {
		c.Example = strings.Join(lines, "\n")
	}
}

const completionExample = `  # bash (needs the bash-completion package): this shell, or every new one
  source <(agent-fleet completion bash)
  mkdir -p ~/.local/share/bash-completion/completions && agent-fleet completion bash > ~/.local/share/bash-completion/completions/agent-fleet
  # zsh (with compinit enabled)
  agent-fleet completion zsh > "${fpath[1]}/_agent-fleet"
  # fish
  mkdir -p ~/.config/fish/completions && agent-fleet completion fish > ~/.config/fish/completions/agent-fleet.fish`

// completionShellExample is each shell's completion command's example:
// where its script goes, the directory made first.
var completionShellExample = map[string]string{
	"bash": "  # needs the bash-completion package (apt-get install bash-completion), which loads it in new shells\n" +
		"  mkdir -p ~/.local/share/bash-completion/completions && agent-fleet completion bash > ~/.local/share/bash-completion/completions/agent-fleet\n" +
		"  source <(agent-fleet completion bash)   # this shell only",
	"zsh":        `  agent-fleet completion zsh > "${fpath[1]}/_agent-fleet"   # with compinit enabled`,
	"fish":       "  mkdir -p ~/.config/fish/completions && agent-fleet completion fish > ~/.config/fish/completions/agent-fleet.fish",
	"powershell": "  agent-fleet completion powershell > agent-fleet.ps1  # then: . ./agent-fleet.ps1 (add it to $PROFILE)",
}

// completion.Pick says which workers a verb's completion offers.
type manOptions struct {
	IO      *factory.IOStreams
	Version string
	Getenv  func(string) string
	section string
}

func newManCmd(f *factory.Factory) *cobra.Command {
	opts := &manOptions{IO: f.IO, Version: f.Version, Getenv: f.Env}
	cmd := &cobra.Command{
		Use:   "man [DIR]",
		Short: "Write man pages for every command (to DIR, default ~/.local/share/man/man1)",
		Long: `Write one man page per command (agent-fleet.1, agent-fleet-spawn.1,
agent-fleet-intercom-send.1, …), generated from the same command tree as
--help, to DIR (created if missing; default ~/.local/share/man/man1).

man finds pages below MANPATH, or, without it, in the man directories beside
the directories of PATH (~/.local/bin on PATH makes man search
~/.local/share/man), and reads section 1 from their man1 directories. When
man would not search DIR's parent, man says so and prints the MANPATH line
that fixes it; a DIR not named man1 (man<section>) no MANPATH can make man
search; "man -l FILE" reads one page wherever it is.`,
		Example: `  agent-fleet man && man agent-fleet-spawn
  agent-fleet man /tmp/man1 && man -l /tmp/man1/agent-fleet-spawn.1`,
		Args: optionalArg("directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := ""
			if len(args) > 0 {
				dir = args[0]
			}
			return manRun(cmd.Root(), dir, opts)
		},
	}
	cmd.Flags().StringVar(&opts.section, "section", "1", "man section of the pages")
	return cmd
}

func manRun(root *cobra.Command, dir string, opts *manOptions) error {
	if opts.section == "" || strings.ContainsAny(opts.section, "/. \t") {
		return factory.Usagef("--section %q: a man section is a name such as 1 or 1x", opts.section)
	} else if dir == "" {
		home := opts.Getenv("HOME")
		if home == "" {
			return factory.Usagef("HOME is not set: name the directory (agent-fleet man DIR)")
		}
		dir = filepath.Join(home, ".local", "share", "man", "man"+opts.section)
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	date := buildTime()
	// No Title: cobra titles each page after its command
	// (AGENT-FLEET-SPAWN(1)), as man pages of subcommands are.
	header := &doc.GenManHeader{
		Section: opts.section,
		Source:  "agent-fleet " + opts.Version,
		Manual:  "agent-fleet manual",
		Date:    &date,
	}
	if err := doc.GenManTree(root, header, dir); err != nil {
		return fmt.Errorf("write man pages to %s: %w", dir, err)
	}
	pages, _ := filepath.Glob(filepath.Join(dir, "agent-fleet*."+opts.section))
	fmt.Fprintf(opts.IO.Out, "wrote %d man pages to %s\n", len(pages), dir)
	page := filepath.Join(dir, "agent-fleet-spawn."+opts.section)
	if filepath.Base(dir) != "man"+opts.section {
		// man reads section N from the manN directory of a MANPATH entry:
		// no MANPATH finds pages anywhere else.
		fmt.Fprintf(opts.IO.Out, "man finds section %s pages only in a directory named man%s (agent-fleet man %s), so not here; read a page with: man -l %s\n",
			opts.section, opts.section, filepath.Join(dir, "man"+opts.section), page)
		return nil
	}
	if note := manPathNote(filepath.Dir(dir), page, opts.Getenv); note != "" {
		fmt.Fprint(opts.IO.Out, note)
	}
	return nil
}

// manPathNote says how to make man search base (the parent of a man1
// directory) when man-db's manpath does not list it, and how to read page
// meanwhile; "" when it does, or when there is no manpath to ask.
func manPathNote(base, page string, getenv func(string) string) string {
	manpath, err := exec.LookPath("manpath")
	if err != nil {
		return ""
	}
	cmd := exec.Command(manpath, "-q")
	cmd.Env = os.Environ()
	for _, k := range []string{"MANPATH", "PATH", "HOME"} {
		cmd.Env = append(cmd.Env, k+"="+getenv(k))
	}
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	for _, d := range filepath.SplitList(strings.TrimSpace(string(out))) {
		if filepath.Clean(d) == base {
			return ""
		}
	}
	line := fmt.Sprintf("export MANPATH=%q", base+":") // the empty entry keeps the system's pages
	if cur := getenv("MANPATH"); cur != "" {
		line = fmt.Sprintf("export MANPATH=%q", base+":"+cur)
	}
	return fmt.Sprintf("man does not search %s yet; add to your shell's profile:\n  %s\nor read a page with: man -l %s\n",
		base, line, page)
}

// buildTime is the commit time of this build (vcs.time), else now: man
// pages of one build carry one date.
func buildTime() time.Time {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, st := range bi.Settings {
			if st.Key == "vcs.time" {
				if t, err := time.Parse(time.RFC3339, st.Value); err == nil {
					return t
				}
			}
		}
	}
	return time.Now()
}
