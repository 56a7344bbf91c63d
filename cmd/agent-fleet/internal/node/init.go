// Package node is the engine of `agent-fleet node`: a host joined to
// others over NATS (docs/federation.md). It writes the node
// configuration (Init, MakeNkey), runs the node — this host's broker with
// its NATS link, embedded server and bridge (Run) — and reports on it
// (Status, the doctor checks, the routing line of intercom status).
package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/federation"
)

// DefaultListen is the embedded NATS server's address when init is given
// none: loopback, NATS's own port.
const DefaultListen = "127.0.0.1:4222"

// ErrConfigExists: node init would replace a node.toml (exit 4 without
// --force).
var ErrConfigExists = errors.New("a node configuration exists")

// InitOptions are node init's flags.
type InitOptions struct {
	Name, Cluster, Prefix string
	URLs                  []string
	Creds, Nkey           string // one credential: a credentials file or an nkey seed file
	TLSCA, TLSCert        string
	TLSKey                string
	// ClusterKey is a cluster key file copied from another host; "" is
	// cluster.key beside node.toml, made when missing.
	ClusterKey string
	// Embedded runs a NATS server inside this node on Listen; AllowNkeys
	// are the public nkeys of other hosts it lets in.
	Embedded   bool
	Listen     string
	AllowNkeys []string
	// ShareSessions and ShareTeams say which local sessions are announced.
	ShareSessions, ShareTeams []string
	// Force replaces an existing node.toml (keys are kept).
	Force bool
}

// InitReport is what node init wrote and what the other hosts do, as
// --json prints it.
type InitReport struct {
	Config            string   `json:"config"`
	Name              string   `json:"name"`
	Cluster           string   `json:"cluster"`
	Prefix            string   `json:"prefix"`
	URLs              []string `json:"urls"`
	ClusterKeyFile    string   `json:"clusterKeyFile"`
	ClusterKeyCreated bool     `json:"clusterKeyCreated"`
	// Nkey is this host's nkey seed file and PublicKey its public key
	// ("" without one).
	Nkey        string `json:"nkey,omitempty"`
	NkeyCreated bool   `json:"nkeyCreated,omitempty"`
	PublicKey   string `json:"publicKey,omitempty"`
	// Embedded is the embedded NATS server's listen address ("": none).
	Embedded string `json:"embedded,omitempty"`
	// JoinURL is the URL other hosts give node init --nats (embedded) or
	// the URLs this host joins.
	JoinURL string `json:"joinUrl"`
	// OtherHosts are the commands to run on every other host, in order.
	OtherHosts []string `json:"otherHosts"`
	// Start is the command that starts the node here.
	Start string `json:"start"`
}

