package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
)

type statusOptions struct {
	fleetOptions
	ID, Host string
	Watch    bool
}

func newStatusCmd(f *factory.Factory, runF func(*statusOptions) error) *cobra.Command {
	opts := &statusOptions{fleetOptions: newFleetOptions(f)}
	cmd := &cobra.Command{
		Use:     "status ID",
		Short:   "Show a worker's state, unit, cgroup and processes",
		Example: "  agent-fleet status tests --json\n  agent-fleet status -w tests",
		Args:    oneArg("worker ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if runF != nil {
				return runF(opts)
			}
			return statusRun(cmd.Context(), opts)
		},
	}
	addHostFlag(cmd, &opts.Host)
	cmd.Flags().BoolVarP(&opts.Watch, "watch", "w", false, "show it again at every change, until Ctrl-C (redrawn in place on a terminal)")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as JSON")
	return cmd
}

func statusRun(ctx context.Context, opts *statusOptions) error {
	if opts.Watch && opts.Host != "" {
		return factory.Usagef("status --watch is for this host's workers; on another host, run status again")
	}
	if opts.Watch {
		return watchFleetVerb(ctx, opts.fleetOptions, verbs.Args{Action: "status", ID: opts.ID}, "agent-fleet status "+opts.ID)
	}
	return runFleetVerb(ctx, opts.fleetOptions, verbs.Args{Action: "status", ID: opts.ID, Host: opts.Host})
}
