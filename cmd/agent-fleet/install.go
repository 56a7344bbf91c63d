package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
)

type installOptions struct {
	Factory *factory.Factory
	IO      *factory.IOStreams
	dryRun  bool
	binary  string
	node    bool
	JSON    bool
}

func newInstallCmd(f *factory.Factory, runF func(*installOptions) error) *cobra.Command {
	opts := &installOptions{Factory: f, IO: f.IO}
	cmd := &cobra.Command{
		Use:   "install [--dry-run] [--binary PATH] [--node]",
		Short: "Install the broker's socket activation and the janitor's timer as systemd user units",
		Long: `Write agent-fleet's systemd user units (kept in contrib/systemd) to your user
unit directory ($XDG_CONFIG_HOME/systemd/user, else ~/.config/systemd/user),
reload the user manager, and enable and start two of them:

  agent-fleet-broker.socket   systemd listens on the intercom broker socket of
                              this agent directory ($PI_CODING_AGENT_DIR, else
                              ~/.pi/agent: <dir>/intercom/broker.sock, mode 0600
                              in a 0700 directory) and starts
                              agent-fleet-broker.service on the first connection.
                              The broker exits 5 s after its last session leaves;
                              systemd keeps listening.
  agent-fleet-cleanup.timer   runs agent-fleet-cleanup.service, the janitor
                              ("agent-fleet cleanup --execute"), every 5 minutes.

The units run this executable (or --binary PATH) on this agent directory.
Running install again updates what changed and leaves the rest; "agent-fleet
uninstall" removes everything install added. --dry-run shows what would be
written and done and changes nothing.

If a broker already serves the socket (one started on demand), install does
not disturb its sessions: the socket unit is enabled now and takes over when
that broker exits (the next client that finds no broker starts the socket).

--node installs agent-fleet-node.service ("agent-fleet node run": the broker
of this host joined to the others over NATS, as node.toml from "agent-fleet
node init" says, restarted on failure) in place of the socket, which it stops
and disables; the node takes over from a running broker. It stays installed
until uninstall. Needs Linux with a systemd user manager (exit 5 elsewhere, 6 without one).`,
		Example: `  agent-fleet install --dry-run
  agent-fleet install
  agent-fleet install --binary ~/go/bin/agent-fleet
  agent-fleet install --node
  systemctl --user status agent-fleet-broker.socket agent-fleet-cleanup.timer`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(opts)
			}
			return installRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.dryRun, "dry-run", false, "show what would be written and done, change nothing")
	cmd.Flags().StringVar(&opts.binary, "binary", "", "the agent-fleet executable the units run (default: this one)")
	cmd.Flags().BoolVar(&opts.node, "node", false, "install agent-fleet-node.service (node run) in place of the broker's socket")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print what was (or would be) done as JSON")
	return cmd
}

func newUninstallCmd(f *factory.Factory, runF func(*installOptions) error) *cobra.Command {
	opts := &installOptions{Factory: f, IO: f.IO}
	cmd := &cobra.Command{
		Use:   "uninstall [--dry-run]",
		Short: "Stop, disable and remove the systemd user units that install added",
		Long: `Stop agent-fleet-node.service (install --node), agent-fleet-broker.socket,
agent-fleet-broker.service, agent-fleet-cleanup.timer and
agent-fleet-cleanup.service, disable them,
remove their unit files and reload the user manager. A broker that runs under
the socket stops; its sessions reconnect and start a broker on demand, as
before install. Workers and the agent directory are not touched.`,
		Example: "  agent-fleet uninstall --dry-run\n  agent-fleet uninstall",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(opts)
			}
			return uninstallRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.dryRun, "dry-run", false, "show what would be removed, change nothing")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print what was (or would be) done as JSON")
	return cmd
}

func installRun(ctx context.Context, opts *installOptions) error {
	return printInstall(opts, func(in factory.InstallOptions) (*factory.InstallReport, error) {
		return opts.Factory.Install(ctx, in)
	})
}

func uninstallRun(ctx context.Context, opts *installOptions) error {
	return printInstall(opts, func(in factory.InstallOptions) (*factory.InstallReport, error) {
		return opts.Factory.Uninstall(ctx, in)
	})
}

// printInstall runs install or uninstall: lines for people as they
// happen, or with --json the report at the end.
func printInstall(opts *installOptions, run func(factory.InstallOptions) (*factory.InstallReport, error)) error {
	in := factory.InstallOptions{DryRun: opts.dryRun, Binary: opts.binary, Node: opts.node}
	if !opts.JSON {
		in.Out = opts.IO.Out
	}
	rep, err := run(in)
	if err != nil {
		return err
	}
	if opts.JSON {
		return output.PrintJSON(opts.IO.Out, rep)
	}
	return nil
}
