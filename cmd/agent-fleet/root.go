package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
)

// execCLI runs agent-fleet with args over f, as main does. A command that
// fails under --json without having printed anything on stdout prints the
// error object there, {"ok": false, "error": "…"} — what agent_fleet's
// structuredContent holds for a failure — so a script reading stdout
// always gets JSON; the message still goes to stderr and the exit status
// is the error's.
//
// That holds for usage errors too: a flag cobra could not parse stops the
// parse before a later --json is seen, so then the arguments themselves
// say whether JSON was asked for.
func execCLI(ctx context.Context, f *factory.Factory, args []string) error {
	out := &watchedWriter{w: f.IO.Out}
	f.IO = &factory.IOStreams{In: f.IO.In, Out: out, Err: f.IO.Err}
	root := newRootCmd(f)
	root.SetArgs(args)
	flagsFailed := false
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		flagsFailed = true
		return factory.Usage(err)
	})
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil && wantsJSON(cmd, args, flagsFailed) && !out.wrote.Load() {
		_ = output.PrintJSON(out, output.Failure(err))
	}
	return err
}

// wantsJSON reports whether cmd was given --json. When cmd's flags were
// parsed, its json flag says; when they could not be (an unknown flag, a
// bad value, or a command without --json such as a group given an unknown
// subcommand), args do: a --json or --json=true before any "--".
func wantsJSON(cmd *cobra.Command, args []string, flagsFailed bool) bool {
	if cmd != nil {
		fl := cmd.Flags().Lookup("json")
		if fl != nil && fl.Changed {
			return fl.Value.String() == "true"
		}
		if fl != nil && !flagsFailed {
			return false // parsed and not given: a "--json" in args is some flag's value
		}
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--json" {
			return true
		}
		if v, ok := strings.CutPrefix(a, "--json="); ok {
			b, err := strconv.ParseBool(v)
			return err == nil && b
		}
	}
	return false
}

// watchedWriter is a writer that remembers whether anything was written.
type watchedWriter struct {
	w     io.Writer
	wrote atomic.Bool
}

func (w *watchedWriter) Write(p []byte) (int, error) {
	if len(p) > 0 {
		w.wrote.Store(true)
	}
	return w.w.Write(p)
}
func (w *watchedWriter) Unwrap() io.Writer { return w.w } // a worker's command writes to the file itself

// newRootCmd is the whole command tree over f.
func newRootCmd(f *factory.Factory) *cobra.Command {
	root := &cobra.Command{
		Use:   "agent-fleet",
		Short: "Intercom and fleet management for coding agents on one machine",
		Long: `agent-fleet lets coding agents (Claude Code, Codex, OpenCode, Pi, or any
command) on one machine find each other and talk through a local intercom
broker speaking Agent Intercom protocol v4, and lets a manager run workers as
systemd user services.

Start with "agent-fleet doctor" (what this host offers), "agent-fleet demo"
(everything at work for a few seconds) and "agent-fleet help COMMAND".`,
		Example: `  agent-fleet doctor
  AGENT_INTERCOM_SESSION_ID=alpha agent-fleet intercom listen
  AGENT_INTERCOM_SESSION_ID=beta agent-fleet intercom send alpha "the build is green"
  agent-fleet spawn --id w1 -- sleep 600
  agent-fleet list
  agent-fleet stop w1`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(f.IO.In)
	root.SetOut(f.IO.Out)
	root.SetErr(f.IO.Err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return factory.Usage(err) })
	root.AddCommand(newVersionCmd(f, nil), newBrokerCmd(f, nil), newIntercomCmd(f), newMCPCmd(f, nil),
		newSpawnCmd(f, nil), newListCmd(f, nil), newStatusCmd(f, nil), newStopCmd(f, nil), newWaitCmd(f, nil),
		newPauseCmd(f, "pause"), newPauseCmd(f, "resume"), newLogsCmd(f, nil), newUsageCmd(f, nil),
		newWorkerShimCmd(f), newDoctorCmd(f, nil), newCapabilitiesCmd(f, nil),
		newAdoptCmd(f, nil), newRenewCmd(f, nil), newForgetCmd(f, nil), newPruneCmd(f, nil), newCleanupCmd(f, nil),
		newInstallCmd(f, nil), newUninstallCmd(f, nil), newUserManagerCmd(f))
	root.AddCommand(newDemoCmd(f, nil), newBenchCmd(f))
	root.AddCommand(newTeamCmd(f, nil), newTeamsCmd(f))
	root.AddCommand(newManCmd(f), newUICmd(f, nil), newNodeCmd(f))
	finishCommandTree(root, f)
	usageArgs(root)
	strictHelp(root)
	return root
}

// strictHelp makes "help TOPIC" of an unknown topic a usage error (cobra
// prints "Unknown help topic" and exits 0).
func strictHelp(root *cobra.Command) {
	for _, c := range root.Commands() {
		if c.Name() != "help" || c.Run == nil {
			continue
		}
		show := c.Run
		c.Run = nil
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				if found, rest, err := root.Find(args); err != nil || len(rest) > 0 || found == root {
					return factory.Usagef("no help topic %q (see agent-fleet help)", strings.Join(args, " "))
				}
			}
			show(cmd, args)
			return nil
		}
	}
}

// usageArgs makes cobra's argument errors usage errors (exit 2), and makes
// a command that only groups others refuse an unknown subcommand (cobra
// would print its help and exit 0), with cobra's "Did you mean this?"
// suggestions, while still printing its help alone.
func usageArgs(c *cobra.Command) {
	if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				msg := fmt.Sprintf("unknown command %q for %q (see %s --help)", args[0], cmd.CommandPath(), cmd.CommandPath())
				if cmd.SuggestionsMinimumDistance <= 0 {
					cmd.SuggestionsMinimumDistance = 2 // cobra's own default for its unknown-command error
				}
				if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
					msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
				}
				return errors.New(msg)
			}
			return nil
		}
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return factory.Usage(err)
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		usageArgs(sub)
	}
}
