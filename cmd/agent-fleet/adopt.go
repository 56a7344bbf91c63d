package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
)

type adoptOptions struct {
	fleetOptions
	ID, Host       string
	Force, Orphans bool
}

func newAdoptCmd(f *factory.Factory, runF func(*adoptOptions) error) *cobra.Command {
	opts := &adoptOptions{fleetOptions: newFleetOptions(f)}
	cmd := &cobra.Command{
		Use:   "adopt [ID] [--force] | adopt --orphans",
		Short: "Become the manager of a worker whose manager went away",
		Long: `Make yourself the manager of a live worker. Adopting from a manager whose
session is still connected is refused unless --force. --orphans adopts every
live worker of an agent manager that is not connected and whose lease has
expired. The worker learns its new manager without restarting. Its idle
lease becomes what your own workers get: none when you are a person (an
operator- id), a renewed one when you are an agent. A worker that has ended
cannot be adopted (exit 4; forget removes its record).`,
		Example: "  agent-fleet adopt builder\n  agent-fleet adopt --orphans --json",
		Args:    optionalArg("worker ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case opts.Orphans && len(args) == 1:
				return factory.Usage(errors.New("give a worker id or --orphans, not both"))
			case !opts.Orphans && len(args) == 0:
				return factory.Usage(errors.New("give a worker id, or --orphans"))
			}
			if len(args) == 1 {
				opts.ID = args[0]
			}
			if runF != nil {
				return runF(opts)
			}
			return adoptRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Force, "force", false, "adopt even if its manager is connected")
	cmd.Flags().BoolVar(&opts.Orphans, "orphans", false, "adopt every orphaned worker with an expired lease")
	addHostFlag(cmd, &opts.Host)
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as JSON")
	return cmd
}

func adoptRun(ctx context.Context, opts *adoptOptions) error {
	return runFleetVerb(ctx, opts.fleetOptions, verbs.Args{Action: "adopt", ID: opts.ID, Force: opts.Force, All: opts.Orphans, Host: opts.Host})
}
