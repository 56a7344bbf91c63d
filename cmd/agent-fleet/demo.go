package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/demo"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
)

type demoOptions struct {
	Factory *factory.Factory
	Demo    demo.Options
}

func newDemoCmd(f *factory.Factory, runF func(*demoOptions) error) *cobra.Command {
	opts := &demoOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Spawn two workers that talk through the intercom, then stop them with verified cleanup",
		Long: `Run a short, narrated demonstration in a fresh temporary agent directory
(PI_CODING_AGENT_DIR, for the demo and its workers), so your own broker,
registry and sessions are never touched; the directory is removed at the end.

With a systemd user manager (yours, or — when running as root on a machine
whose PID 1 is not systemd — a private one booted for the demo and stopped at
the end), it spawns two exec workers as transient user services: demo-pong
answers every ask, demo-ping asks it a few questions. It shows list, status
(unit, cgroup, processes) and what they said, then stops both and proves their
cgroups empty. Without a user manager it says what is missing and runs the
intercom part alone: two sessions talking through a broker.

Exit status 0 when everything worked.`,
		Example: "  agent-fleet demo\n  go run ./cmd/agent-fleet demo",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(opts)
			}
			return demoRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Demo.NoBoot, "no-boot", false, "never boot a private user manager (run the intercom part alone when none is reachable)")
	cmd.Flags().IntVar(&opts.Demo.Pings, "pings", 3, "how many asks demo-ping sends")
	return cmd
}

func demoRun(ctx context.Context, opts *demoOptions) error {
	return demo.Run(ctx, opts.Factory, opts.Demo)
}
