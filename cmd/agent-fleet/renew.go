package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
)

type renewOptions struct {
	fleetOptions
	Args verbs.Args // ID "": every live worker of the caller
}

func newRenewCmd(f *factory.Factory, runF func(*renewOptions) error) *cobra.Command {
	opts := &renewOptions{fleetOptions: newFleetOptions(f), Args: verbs.Args{Action: "renew"}}
	cmd := &cobra.Command{
		Use:   "renew [ID] [--budget-usd X] [--budget-tokens N]",
		Short: "Give a worker (or all yours) a fresh idle lease, or a new budget",
		Long: `Give a live worker of yours a fresh idle lease (without ID: every live
worker of yours). --budget-usd and --budget-tokens set a coding-agent
worker's budget; one that had spent its budget and keeps a batch of
messages runs it once the new budget allows.`,
		Example: "  agent-fleet renew builder\n  agent-fleet renew\n  agent-fleet renew fix --budget-usd 10",
		Args:    optionalArg("worker ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.Args.ID = args[0]
			}
			if runF != nil {
				return runF(opts)
			}
			return renewRun(cmd.Context(), opts)
		},
	}
	addParamFlags(cmd, "renew", &opts.Args)
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as JSON")
	return cmd
}

func renewRun(ctx context.Context, opts *renewOptions) error {
	return runFleetVerb(ctx, opts.fleetOptions, opts.Args)
}
