package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
)

type stopOptions struct {
	fleetOptions
	ID string
}

func newStopCmd(f *factory.Factory, runF func(*stopOptions) error) *cobra.Command {
	opts := &stopOptions{fleetOptions: newFleetOptions(f)}
	cmd := &cobra.Command{
		Use:   "stop ID",
		Short: "Stop a worker and prove that nothing it started survives",
		Long: `Stop the worker's unit (SIGTERM, then SIGKILL to its whole cgroup), wait
until it is inactive, read its cgroup, SIGKILL anything left, and read it
again: the stop succeeds only when the cgroup is empty. Processes that could
not be killed are reported (exit 1).`,
		Example: "  agent-fleet stop tests",
		Args:    oneArg("worker ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if runF != nil {
				return runF(opts)
			}
			return stopRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the result as JSON")
	return cmd
}

func stopRun(ctx context.Context, opts *stopOptions) error {
	return runFleetVerb(ctx, opts.fleetOptions, verbs.Args{Action: "stop", ID: opts.ID})
}
