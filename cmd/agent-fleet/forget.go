package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
)

type forgetOptions struct {
	fleetOptions
	ID          string
	Acknowledge bool
}

func newForgetCmd(f *factory.Factory, runF func(*forgetOptions) error) *cobra.Command {
	opts := &forgetOptions{fleetOptions: newFleetOptions(f)}
	cmd := &cobra.Command{
		Use:     "forget ID --acknowledge",
		Short:   "Delete the records of an ended worker",
		Example: "  agent-fleet forget builder --acknowledge",
		Args:    oneArg("worker ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if runF != nil {
				return runF(opts)
			}
			return forgetRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Acknowledge, "acknowledge", false, "confirm that the records are deleted")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, `print {"deleted": N} as JSON`)
	return cmd
}

func forgetRun(ctx context.Context, opts *forgetOptions) error {
	return runFleetVerb(ctx, opts.fleetOptions, verbs.Args{Action: "forget", ID: opts.ID, Acknowledge: opts.Acknowledge})
}
