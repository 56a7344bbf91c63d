package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
	"github.com/agent-fleet/agent-fleet/fleet"
)

type logsOptions struct {
	fleetOptions
	Args   verbs.Args
	Follow bool
}

func newLogsCmd(f *factory.Factory, runF func(*logsOptions) error) *cobra.Command {
	opts := &logsOptions{fleetOptions: newFleetOptions(f), Args: verbs.Args{Action: "logs"}}
	cmd := &cobra.Command{
		Use:   "logs ID [-n N | --all] [--since D|TIME] [--timestamps] [-f]",
		Short: "Print a worker's log lines, or follow them",
		Long: `Print a worker's last log lines (-n, or --all; --since keeps those written
since a duration back or a time: all of them unless -n, as journalctl does)
from the journal or its log file. --timestamps puts before each line when it
was written: the journal's time, or for a log file the time the worker's shim
saw the line land ("?" when it did not, e.g. after the shim was killed). -f
follows the log until the worker ends, then says on stderr how it ended.
A log without lines prints nothing, as tail does; when stderr is a terminal,
a note there says that the log is empty.`,
		Example: "  agent-fleet logs tests -n 100\n  agent-fleet logs tests -f --timestamps\n  agent-fleet logs tests --since 10m --json\n  agent-fleet logs tests --all",
		Args:    oneArg("worker ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Args.ID = args[0]
			switch n := cmd.Flags().Changed("lines"); {
			case n && opts.Args.All:
				return factory.Usagef("logs --all prints every line: it takes no line count (-n)")
			case opts.Args.All, !n && cmd.Flags().Changed("since"):
				opts.Args.Lines, opts.Args.All = 0, true
			case opts.Args.Lines < 1:
				return factory.Usagef("-n must be at least 1, not %d", opts.Args.Lines)
			}
			if runF != nil {
				return runF(opts)
			}
			return logsRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().IntVarP(&opts.Args.Lines, "lines", "n", verbs.DefaultLogLines, "how many lines")
	cmd.Flags().BoolVar(&opts.Args.All, "all", false, "every line of the log")
	for _, p := range verbs.Flags("logs") {
		if p.Name == "since" { // the id is the argument
			cmd.Flags().Var(&paramFlag{p: p, a: &opts.Args}, p.Flag, p.Usage)
		}
	}
	cmd.Flags().BoolVar(&opts.Args.Timestamps, "timestamps", false, "put when each line was written before it")
	addHostFlag(cmd, &opts.Args.Host)
	cmd.Flags().BoolVarP(&opts.Follow, "follow", "f", false, "follow the log until the worker ends")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, `print {"lines": [...]} as JSON (-f: one {"text", "at"} per line, then {"ended": worker})`)
	return cmd
}

func logsRun(ctx context.Context, opts *logsOptions) error {
	if !opts.Follow {
		return runFleetVerb(ctx, opts.fleetOptions, opts.Args)
	}
	if opts.Args.Host != "" {
		return factory.Usagef("logs -f follows this host's workers; on another host, ask for the last lines (-n)")
	}
	fe, err := opts.Factory.ReadFleet(ctx)
	if err != nil {
		return err
	}
	defer fe.Close()
	w, err := verbs.Follow(ctx, fe, opts.Args, func(l fleet.LogLine) error {
		if opts.JSON {
			return output.PrintJSON(opts.IO.Out, map[string]string{"text": l.Text, "at": output.Stamp(l.At)})
		}
		_, err := fmt.Fprintln(opts.IO.Out, output.LogLineText(l, opts.Args.Timestamps, output.CLI))
		return err
	})
	switch {
	case ctx.Err() != nil:
		return nil // Ctrl-C
	case err != nil:
		return err
	}
	if opts.JSON {
		return output.PrintJSON(opts.IO.Out, map[string]any{"ended": output.ViewWorker(w)})
	}
	fmt.Fprintf(opts.IO.Err, "agent-fleet: worker %s %s\n", w.ID, output.StateText(w))
	return nil
}
