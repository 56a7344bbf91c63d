package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// newWorkerShimCmd is the hidden main process of every worker unit
// (DESIGN.md "Workers"); fleet starts it, people never do.
func newWorkerShimCmd(s *streams) *cobra.Command {
	var id, run string
	cmd := &cobra.Command{
		Use:    "worker-shim --id ID --run RUN -- CMD ARGS…",
		Short:  "Run a worker's command as its unit's main process (internal)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := intercom.DefaultPaths()
			if err != nil {
				return err
			}
			code := fleet.RunShim(cmd.Context(), fleet.ShimConfig{
				Paths: p, WorkerID: id, RunID: run, Command: args,
				Start: brokerStarter(), Logger: newLogger(s.Err, "warn"),
				Stdout: s.Out, Stderr: s.Err,
			})
			os.Exit(code)
			return nil
		},
	}
	cmd.Flags().StringVar(&id, "id", "", "worker id")
	cmd.Flags().StringVar(&run, "run", "", "run id")
	_ = cmd.MarkFlagRequired("id")
	_ = cmd.MarkFlagRequired("run")
	return cmd
}
