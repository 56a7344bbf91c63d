package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// streams are where a command reads and writes; tests inject buffers.
type streams struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

func defaultStreams() *streams { return &streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr} }

func newRootCmd(s *streams) *cobra.Command {
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
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	root.AddCommand(newVersionCmd(s), newBrokerCmd(s), newIntercomCmd(s), newMCPCmd(s),
		newSpawnCmd(s), newListWorkersCmd(s), newStatusWorkerCmd(s), newStopCmd(s), newLogsCmd(s), newWorkerShimCmd(s), newDoctorCmd(s), newCapabilitiesCmd(s),
		newAdoptCmd(s), newRenewCmd(s), newForgetCmd(s), newPruneCmd(s), newCleanupCmd(s), newInstallCmd(s), newUninstallCmd(s))
	root.AddCommand(newDemoCmd(s), newBenchCmd(s))
	root.AddCommand(newTeamCmd(s), newTeamsCmd(s))
	root.AddCommand(newManCmd(s))
	finishCommandTree(root)
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
					return &usageError{fmt.Errorf("no help topic %q (see agent-fleet help)", strings.Join(args, " "))}
				}
			}
			show(cmd, args)
			return nil
		}
	}
}

// usageArgs makes cobra's argument errors usage errors (exit 2), and makes
// a command that only groups others refuse an unknown subcommand (cobra
// would print its help and exit 0) while still printing its help alone.
func usageArgs(c *cobra.Command) {
	if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q (see %s --help)", args[0], cmd.CommandPath(), cmd.CommandPath())
			}
			return nil
		}
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return &usageError{err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		usageArgs(sub)
	}
}

// newLogger logs to w at level ("debug", "info", "warn", "error").
func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	switch strings.ToLower(level) {
	case "debug":
		l = slog.LevelDebug
	case "warn":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	default:
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}
