package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
)

type listOptions struct {
	fleetOptions
	All, Watch bool
}

func newListCmd(f *factory.Factory, runF func(*listOptions) error) *cobra.Command {
	opts := &listOptions{fleetOptions: newFleetOptions(f)}
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List your workers (--all: every manager's)",
		Example: "  agent-fleet list\n  agent-fleet list --all --json\n  agent-fleet list --watch",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(opts)
			}
			return listRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.All, "all", false, "every manager's workers")
	cmd.Flags().BoolVarP(&opts.Watch, "watch", "w", false, "list again at every change, until Ctrl-C (redrawn in place on a terminal)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as JSON")
	return cmd
}

func listRun(ctx context.Context, opts *listOptions) error {
	if opts.Watch {
		return watchFleetVerb(ctx, opts.fleetOptions, verbs.Args{Action: "list", All: opts.All}, "agent-fleet list")
	}
	return runFleetVerb(ctx, opts.fleetOptions, verbs.Args{Action: "list", All: opts.All})
}
