package main

import (
	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
)

type waitOptions struct {
	fleetOptions
	verbs.Args
}

func newWaitCmd(f *factory.Factory, runF func(*waitOptions) error) *cobra.Command {
	opts := &waitOptions{fleetOptions: newFleetOptions(f), Args: verbs.Args{Action: "wait"}}
	cmd := &cobra.Command{
		Use:   "wait ID...",
		Short: "Wait until workers end; exit with how they ended",
		Long: `Block until every worker named has ended (--any: until one has), then print
how each ended. It wakes on the changes that record an end (the registry,
the units' exit records), not by polling. The exit status follows the
workers: 0 when each exited with status 0; otherwise the first of 15 (failed
or lost), 10 (exited non-zero: the status itself is in the output), 11
(killed by a signal), 14 (stopped at its maximum runtime), 13 (stopped: its
lease expired), 12 (stopped by stop) that applies; 9 when --timeout passed
first; 130 when interrupted (SIGINT, SIGTERM). An unknown id is 3.`,
		Example: "  agent-fleet wait build\n  agent-fleet wait w1 w2 --any --timeout 10m --json",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return argsError(cmd, "needs the ids of the workers to wait for")
			}
			opts.IDs = args
			if runF != nil {
				return runF(opts)
			}
			return runFleetVerb(cmd.Context(), opts.fleetOptions, opts.Args)
		},
	}
	cmd.Flags().BoolVar(&opts.Any, "any", false, "return once one of them has ended")
	cmd.Flags().DurationVar(&opts.Timeout, "timeout", 0, "give up after this long (exit 9; default: wait until they end)")
	addHostFlag(cmd, &opts.Args.Host)
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the workers' records and how each ended as JSON")
	return cmd
}
