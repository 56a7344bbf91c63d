package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/fleet/shim"
)

// TurnBackoffEnv sets a coding-agent worker's wait after a failed turn (a
// Go duration; it doubles per failure in a row). Spawn passes it with
// --env like any other variable.
const TurnBackoffEnv = "AGENT_FLEET_TURN_BACKOFF"

// newWorkerShimCmd is the hidden main process of every worker unit
// (docs/architecture.md "Workers"); fleet starts it, people never do.
func newWorkerShimCmd(f *factory.Factory) *cobra.Command {
	var id, run, kind string
	var grace time.Duration
	cmd := &cobra.Command{
		Use:    "worker-shim --id ID --run RUN [--kind KIND] [--ready-grace D] -- CMD ARGS…",
		Short:  "Run a worker's command as its unit's main process (internal)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if id == "" || run == "" {
				return factory.Usagef(`required flag(s) "id", "run" not set`)
			}
			p, err := f.Paths()
			if err != nil {
				return err
			}
			cfg := shim.Config{
				Paths: p, WorkerID: id, RunID: run, Command: args, Kind: kind,
				Start: f.BrokerStarter(), Logger: f.Logger("warn"),
				Stdout: f.IO.Out, Stderr: f.IO.Err, ReadyGrace: grace, History: f.Recorder(p), Share: f.ShareRequested(),
			}
			if harness.IsKind(kind) {
				exe, err := f.Exe()
				if err != nil {
					return err
				}
				// A turn's harness starts this same agent-fleet as its MCP
				// server (with what this process's children need).
				cfg.AgentFleet, cfg.AgentFleetEnv = []string{exe}, f.ChildEnv
				if v := os.Getenv(TurnBackoffEnv); v != "" {
					d, err := time.ParseDuration(v)
					if err != nil || d <= 0 {
						fmt.Fprintf(f.IO.Err, "agent-fleet worker shim: ignoring %s=%q (want a duration such as 10s)\n", TurnBackoffEnv, v)
					} else {
						cfg.TurnBackoff = d
					}
				}
			}
			// A process's exit unmaps what it has resident, and a stop
			// waits for the shim's exit: the pages of the binary that
			// start-up mapped (about 19 MiB, little of it used again)
			// cost about 1 ms there.
			cfg.Settled = func() { _, _ = factory.ReleaseStartupPages() }
			code := shim.Run(cmd.Context(), cfg) // closes its registry: the view is written
			os.Exit(code)
			return nil
		},
	}
	cmd.Flags().StringVar(&id, "id", "", "worker id")
	cmd.Flags().StringVar(&run, "run", "", "run id")
	cmd.Flags().StringVar(&kind, "kind", "exec", "worker kind")
	cmd.Flags().DurationVar(&grace, "ready-grace", 0, "how long the command must run before READY (0: the default)")
	return cmd
}
