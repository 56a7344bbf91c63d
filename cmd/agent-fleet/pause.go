package main

import (
	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
)

// newPauseCmd is pause or resume (action; verbs.PauseHelp has their
// texts): one freezes a worker's cgroup, the other thaws it.
func newPauseCmd(f *factory.Factory, action string) *cobra.Command {
	opts, h := newFleetOptions(f), verbs.PauseHelp[action]
	cmd := &cobra.Command{Use: h.Use, Short: h.Short, Long: h.Long, Example: h.Example, Args: oneArg("worker ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runFleetVerb(cmd.Context(), opts, verbs.Args{Action: action, ID: args[0]})
		}}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the worker as JSON")
	return cmd
}
