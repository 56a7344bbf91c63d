package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/federation"
)

// Status is a node's state as the local API op federation returns it and
// node status prints it; Query fills in On false with Reason when no node
// answers.
type Status struct {
	On bool `json:"on"`
	// Reason says why routing is off ("" when on).
	Reason string `json:"reason,omitempty"`
	// Routing is intercom status's line: "Multi-node routing: on (nats,
	// prefix P), N other hosts live" or "Multi-node routing: off (why)".
	Routing string `json:"routing"`
	// Config is the node configuration's path.
	Config  string `json:"config"`
	Node    string `json:"node,omitempty"`
	Cluster string `json:"cluster,omitempty"`
	Prefix  string `json:"prefix,omitempty"`
	PID     int    `json:"pid,omitempty"`
	// Link is the NATS link's state: connected, reconnecting or closed.
	Link string `json:"link,omitempty"`
	// Server is the NATS server the link is connected to ("" while down).
	Server string `json:"server,omitempty"`
	// Embedded is the client URL of the NATS server inside this node.
	Embedded string `json:"embedded,omitempty"`
	// Hosts are the other live hosts of the cluster, by name.
	Hosts []string `json:"hosts"`
	// Shared counts the local sessions announced to other hosts, Remote
	// the other hosts' sessions shown here.
	Shared int `json:"shared"`
	Remote int `json:"remote"`
	// Collisions are ids of other hosts' sessions hidden because a local
	// session holds the id.
	Collisions []string `json:"collisions,omitempty"`
}

// AsRouting is the status as intercom status shows it.
func (s *Status) AsRouting() *intercom.Routing {
	return &intercom.Routing{On: s.On, Line: s.Routing, Reason: s.Reason, Prefix: s.Prefix, OtherHosts: len(s.Hosts)}
}

// RoutingLine renders the routing line of a status.
func RoutingLine(on bool, prefix string, others int, reason string) string {
	if !on {
		return "Multi-node routing: off (" + reason + ")"
	}
	hosts := "other hosts"
	if others == 1 {
		hosts = "other host"
	}
	return fmt.Sprintf("Multi-node routing: on (nats, prefix %s), %d %s live", prefix, others, hosts)
}

// off is the status of a node that does not answer.
func off(path, reason string) *Status {
	return &Status{Config: path, Reason: reason, Routing: RoutingLine(false, "", 0, reason), Hosts: []string{}}
}

// Query asks the broker of p for its node's status (local API op
// federation). It always returns a status: off with the reason when there
// is no node.toml, no broker, or a broker without federation.
func Query(ctx context.Context, p intercom.Paths) *Status {
	path := federation.ConfigPath(p)
	if _, err := os.Stat(path); err != nil {
		return off(path, "no node configuration at "+path)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	body, err := (&intercom.LocalAPIClient{Path: p.LocalAPISocket()}).Federation(ctx)
	if err != nil {
		return off(path, "node not running")
	}
	var st Status
	if err := json.Unmarshal(body, &st); err != nil {
		return off(path, "node answered no status: "+err.Error())
	}
	if st.Hosts == nil {
		st.Hosts = []string{}
	}
	return &st
}

// Running reports whether a node serves p: its broker answers the local
// API op federation. It returns the node's pid.
func Running(ctx context.Context, p intercom.Paths) (int, bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	body, err := (&intercom.LocalAPIClient{Path: p.LocalAPISocket()}).Federation(ctx)
	if err != nil {
		return 0, false
	}
	var st Status
	_ = json.Unmarshal(body, &st)
	return st.PID, true
}

// IsUnknownOp reports whether err says the broker has no federation.
func IsUnknownOp(err error) bool { return errors.Is(err, intercom.ErrUnknownOp) }

// Text is node status for people.
func (s *Status) Text() string {
	var b strings.Builder
	b.WriteString(s.Routing)
	if !s.On && s.Node == "" {
		return b.String()
	}
	fmt.Fprintf(&b, "\nNode: %s (pid %d), cluster %s, prefix %s\n", s.Node, s.PID, s.Cluster, s.Prefix)
	link := s.Link
	if s.Server != "" {
		link += " to " + s.Server
	}
	fmt.Fprintf(&b, "NATS link: %s\n", link)
	if s.Embedded != "" {
		fmt.Fprintf(&b, "Embedded NATS server: %s\n", s.Embedded)
	}
	hosts := "none"
	if len(s.Hosts) > 0 {
		hosts = strings.Join(s.Hosts, ", ")
	}
	fmt.Fprintf(&b, "Other hosts live: %s\n", hosts)
	fmt.Fprintf(&b, "Sessions: %d shared from this host, %d of other hosts shown here", s.Shared, s.Remote)
	if len(s.Collisions) > 0 {
		fmt.Fprintf(&b, "\nHidden (a local session holds the id): %s", strings.Join(s.Collisions, ", "))
	}
	return b.String()
}

// LocalName is this host's node name from node.toml of p, "" without a
// usable one: intercom list's HOST of this host's sessions.
func LocalName(p intercom.Paths) string {
	data, err := os.ReadFile(federation.ConfigPath(p))
	if err != nil {
		return ""
	}
	cfg, err := federation.ParseConfig(data, p)
	if err != nil {
		return ""
	}
	return cfg.Name
}
