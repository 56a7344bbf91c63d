package main

import (
	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/ui"
)

func newUICmd(f *factory.Factory, runF func(*ui.Config) error) *cobra.Command {
	cfg := &ui.Config{Factory: f, Logger: f.Logger("warn")}
	var noOpen, asJSON bool
	cmd := &cobra.Command{
		Use:   "ui [--listen ADDR | --socket PATH] [--no-open]",
		Short: "Serve a live dashboard of the fleet, for you, on this machine",
		Long: `Serve a dashboard of the fleet in the browser: workers by manager with their
state, lease, turn and usage, a worker's log as it grows, sessions, teams,
what waits for you, an activity feed and the last hour in a chart, live.
It acts (stop, renew, pause, resume, adopt) as you, the way the CLI verbs do.

It listens on 127.0.0.1 (a random port unless --listen says) or on a Unix
socket (--socket), and prints its URL with a token made for this run: only
requests that carry it get in. Ctrl-C stops it.`,
		Example: "  agent-fleet ui\n  agent-fleet ui --listen 127.0.0.1:8377 --no-open\n  agent-fleet ui --socket ~/.cache/agent-fleet/ui.sock",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cfg)
			}
			return ui.Serve(cmd.Context(), *cfg, f.IO.Out, f.IO.Err, noOpen, asJSON)
		},
	}
	cmd.Flags().StringVar(&cfg.Listen, "listen", ui.DefaultListen, "loopback address to serve on")
	cmd.Flags().StringVar(&cfg.Socket, "socket", "", "serve on this Unix socket instead (in a directory only you can enter)")
	cmd.Flags().BoolVar(&noOpen, "no-open", false, "do not open a browser")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"url", "listen"|"socket"} as JSON`)
	cmd.MarkFlagsMutuallyExclusive("listen", "socket")
	return cmd
}
