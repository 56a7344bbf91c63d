package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/fleet"
)

func newAdoptCmd(s *streams) *cobra.Command {
	var force, orphans, asJSON bool
	cmd := &cobra.Command{
		Use:   "adopt [ID] [--force] | adopt --orphans",
		Short: "Become the manager of a worker whose manager went away",
		Long: `Make yourself the manager of a live worker. Adopting from a manager whose
session is still connected is refused unless --force. --orphans adopts every
live worker of an agent manager that is not connected and whose lease has
expired. The worker learns its new manager without restarting.`,
		Example: "  agent-fleet adopt builder\n  agent-fleet adopt --orphans --json",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if orphans == (len(args) == 1) {
				return &usageError{errors.New("give a worker id, or --orphans")}
			}
			env, err := openFleet(cmd.Context())
			if err != nil {
				return err
			}
			defer env.close()
			var ws []*fleet.Worker
			if orphans {
				ws, err = env.fleet.AdoptOrphans(cmd.Context())
			} else {
				var w *fleet.Worker
				w, err = env.fleet.Adopt(cmd.Context(), args[0], force)
				if w != nil && err == nil {
					ws = append(ws, w)
				}
			}
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(s.Out, viewWorkers(ws))
			}
			if len(ws) == 0 {
				fmt.Fprintln(s.Out, "No orphaned workers to adopt.")
			}
			for _, w := range ws {
				fmt.Fprintf(s.Out, "You now manage %s (run %s); its lease is renewed.\n", w.ID, w.RunID)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "adopt even if its manager is connected")
	cmd.Flags().BoolVar(&orphans, "orphans", false, "adopt every orphaned worker with an expired lease")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func viewWorkers(ws []*fleet.Worker) []workerView {
	out := make([]workerView, len(ws))
	for i, w := range ws {
		out[i] = viewWorker(w)
	}
	return out
}

func newRenewCmd(s *streams) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "renew [ID]",
		Short:   "Give a worker (or all yours) a fresh idle lease",
		Example: "  agent-fleet renew builder\n  agent-fleet renew",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			env, err := openFleet(cmd.Context())
			if err != nil {
				return err
			}
			defer env.close()
			var ws []*fleet.Worker
			if len(args) == 1 {
				w, err := env.fleet.Renew(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				ws = append(ws, w)
			} else if ws, err = env.fleet.RenewAll(cmd.Context()); err != nil {
				return err
			}
			if asJSON {
				return printJSON(s.Out, viewWorkers(ws))
			}
			for _, w := range ws {
				if w.LeaseDeadline.IsZero() {
					fmt.Fprintf(s.Out, "Renewed %s (it has no idle lease).\n", w.ID)
				} else {
					fmt.Fprintf(s.Out, "Renewed %s until %s.\n", w.ID, w.LeaseDeadline.Local().Format(time.RFC3339))
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func newForgetCmd(s *streams) *cobra.Command {
	var ack bool
	cmd := &cobra.Command{
		Use:     "forget ID --acknowledge",
		Short:   "Delete the records of an ended worker",
		Example: "  agent-fleet forget builder --acknowledge",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !ack {
				return &usageError{fmt.Errorf("forget deletes history: add --acknowledge")}
			}
			env, err := openFleet(cmd.Context())
			if err != nil {
				return err
			}
			defer env.close()
			n, err := env.fleet.Forget(cmd.Context(), args[0], ack)
			if err != nil {
				return err
			}
			fmt.Fprintf(s.Out, "Forgot %d ended records of %s.\n", n, args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&ack, "acknowledge", false, "confirm that the records are deleted")
	return cmd
}

func newPruneCmd(s *streams) *cobra.Command {
	var ack, all bool
	var older time.Duration
	cmd := &cobra.Command{
		Use:     "prune --acknowledge [--older-than DUR] [--all]",
		Short:   "Delete records of ended workers",
		Example: "  agent-fleet prune --acknowledge --older-than 168h",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !ack {
				return &usageError{fmt.Errorf("prune deletes history: add --acknowledge")}
			}
			env, err := openFleet(cmd.Context())
			if err != nil {
				return err
			}
			defer env.close()
			n, err := env.fleet.Prune(cmd.Context(), time.Now().Add(-older), all, ack)
			if err != nil {
				return err
			}
			fmt.Fprintf(s.Out, "Pruned %d ended records.\n", n)
			return nil
		},
	}
	cmd.Flags().BoolVar(&ack, "acknowledge", false, "confirm that the records are deleted")
	cmd.Flags().BoolVar(&all, "all", false, "every manager's records, not only yours")
	cmd.Flags().DurationVar(&older, "older-than", 0, "only records of workers that ended longer ago than this")
	return cmd
}

func newCleanupCmd(s *streams) *cobra.Command {
	var execute, asJSON bool
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
			env, err := openFleet(cmd.Context())
			if err != nil {
				return err
			}
			defer env.close()
			rep, err := env.fleet.Cleanup(cmd.Context(), fleet.CleanupOptions{Execute: execute})
			if errors.Is(err, fleet.ErrCleanupInProgress) {
				if asJSON {
					return printJSON(s.Out, map[string]any{"skipped": "in progress"})
				}
				fmt.Fprintln(s.Out, "Cleanup in progress in another process; nothing to do.")
				return nil
			}
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(s.Out, rep)
			}
			if len(rep.Actions) == 0 {
				fmt.Fprintln(s.Out, "Nothing to clean up.")
			}
			verb := map[bool]string{true: "done", false: "would do"}
			for _, a := range rep.Actions {
				state := verb[a.Done]
				if a.Error != "" {
					state = "failed: " + a.Error
				}
				fmt.Fprintf(s.Out, "%-10s %-20s %s (%s)\n", a.Kind, a.ID, a.Reason, state)
			}
			if !execute && len(rep.Actions) > 0 {
				fmt.Fprintln(s.Out, "Preview only: run with --execute to act.")
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&execute, "execute", false, "act, instead of previewing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}
