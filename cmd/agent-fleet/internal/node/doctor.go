package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/federation"
)

// DoctorChecks are doctor's federation section: without node.toml one
// finding, "off (not configured)"; else whether the configuration is
// valid, its credentials readable, its cluster key present, the NATS
// server reachable with the credentials accepted (a client connect that
// claims nothing, with NATS's 5 s connect timeout) and the node running.
func DoctorChecks(ctx context.Context, p intercom.Paths) []fleet.Check {
	path := federation.ConfigPath(p)
	if _, err := os.Stat(path); err != nil {
		return []fleet.Check{{Name: "federation", Status: fleet.CheckOK,
			Detail: "off (not configured): this host's sessions stay on it (agent-fleet node init joins it to others)"}}
	}
	var out []fleet.Check
	add := func(name string, st fleet.CheckStatus, detail, fix string) {
		out = append(out, fleet.Check{Name: name, Status: st, Detail: detail, Fix: fix})
	}
	cfg, err := federation.LoadConfig(p)
	if err != nil {
		add("federation", fleet.CheckFail, "node configuration unusable: "+err.Error(), "fix "+path+", or rewrite it with agent-fleet node init --force")
		return out
	}
	add("federation", fleet.CheckOK, fmt.Sprintf("node %s, cluster %s, prefix %s (%s)", cfg.Name, cfg.Cluster, cfg.Prefix, path), "")
	add(credentialCheck(cfg))
	add("cluster key", fleet.CheckOK, fmt.Sprintf("%s (fingerprint %s)", cfg.ClusterKeyFile, federation.KeyFingerprint(cfg.ClusterKey)), "")
	st := Query(ctx, p)
	running := st.Node != ""
	add(natsCheck(ctx, cfg, st))
	switch {
	case !running:
		add("node", fleet.CheckWarn, "not running: this host's sessions stay on it", "agent-fleet node run (or agent-fleet install --node)")
	case !st.On:
		add("node", fleet.CheckWarn, fmt.Sprintf("running (pid %d), %s", st.PID, strings.TrimPrefix(st.Routing, "Multi-node routing: ")), "check the NATS server; the link reconnects by itself")
	default:
		add("node", fleet.CheckOK, fmt.Sprintf("running (pid %d): %s", st.PID, strings.TrimPrefix(st.Routing, "Multi-node routing: ")), "")
	}
	return out
}

// credentialCheck says which credential the node uses and whether it can
// be read.
func credentialCheck(cfg *federation.Config) (string, fleet.CheckStatus, string, string) {
	const name = "node credentials"
	switch {
	case cfg.Nkey != "":
		pub, err := NkeyPublic(cfg.Nkey)
		if err != nil {
			return name, fleet.CheckFail, err.Error(), "agent-fleet node key --out " + cfg.Nkey
		}
		return name, fleet.CheckOK, fmt.Sprintf("nkey %s (public key %s)", cfg.Nkey, pub), ""
	case cfg.Creds != "":
		if _, err := os.ReadFile(cfg.Creds); err != nil {
			return name, fleet.CheckFail, err.Error(), "put the NATS credentials file at " + cfg.Creds
		}
		return name, fleet.CheckOK, "credentials file " + cfg.Creds, ""
	case cfg.User != "":
		return name, fleet.CheckOK, "user " + cfg.User + " with password file " + cfg.PasswordFile, ""
	}
	return name, fleet.CheckOK, "none (a loopback NATS server that asks for none)", ""
}

// natsCheck connects to the node's NATS server as a client.
func natsCheck(ctx context.Context, cfg *federation.Config, st *Status) (string, fleet.CheckStatus, string, string) {
	const name = "NATS"
	var urls []string
	if cfg.Embedded != nil {
		if st.Embedded == "" {
			return name, fleet.CheckWarn, "the embedded server (" + cfg.Embedded.Listen + ") runs inside the node, which is not running", "agent-fleet node run"
		}
		urls = []string{st.Embedded}
	}
	l, err := federation.ConnectClient(ctx, cfg, federation.LinkOptions{URLs: urls})
	if err != nil {
		fix := "check the URL and that the NATS server runs"
		switch {
		case errors.Is(err, federation.ErrBadCredentials):
			fix = "the server does not accept this host's credential: add its public key (agent-fleet node key) to the server's authorized keys"
		case errors.Is(err, federation.ErrTLS):
			fix = "check tls.ca against the server's certificate"
		}
		return name, fleet.CheckFail, err.Error(), fix
	}
	defer l.Close()
	return name, fleet.CheckOK, "reachable at " + l.ServerURL() + ", credentials accepted", ""
}
