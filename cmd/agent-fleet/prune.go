package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
)

type pruneOptions struct {
	fleetOptions
	Acknowledge, All bool
	OlderThan        time.Duration
}

func newPruneCmd(f *factory.Factory, runF func(*pruneOptions) error) *cobra.Command {
	opts := &pruneOptions{fleetOptions: newFleetOptions(f)}
	cmd := &cobra.Command{
		Use:     "prune --acknowledge [--older-than DUR] [--all]",
		Short:   "Delete records of ended workers",
		Example: "  agent-fleet prune --acknowledge --older-than 168h",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(opts)
			}
			return pruneRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Acknowledge, "acknowledge", false, "confirm that the records are deleted")
	cmd.Flags().BoolVar(&opts.All, "all", false, "every manager's records, not only yours")
	cmd.Flags().Var(verbs.DurationValue(&opts.OlderThan), "older-than", "only records of workers that ended longer ago than this (168h, 7d)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, `print {"deleted": N} as JSON`)
	return cmd
}

func pruneRun(ctx context.Context, opts *pruneOptions) error {
	return runFleetVerb(ctx, opts.fleetOptions, verbs.Args{Action: "prune", All: opts.All, Acknowledge: opts.Acknowledge, OlderThan: opts.OlderThan})
}
