package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
)

type logsOptions struct {
	fleetOptions
	ID    string
	Lines int
}

func newLogsCmd(f *factory.Factory, runF func(*logsOptions) error) *cobra.Command {
	opts := &logsOptions{fleetOptions: newFleetOptions(f)}
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print a worker's last log lines",
		Long: `Print a worker's last log lines (-n), from the journal or its log file.
A log without lines prints nothing, as tail does; when stderr is a terminal,
a note there says that the log is empty.`,
		Example: "  agent-fleet logs tests -n 100\n  agent-fleet logs tests --json",
		Args:    oneArg("worker ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if opts.Lines < 1 {
				return factory.Usagef("-n must be at least 1, not %d", opts.Lines)
			}
			if runF != nil {
				return runF(opts)
			}
			return logsRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().IntVarP(&opts.Lines, "lines", "n", verbs.DefaultLogLines, "how many lines")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, `print {"lines": [...]} as JSON`)
	return cmd
}

func logsRun(ctx context.Context, opts *logsOptions) error {
	return runFleetVerb(ctx, opts.fleetOptions, verbs.Args{Action: "logs", ID: opts.ID, Lines: opts.Lines})
}
