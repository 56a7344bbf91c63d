package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
)

type usageOptions struct {
	fleetOptions
	Args verbs.Args
}

func newUsageCmd(f *factory.Factory, runF func(*usageOptions) error) *cobra.Command {
	opts := &usageOptions{fleetOptions: newFleetOptions(f), Args: verbs.Args{Action: "usage"}}
	cmd := &cobra.Command{
		Use:   "usage [--since D|TIME] [--by worker|manager|kind]",
		Short: "Sum the tokens and cost of coding-agent workers' turns",
		Long: `Sum what the turns of coding-agent workers consumed, as each harness
reported it: tokens (input, output, cache read and write) and cost in US
dollars (Codex reports no cost: its turns count as without one). Every
manager's workers are counted, ended and forgotten ones too, per worker id
(default), per manager (who managed the worker at each turn) or per kind;
--since keeps the turns that ended since then, a duration back (24h, 7d) or
a time (2026-12-01, RFC 3339).`,
		Example: "  agent-fleet usage\n  agent-fleet usage --since 24h --by manager\n  agent-fleet usage --since 2026-12-01 --by kind --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(opts)
			}
			return usageRun(cmd.Context(), opts)
		},
	}
	addParamFlags(cmd, "usage", &opts.Args)
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as JSON")
	return cmd
}

// usageRun runs usage as the CLI's caller.
func usageRun(ctx context.Context, opts *usageOptions) error {
	return runFleetVerb(ctx, opts.fleetOptions, opts.Args)
}
