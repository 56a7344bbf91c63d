package main

import (
	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/node"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
)

func newNodeCmd(f *factory.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Join this host to others over NATS: configure, run and check its node",
		Long: `A node is this host's broker joined to the other hosts of a cluster over NATS:
shared sessions (node.toml's share globs and teams, --share on intercom listen
and mcp) are reachable from every host (docs/federation.md).`,
		Example: "  agent-fleet node init --embedded --name laptop\n  agent-fleet node run\n  agent-fleet node status",
	}
	cmd.AddCommand(newNodeInitCmd(f), newNodeKeyCmd(f), newNodeRunCmd(f), newNodeStatusCmd(f))
	return cmd
}

func newNodeInitCmd(f *factory.Factory) *cobra.Command {
	var o node.InitOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "init [--name N] [--cluster C] [--prefix P] [--nats URL]... [--creds F | --nkey F] [--embedded [--listen ADDR]]",
		Short: "Write this host's node configuration (node.toml) and the cluster key",
		Long: `Write <agent dir>/intercom/node.toml (0600), make the cluster key (cluster.key)
when missing and, with --embedded, this host's nkey seed (node.nk); then say
what to copy to the other hosts and what they run. An existing node.toml is
replaced only with --force (keys are kept, --allow-nkey keys added).`,
		Example: `  agent-fleet node init --embedded --name laptop --allow-nkey UAB…
  agent-fleet node init --name build-1 --nats tls://laptop:4222 --nkey node.nk --tls-ca ca.pem`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := f.NodeInit(o)
			if err != nil {
				return err
			}
			return output.Show(f.IO.Out, asJSON, rep, rep.Text())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Name, "name", "", "node name, unique among the cluster's live hosts (default: the host name)")
	fs.StringVar(&o.Cluster, "cluster", "", `cluster name (default "default")`)
	fs.StringVar(&o.Prefix, "prefix", "", `NATS subject prefix (default "agent-fleet")`)
	fs.StringArrayVar(&o.URLs, "nats", nil, "NATS server URL to join, nats:// or tls:// (repeatable)")
	fs.StringVar(&o.Creds, "creds", "", "NATS credentials file")
	fs.StringVar(&o.Nkey, "nkey", "", "nkey seed file (agent-fleet node key makes one)")
	fs.StringVar(&o.TLSCA, "tls-ca", "", "CA file verifying the NATS server (with --embedded: its clients)")
	fs.StringVar(&o.TLSCert, "tls-cert", "", "certificate file (with --embedded: the server's)")
	fs.StringVar(&o.TLSKey, "tls-key", "", "key file of --tls-cert")
	fs.StringVar(&o.ClusterKey, "cluster-key", "", "cluster key file copied from a host of the cluster (default: cluster.key, made when missing)")
	fs.BoolVar(&o.Embedded, "embedded", false, "run a NATS server inside this node for the other hosts to join")
	fs.StringVar(&o.Listen, "listen", "", "with --embedded: host:port it listens on (default "+node.DefaultListen+")")
	fs.StringArrayVar(&o.AllowNkeys, "allow-nkey", nil, "with --embedded: public nkey of another host to let in (repeatable)")
	fs.StringArrayVar(&o.ShareSessions, "share-session", nil, "share local sessions whose id or name matches this glob (repeatable)")
	fs.StringArrayVar(&o.ShareTeams, "share-team", nil, "share the sessions of this named team (repeatable)")
	fs.BoolVar(&o.Force, "force", false, "replace an existing node.toml")
	fs.BoolVar(&asJSON, "json", false, "print what was written as JSON")
	return cmd
}

func newNodeKeyCmd(f *factory.Factory) *cobra.Command {
	var out string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "key [--out FILE]",
		Short: "Make an nkey seed file (0600) and print its public key",
		Long: `Make a NATS user nkey seed (default <agent dir>/intercom/node.nk) and print its
public key, for the host of the embedded server to let this one in (node init
--embedded --allow-nkey KEY). An existing file is kept.`,
		Example: "  agent-fleet node key\n  agent-fleet node key --out ~/nats/build-1.nk --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := f.NodeKey(out)
			if err != nil {
				return err
			}
			return output.Show(f.IO.Out, asJSON, rep, rep.PublicKey)
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "seed file to write (default <agent dir>/intercom/node.nk)")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"file", "publicKey", "created"}`)
	return cmd
}

func newNodeRunCmd(f *factory.Factory) *cobra.Command {
	var level string
	var toFile bool
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run this host's node: the broker joined to the other hosts",
		Long: `Run this host's broker (never idling out) joined to the cluster as node.toml
says: its embedded NATS server, the NATS link and the bridge of shared
sessions. A broker without federation hands over (its clients reconnect); a
running node makes this exit 4. A refused credential exits 2, another cluster
on the prefix or a taken node name 4, no reachable NATS server 6: nothing joins.`,
		Example: "  agent-fleet node run\n  agent-fleet node run --log-level debug",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return f.RunNode(cmd.Context(), level, toFile) },
	}
	cmd.Flags().StringVar(&level, "log-level", "info", "log level: debug, info, warn, error")
	cmd.Flags().BoolVar(&toFile, "log-to-file", false, "log to broker.log in the intercom directory instead of stderr")
	return cmd
}

func newNodeStatusCmd(f *factory.Factory) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "status",
		Short:   "Show this host's node: link, live hosts, shared and remote sessions",
		Long:    "Ask the running node (the broker's local API) for its state, or say why multi-node routing is off.",
		Example: "  agent-fleet node status\n  agent-fleet node status --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := f.NodeStatus(cmd.Context())
			if err != nil {
				return err
			}
			return output.Show(f.IO.Out, asJSON, st, st.Text())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}
