package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sort"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/federation"
)

// Bridge is what a node runs between its broker and the NATS link
// (federation's bridge, docs/federation.md "A message across hosts").
type Bridge interface {
	broker.Federation
	// Attach starts the bridge on the broker the node serves, before
	// that broker serves its first connection.
	Attach(b *broker.Broker)
	// Share announces (on) or withdraws a local session, as its holder
	// asked (the local API op share).
	Share(sessionID string, on bool) error
	// Counts are the local sessions shared, the other hosts' sessions
	// shown here, and the ids of those hidden by a local session.
	Counts() (shared, remote int, collisions []string)
	// Close stops the bridge: the other hosts' sessions leave.
	Close()
}

// Service is something more the node runs on its link, such as the
// remote fleet server: start returns what stops it.
type Service func(ctx context.Context, link *federation.Link, b *broker.Broker) (stop func(), err error)

// RunOptions configure Run.
type RunOptions struct {
	Paths  intercom.Paths
	Logger *slog.Logger
	// Version is the agent-fleet version announced to other hosts.
	Version string
	// Broker is the broker's configuration but Paths, Logger, IdleExit,
	// API and Prepare, which Run sets.
	Broker broker.Config
	// NewBridge makes the bridge of the joined link (nil: none, the node
	// only joins and reports live hosts).
	NewBridge func(link *federation.Link) Bridge
	// Services run beside the bridge once the broker serves.
	Services []Service
	// Started, when set, is told once the node serves (for tests and
	// node run's first line).
	Started func(*Status)
}

// ErrNodeRunning: a node already serves this agent directory (exit 4, as
// a second broker).
var ErrNodeRunning = fmt.Errorf("%w: a node already serves this agent directory", broker.ErrAlreadyRunning)

// handoverAttempts bounds how often Run asks a broker without federation
// to hand the agent directory over: clients that lose it may start
// another on demand before the node's listens.
const handoverAttempts = 50

