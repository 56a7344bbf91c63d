package main

import (
	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
)

type pauseOptions struct {
	fleetOptions
	Args verbs.Args
}

// newPauseCmd is pause (action "pause") or resume (action "resume"): one
// freezes a worker's cgroup, the other thaws it.
func newPauseCmd(f *factory.Factory, action string, runF func(*pauseOptions) error) *cobra.Command {
	opts := &pauseOptions{fleetOptions: newFleetOptions(f), Args: verbs.Args{Action: action}}
	cmd := &cobra.Command{
		Use:   "pause ID",
		Short: "Freeze a worker: its processes stop where they are until resume",
		Long: `Freeze every process of a running worker of yours (the cgroup2 freezer,
through systemd where it can, else through the unit's cgroup): it uses no
CPU until agent-fleet resume, and keeps its memory. Its idle lease does not
run down meanwhile: the janitor leaves it, and resume moves the deadline on
by the time it was paused. list and status show it as paused. Its intercom
session stays registered, but it cannot read or answer messages: they wait
for it. stop still works (it thaws the worker first).`,
		Example: "  agent-fleet pause builder\n  agent-fleet resume builder",
		Args:    oneArg("worker ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Args.ID = args[0]
			if runF != nil {
				return runF(opts)
			}
			return runFleetVerb(cmd.Context(), opts.fleetOptions, opts.Args)
		},
	}
	if action == "resume" {
		cmd.Use, cmd.Short = "resume ID", "Thaw a paused worker; its idle lease runs again"
		cmd.Long = `Let a worker that pause froze run again. Its idle lease's deadline (and a
pending checkpoint's grace) moves on by the time it was paused.`
		cmd.Example = "  agent-fleet resume builder"
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the worker as JSON")
	return cmd
}
