package main

import (
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
	return root
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
