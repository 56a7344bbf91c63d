package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
)

// fleetOptions are what every fleet verb's options hold beside its own
// arguments.
type fleetOptions struct {
	Factory *factory.Factory
	IO      *factory.IOStreams
	JSON    bool
}

func newFleetOptions(f *factory.Factory) fleetOptions { return fleetOptions{Factory: f, IO: f.IO} }

// addHostFlag gives cmd --host: the verb runs on that host of the hosts
// this one is joined to (verbs.RunRemote).
func addHostFlag(cmd *cobra.Command, host *string) {
	cmd.Flags().StringVar(host, "host", "", "on that host (its node name) of the hosts this one is joined to")
}

// watchFleetVerb runs a read-only fleet verb again at every change of the
// fleet until Ctrl-C (verbs.Watch): redrawn in place on a terminal.
func watchFleetVerb(ctx context.Context, o fleetOptions, a verbs.Args, title string) error {
	fe, err := o.Factory.ReadFleet(ctx)
	if err != nil {
		return err
	}
	defer fe.Close()
	if fe.Offline != nil {
		fmt.Fprintln(o.IO.Err, "agent-fleet:", verbs.OfflineWarning)
		title += "    (no user manager: live states unknown)" // a redraw clears the warning
	}
	return verbs.Watch(ctx, fe, a, o.IO.Out, isTerminal(o.IO.Out) && !o.JSON, o.JSON, title)
}

// runFleetVerb runs a fleet verb as the CLI's caller, through the same
// verbs.Run as agent_fleet, and prints its report: the JSON with --json
// (also beside an error, when the verb has a record to show), else the
// text (beside an error only for a stop of several and a wait, a line
// per worker).
// An empty log prints nothing, with a note on stderr when that is a
// terminal.
func runFleetVerb(ctx context.Context, o fleetOptions, a verbs.Args) error {
	if err := a.Check(); err != nil {
		return err
	}
	if a.Host != "" {
		_, id, err := o.Factory.Identity()
		if err != nil {
			return err
		}
		rep, err := verbs.RunRemote(ctx, o.Factory, id.SessionID, a)
		return printFleetReport(o, rep, err)
	}
	open := o.Factory.Fleet
	if verbs.ReadOnly(a.Action) {
		open = o.Factory.ReadFleet // records and logs need no user manager
	}
	fe, err := open(ctx)
	if err != nil {
		_, id, ierr := o.Factory.Identity()
		if ierr != nil {
			return err
		}
		rep, err := verbs.Elsewhere(ctx, o.Factory, id.SessionID, a, err)
		if rep == nil {
			return err
		}
		return printFleetReport(o, rep, err)
	}
	defer fe.Close()
	if w := verbs.OfflineWarningOf(a.Action); fe.Offline != nil && w != "" {
		fmt.Fprintln(o.IO.Err, "agent-fleet:", w)
	}
	rep, err := verbs.Run(ctx, fe, a)
	rep, err = verbs.Federate(ctx, o.Factory, fe.Caller, a, rep, err)
	return printFleetReport(o, rep, err)
}

// printFleetReport prints a fleet verb's report (runFleetVerb).
func printFleetReport(o fleetOptions, rep output.Report, err error) error {
	if err != nil {
		_, several := output.Local(rep).(output.StopsReport)
		_, waited := output.Local(rep).(output.WaitReport)
		switch {
		case rep != nil && o.JSON:
			_ = output.PrintJSON(o.IO.Out, rep.JSON())
		case several, waited:
			_ = output.Print(o.IO.Out, rep, false) // a line per worker, the failed ones too
		}
		return err
	}
	if logs, ok := output.Local(rep).(output.LogsReport); ok && len(logs.Lines) == 0 && !o.JSON && isTerminal(o.IO.Err) {
		// Nothing on stdout, as tail; a person at a terminal is told why.
		fmt.Fprintln(o.IO.Err, "agent-fleet:", output.EmptyLogNote(logs.ID))
	}
	return output.Print(o.IO.Out, rep, o.JSON)
}