// Run is the whole life of agent-fleet node run: read node.toml, refuse
// when a node already serves the directory, start the embedded NATS
// server, join the cluster as this host (federation.Connect: a refused
// credential, a wrong cluster or a taken name ends it here, nothing
// joined, and a broker already serving is left alone), then serve this
// host's broker with the bridge and the local API ops federation and
// share, never idling out, until ctx ends. A broker without federation
// that serves the directory is asked to shut down and replaced; its
// clients reconnect to the node.
func Run(ctx context.Context, opts RunOptions) error {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := opts.Paths
	cfg, err := federation.LoadConfig(p)
	if err != nil {
		return err
	}
	if pid, ok := Running(ctx, p); ok {
		return fmt.Errorf("%w (pid %d)", ErrNodeRunning, pid)
	}
	n := &node{cfg: cfg, log: log, startedAt: time.Now()}
	var urls []string
	if cfg.Embedded != nil {
		emb, err := federation.StartEmbedded(cfg, log.With("component", "nats-server"))
		if err != nil {
			return err
		}
		defer emb.Shutdown()
		n.embedded = emb.ClientURL()
		urls = []string{n.embedded}
		log.Info("embedded NATS server listening", "url", n.embedded)
	}
	link, err := federation.Connect(ctx, cfg, federation.LinkOptions{URLs: urls, Logger: log, Version: opts.Version})
	if err != nil {
		return err
	}
	defer link.Close()
	n.link = link
	log.Info("joined the cluster", "node", cfg.Name, "cluster", cfg.Cluster, "prefix", cfg.Prefix, "server", link.ServerURL())
	if opts.NewBridge != nil {
		n.bridge = opts.NewBridge(link)
		defer n.bridge.Close()
	}

	bc := opts.Broker
	bc.Paths, bc.Logger, bc.IdleExit = p, log, -1
	bc.API = n.api
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	bc.Prepare = func(b *broker.Broker) {
		if n.bridge != nil {
			n.bridge.Attach(b)
		}
		for _, svc := range opts.Services {
			stop, err := svc(ctx, link, b)
			if err != nil {
				log.Error("a node service did not start", "err", err)
				continue
			}
			stops = append(stops, stop)
		}
		if opts.Started != nil {
			opts.Started(n.status())
		}
	}
	api := &intercom.LocalAPIClient{Path: p.LocalAPISocket()}
	for attempt := 1; ; attempt++ {
		err := broker.ListenAndServe(ctx, bc)
		if !errors.Is(err, broker.ErrAlreadyRunning) || ctx.Err() != nil {
			return err
		}
		if pid, ok := Running(ctx, p); ok {
			return fmt.Errorf("%w (pid %d)", ErrNodeRunning, pid)
		}
		if attempt == handoverAttempts {
			return fmt.Errorf("%w; it did not hand over to the node (a socket unit? agent-fleet install --node replaces it)", err)
		}
		if attempt == 1 {
			log.Info("a broker without federation serves this agent directory: asking it to hand over; its clients reconnect")
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = api.Shutdown(sctx)
		cancel()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// node is a running node, for its local API ops.
type node struct {
	cfg       *federation.Config
	log       *slog.Logger
	link      *federation.Link
	bridge    Bridge
	embedded  string
	startedAt time.Time
}

func (n *node) status() *Status {
	st := &Status{On: n.link.Connected(), Config: n.cfg.Path, Node: n.cfg.Name, Cluster: n.cfg.Cluster,
		Prefix: n.cfg.Prefix, PID: os.Getpid(), Link: n.link.State(), Server: n.link.ServerURL(),
		Embedded: n.embedded, Hosts: []string{}}
	for _, h := range n.link.LiveHosts() {
		if h.Host != n.cfg.Name {
			st.Hosts = append(st.Hosts, h.Host)
		}
	}
	sort.Strings(st.Hosts)
	if n.bridge != nil {
		st.Shared, st.Remote, st.Collisions = n.bridge.Counts()
	}
	if !st.On {
		st.Reason = "NATS link " + st.Link
	}
	st.Routing = RoutingLine(st.On, st.Prefix, len(st.Hosts), st.Reason)
	return st
}

// api answers the node's local API ops (broker.Config.API).
func (n *node) api(req intercom.APIRequest) (intercom.APIResponse, bool) {
	switch req.Op {
	case intercom.OpFederation:
		body, err := json.Marshal(n.status())
		if err != nil {
			return intercom.APIResponse{Error: err.Error()}, true
		}
		return intercom.APIResponse{OK: true, Body: body}, true
	case intercom.OpShare:
		var sr intercom.ShareRequest
		if len(req.Body) > 0 {
			if err := json.Unmarshal(req.Body, &sr); err != nil {
				return intercom.APIResponse{Error: "bad share body: " + err.Error()}, true
			}
		}
		if req.SessionID == "" {
			return intercom.APIResponse{Error: "share needs sessionId"}, true
		}
		if n.bridge == nil {
			return intercom.APIResponse{Error: "this node has no bridge"}, true
		}
		if err := n.bridge.Share(req.SessionID, sr.On); err != nil {
			return intercom.APIResponse{Error: err.Error()}, true
		}
		return intercom.APIResponse{OK: true}, true
	}
	return intercom.APIResponse{}, false
}

// DefaultBrokerConfig is the broker of a node as agent-fleet broker runs
// it by default, with askTTL (0: the default).
func DefaultBrokerConfig(askTTL time.Duration) broker.Config {
	return broker.Config{
		MaxSessions:  broker.DefaultMaxSessions,
		RateCapacity: broker.DefaultRateCapacity,
		RateRefill:   broker.DefaultRateRefill,
		TrustedLocal: runtime.GOOS != "windows",
		CheckPeerUID: runtime.GOOS != "windows",
		AskTTL:       askTTL,
	}
}