// Init writes node.toml of p (0600) from opts, making the cluster key when
// missing and, for an embedded server, this host's nkey seed. The written
// file is read back with federation.LoadConfig, so what Init accepts the
// node runs. Errors: ErrConfigExists without Force, a usage error
// (*federation.ConfigError) for a bad value; nothing is written then but
// the keys.
func Init(p intercom.Paths, opts InitOptions) (*InitReport, error) {
	path := federation.ConfigPath(p)
	var allowed []string // by the configuration replaced
	if data, err := os.ReadFile(path); err == nil {
		if !opts.Force {
			return nil, fmt.Errorf("%w at %s: pass --force to replace it (its keys are kept)", ErrConfigExists, path)
		}
		if old, err := federation.ParseConfig(data, p); err == nil && old.Embedded != nil {
			allowed = old.Embedded.Nkeys
		}
	}
	if opts.Creds != "" && opts.Nkey != "" {
		return nil, &federation.ConfigError{Path: path, Field: "creds", Problem: "give --creds or --nkey, not both"}
	}
	if opts.Embedded && len(opts.URLs) > 0 {
		return nil, &federation.ConfigError{Path: path, Field: "urls", Problem: "an embedded node joins its own server: --nats is for the other hosts"}
	}
	if !opts.Embedded && (opts.Listen != "" || len(opts.AllowNkeys) > 0) {
		return nil, &federation.ConfigError{Path: path, Field: "embedded", Problem: "--listen and --allow-nkey need --embedded"}
	}
	cfg := federation.NewConfig(p)
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&cfg.Name, opts.Name)
	set(&cfg.Cluster, opts.Cluster)
	set(&cfg.Prefix, opts.Prefix)
	abs := func(f string) string {
		if f == "" {
			return ""
		}
		if a, err := filepath.Abs(f); err == nil {
			return a
		}
		return f
	}
	cfg.Creds, cfg.Nkey = abs(opts.Creds), abs(opts.Nkey)
	if opts.ClusterKey != "" {
		cfg.ClusterKeyFile = abs(opts.ClusterKey)
	}
	if opts.TLSCA != "" || opts.TLSCert != "" || opts.TLSKey != "" {
		t := &federation.TLSFiles{CA: abs(opts.TLSCA), Cert: abs(opts.TLSCert), Key: abs(opts.TLSKey)}
		if opts.Embedded {
			// The server's certificate; this node's own link verifies it
			// with the CA.
			cfg.Embedded = &federation.EmbeddedConfig{TLS: t}
			if t.CA != "" {
				cfg.TLS = &federation.TLSFiles{CA: t.CA}
			}
		} else {
			cfg.TLS = t
		}
	}
	cfg.Share.Sessions, cfg.Share.Teams = opts.ShareSessions, opts.ShareTeams
	rep := &InitReport{Config: path}
	if opts.Embedded {
		if cfg.Embedded == nil {
			cfg.Embedded = &federation.EmbeddedConfig{}
		}
		cfg.Embedded.Listen = opts.Listen
		if cfg.Embedded.Listen == "" {
			cfg.Embedded.Listen = DefaultListen
		}
		cfg.Embedded.Nkeys = slices.Compact(slices.Sorted(slices.Values(append(allowed, opts.AllowNkeys...))))
		cfg.URLs = nil
		if cfg.Creds == "" && cfg.Nkey == "" {
			cfg.Nkey = DefaultNkeyFile(p)
		}
	} else if len(opts.URLs) > 0 {
		cfg.URLs = opts.URLs
	}
	if cfg.Nkey != "" {
		k, err := MakeNkey(cfg.Nkey)
		if err != nil {
			return nil, err
		}
		rep.Nkey, rep.NkeyCreated, rep.PublicKey = k.File, k.Created, k.PublicKey
	}
	if _, err := os.Stat(cfg.ClusterKeyFile); errors.Is(err, fs.ErrNotExist) {
		if opts.ClusterKey != "" {
			return nil, &federation.ConfigError{Path: path, Field: "cluster_key_file", Problem: cfg.ClusterKeyFile + " does not exist: copy it from a host of the cluster"}
		}
		if _, err := federation.GenerateClusterKey(cfg.ClusterKeyFile); err != nil {
			return nil, err
		}
		rep.ClusterKeyCreated = true
	}
	key, err := federation.ReadClusterKey(cfg.ClusterKeyFile)
	if err != nil {
		return nil, &federation.ConfigError{Path: path, Field: "cluster_key_file", Problem: err.Error()}
	}
	cfg.ClusterKey = key
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := federation.WriteConfig(p, cfg); err != nil {
		return nil, err
	}
	if _, err := federation.LoadConfig(p); err != nil {
		return nil, fmt.Errorf("node init wrote a configuration it cannot read back: %w", err)
	}
	rep.Name, rep.Cluster, rep.Prefix, rep.URLs, rep.ClusterKeyFile = cfg.Name, cfg.Cluster, cfg.Prefix, cfg.URLs, cfg.ClusterKeyFile
	if rep.URLs == nil {
		rep.URLs = []string{}
	}
	rep.joinHints(cfg)
	return rep, nil
}

