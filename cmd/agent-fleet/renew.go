package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
)

type renewOptions struct {
	fleetOptions
	ID string // "": every live worker of the caller
}

func newRenewCmd(f *factory.Factory, runF func(*renewOptions) error) *cobra.Command {
	opts := &renewOptions{fleetOptions: newFleetOptions(f)}
	cmd := &cobra.Command{
		Use:     "renew [ID]",
		Short:   "Give a worker (or all yours) a fresh idle lease",
		Example: "  agent-fleet renew builder\n  agent-fleet renew",
		Args:    optionalArg("worker ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.ID = args[0]
			}
			if runF != nil {
				return runF(opts)
			}
			return renewRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as JSON")
	return cmd
}

func renewRun(ctx context.Context, opts *renewOptions) error {
	return runFleetVerb(ctx, opts.fleetOptions, verbs.Args{Action: "renew", ID: opts.ID})
}
