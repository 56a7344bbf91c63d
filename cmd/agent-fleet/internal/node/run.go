package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/federation"
	"github.com/agent-fleet/agent-fleet/teams"
)

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

	bc := opts.Broker
	bc.Paths, bc.Logger, bc.IdleExit = p, log, -1
	bc.API = n.api
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	defer func() {
		if br := n.getBridge(); br != nil {
			br.Close()
		}
	}()
	bc.Prepare = func(b *broker.Broker) {
		// The bridge is the broker's federation from its first
		// connection: the scoper hides scopes behind cluster-key tokens.
		br := federation.NewBridge(link, b, cfg, log)
		br.TeamScope = func(team string) (string, error) {
			_, scope, err := teams.NewStore(opts.Paths).Lookup(team)
			return scope.Value(), err
		}
		b.SetFederation(br, cfg.Scoper())
		if err := br.Start(); err != nil {
			log.Error("the bridge did not start: sessions stay on this host", "err", err)
		} else {
			n.setBridge(br)
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
	embedded  string
	startedAt time.Time
	mu        sync.Mutex
	bridge    *federation.Bridge // set once the broker serves
}

func (n *node) setBridge(br *federation.Bridge) {
	n.mu.Lock()
	n.bridge = br
	n.mu.Unlock()
}

func (n *node) getBridge() *federation.Bridge {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.bridge
}

func (n *node) status() *Status {
	fs := federation.Status{Prefix: n.cfg.Prefix, Node: n.cfg.Name, Link: n.link.State(), LiveHosts: []string{}, HiddenCollisions: []string{}}
	if br := n.getBridge(); br != nil {
		fs = br.Status()
	} else {
		fs.On = fs.Link == "connected"
		for _, h := range n.link.LiveHosts() {
			fs.LiveHosts = append(fs.LiveHosts, h.Host)
		}
		if !fs.On {
			fs.Reason = "NATS link " + fs.Link
		}
	}
	return &Status{Status: fs, Routing: federation.StatusLine(fs), Config: n.cfg.Path, Cluster: n.cfg.Cluster,
		PID: os.Getpid(), Server: n.link.ServerURL(), Embedded: n.embedded}
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
		br := n.getBridge()
		if br == nil {
			return intercom.APIResponse{Error: "this node's bridge is not running"}, true
		}
		if sr.On {
			br.Share(req.SessionID)
		} else {
			br.Unshare(req.SessionID)
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
