package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
)

type cleanupOptions struct {
	fleetOptions
	Execute bool
}

func newCleanupCmd(f *factory.Factory, runF func(*cleanupOptions) error) *cobra.Command {
	opts := &cleanupOptions{fleetOptions: newFleetOptions(f)}
	cmd := &cobra.Command{
		Use:   "cleanup [--execute]",
		Short: "Run the janitor: checkpoint idle workers, stop expired ones, prune old records",
		Long: `Preview (or with --execute, do) what the janitor does: send checkpoint
messages to leased workers nearing their idle deadline, stop those past the
grace period with verified cleanup, prune ended records past retention, and
rebuild records of live worker units the registry does not know. One run at a
time: a second concurrent run reports that one is in progress. A systemd user
timer installed by "agent-fleet install" runs it periodically, as do
long-running "agent-fleet mcp" servers.`,
		Example: "  agent-fleet cleanup\n  agent-fleet cleanup --execute --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(opts)
			}
			return cleanupRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Execute, "execute", false, "act, instead of previewing")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as JSON")
	return cmd
}

func cleanupRun(ctx context.Context, opts *cleanupOptions) error {
	return runFleetVerb(ctx, opts.fleetOptions, verbs.Args{Action: "cleanup", Execute: opts.Execute})
}