// joinHints fills what the other hosts copy and run.
func (r *InitReport) joinHints(cfg *federation.Config) {
	r.Start = "agent-fleet node run   (or agent-fleet install --node)"
	base := fmt.Sprintf("agent-fleet node init --name OTHER-HOST --cluster %s --prefix %s", cfg.Cluster, cfg.Prefix)
	keyHint := fmt.Sprintf("copy %s to <agent dir>/intercom/cluster.key (chmod 600), or pass --cluster-key FILE", cfg.ClusterKeyFile)
	if cfg.Embedded == nil {
		r.JoinURL = strings.Join(cfg.URLs, ",")
		join := base
		for _, u := range cfg.URLs {
			join += " --nats " + u
		}
		r.OtherHosts = []string{keyHint, join + " [--creds FILE | --nkey FILE] [--tls-ca FILE]", "agent-fleet node run"}
		return
	}
	r.Embedded = cfg.Embedded.Listen
	scheme := "nats"
	if cfg.Embedded.TLS != nil {
		scheme = "tls"
	}
	r.JoinURL = scheme + "://" + cfg.Embedded.Listen
	if strings.HasPrefix(cfg.Embedded.Listen, "0.0.0.0:") || strings.HasPrefix(cfg.Embedded.Listen, "[::]:") {
		_, port, _ := strings.Cut(cfg.Embedded.Listen, "]:")
		if port == "" {
			_, port, _ = strings.Cut(cfg.Embedded.Listen, ":")
		}
		r.JoinURL = scheme + "://THIS-HOST:" + port
	}
	if strings.HasSuffix(cfg.Embedded.Listen, ":0") {
		r.JoinURL = strings.TrimSuffix(r.JoinURL, "0") + "PORT (agent-fleet node status shows it once the node runs)"
	}
	join := base + " --nats " + r.JoinURL + " --nkey <agent dir>/intercom/node.nk"
	if cfg.Embedded.TLS != nil {
		join += " --tls-ca CA-FILE"
	}
	// The same init again, with the key added: --force keeps only the keys.
	again := fmt.Sprintf("agent-fleet node init --embedded --name %s --listen %s --cluster %s --prefix %s", cfg.Name, cfg.Embedded.Listen, cfg.Cluster, cfg.Prefix)
	if t := cfg.Embedded.TLS; t != nil {
		again += " --tls-cert " + t.Cert + " --tls-key " + t.Key
		if t.CA != "" {
			again += " --tls-ca " + t.CA
		}
	}
	r.OtherHosts = []string{
		keyHint,
		"agent-fleet node key   (prints the host's public nkey)",
		"here: " + again + " --allow-nkey THAT-KEY --force, and restart this node",
		join,
		"agent-fleet node run",
	}
}

// Text is the report for people.
func (r *InitReport) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Wrote %s: node %s, cluster %s, prefix %s.\n", r.Config, r.Name, r.Cluster, r.Prefix)
	made := map[bool]string{true: "made", false: "kept"}
	fmt.Fprintf(&b, "Cluster key: %s (%s): every host of the cluster needs this same key.\n", r.ClusterKeyFile, made[r.ClusterKeyCreated])
	if r.Nkey != "" {
		fmt.Fprintf(&b, "This host's nkey: %s (%s), public key %s\n", r.Nkey, made[r.NkeyCreated], r.PublicKey)
	}
	if r.Embedded != "" {
		fmt.Fprintf(&b, "Embedded NATS server: listens on %s; other hosts join %s\n", r.Embedded, r.JoinURL)
	} else {
		fmt.Fprintf(&b, "Joins NATS at %s\n", r.JoinURL)
	}
	b.WriteString("On every other host:\n")
	for i, c := range r.OtherHosts {
		fmt.Fprintf(&b, "  %d. %s\n", i+1, c)
	}
	fmt.Fprintf(&b, "Start this node: %s", r.Start)
	return b.String()
}
