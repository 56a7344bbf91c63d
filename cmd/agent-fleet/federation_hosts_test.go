//go:build linux

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/federation/federationtest"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
)

// A federation world is several hosts on this machine joined through one
// real NATS server (nats-server/v2 embedded in the test process, nkey
// authentication, JetStream on). Each host has its own short agent
// directory (PI_CODING_AGENT_DIR), HOME, node.toml, nkey and
// `agent-fleet node run` process, and a link to the server that the test
// owns (federationtest.Proxy): cutting it is how a host's NATS link dies.
//
// Where the test runs as root with nsenter (the development and CI
// machines), each host also gets its own network namespace with only
// loopback: its node and CLI processes run in it, its node.toml names
// nats://127.0.0.1:4222 like every other host's, and that address inside
// the namespace is the host's proxy — the host can reach the server and
// nothing else. Elsewhere every host shares the machine's network and its
// node.toml names its own proxy's port instead; the world logs which.
//
// Worker lifecycle across hosts uses the run's shared user manager for
// every host (units/unitstest): two private managers would place their
// units under one app.slice anyway (docs/systemd.md), and unit names carry
// the agent directory, so hosts never see each other's units.
type fedWorld struct {
	t       *testing.T
	nats    *federationtest.Server
	prefix  string
	cluster string
	key     string // the cluster key, hex
	netns   bool
	hosts   map[string]*fedHost
}

// fedHost is one host of a fedWorld.
type fedHost struct {
	w    *fedWorld
	name string
	dir  string // PI_CODING_AGENT_DIR
	home string
	ns   *federationtest.Netns // nil without namespaces
	link *federationtest.Proxy
	env  []string // extra environment of every process of the host

	mu   sync.Mutex
	node *fedNode
	past []string // output of nodes killed before
}

// fedNode is one run of a host's `agent-fleet node run`.
type fedNode struct {
	cmd    *exec.Cmd
	out    *lockedBuffer
	waited chan error
}

// fedHostConfig is what a host's node.toml says beyond the world's
// defaults.
type fedHostConfig struct {
	// Name overrides the node name (a collision test names two hosts
	// alike).
	Name string
	// Cluster and Key override the world's cluster name and key (hex).
	Cluster, Key string
	// Unauthorized gives the host an nkey the server does not know.
	Unauthorized bool
	// Share are share.sessions globs.
	Share []string
	// Env is extra environment for every process of the host.
	Env []string
}

func newFedWorld(t *testing.T) *fedWorld {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	w := &fedWorld{t: t, nats: federationtest.StartServer(t), prefix: "af-" + hex.EncodeToString(key[:4]), cluster: "e2e",
		key: hex.EncodeToString(key), hosts: map[string]*fedHost{}}
	if err := federationtest.NetnsSupported(); err == nil {
		w.netns = true
	} else {
		t.Logf("hosts share this machine's network (%v); each still has its own agent directory, HOME and NATS link", err)
	}
	return w
}

// addHost makes host name's directories, nkey and node.toml (not started).
func (w *fedWorld) addHost(name string, c fedHostConfig) *fedHost {
	t := w.t
	t.Helper()
	dir, err := os.MkdirTemp("", "afh"+name)
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	h := &fedHost{w: w, name: name, dir: dir, home: filepath.Join(dir, "home"), env: c.Env}
	require.NoError(t, os.MkdirAll(h.home, 0o700))
	idir := filepath.Join(dir, "intercom")
	require.NoError(t, os.MkdirAll(idir, 0o700))

	seed, public := federationtest.NewUser(t)
	if !c.Unauthorized {
		require.NoError(t, w.nats.Allow(public))
	}
	seedFile := federationtest.SeedFile(t, idir, seed)
	key := w.key
	if c.Key != "" {
		key = c.Key
	}
	keyFile := filepath.Join(idir, "cluster.key")
	require.NoError(t, os.WriteFile(keyFile, []byte(key+"\n"), 0o600))

	url := ""
	if w.netns {
		h.ns = federationtest.NewNetns(t)
		ln, err := h.ns.Listen("127.0.0.1:4222")
		require.NoError(t, err)
		h.link = federationtest.NewProxy(t, ln, w.nats.Addr)
		url = "nats://127.0.0.1:4222"
	} else {
		h.link = federationtest.ListenProxy(t, w.nats.Addr)
		url = h.link.URL()
	}
	cfg := map[string]any{
		"name":             name,
		"cluster":          w.cluster,
		"prefix":           w.prefix,
		"urls":             []string{url},
		"nkey":             seedFile,
		"cluster_key_file": keyFile,
	}
	if c.Name != "" {
		cfg["name"] = c.Name
	}
	if c.Cluster != "" {
		cfg["cluster"] = c.Cluster
	}
	if len(c.Share) > 0 {
		cfg["share"] = map[string]any{"sessions": c.Share}
	}
	data, err := toml.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(idir, "node.toml"), data, 0o600))
	w.hosts[name] = h
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("host %s node output:\n%s", name, h.nodeOutput())
			if log, err := os.ReadFile(intercom.NewPaths(dir).BrokerLog()); err == nil {
				t.Logf("host %s broker log:\n%s", name, log)
			}
		}
		h.stop()
	})
	return h
}

// host adds and starts a host whose node joined.
func (w *fedWorld) host(name string, c fedHostConfig) *fedHost {
	h := w.addHost(name, c)
	h.start()
	return h
}

// command is a process of the host running this test binary as
// agent-fleet, as session id (none when ""), in the host's namespace.
func (h *fedHost) command(id string, args ...string) *exec.Cmd {
	exe, err := os.Executable()
	require.NoError(h.w.t, err)
	cmd := h.program(exe, args...)
	cmd.Env = append(cmd.Env, "AGENT_FLEET_RUN_MAIN=1")
	if id != "" {
		cmd.Env = append(cmd.Env, "AGENT_INTERCOM_SESSION_ID="+id)
	}
	return cmd
}

// program is a process of the host running name: in the host's
// namespace, with its agent directory and HOME.
func (h *fedHost) program(name string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if h.ns != nil {
		cmd = h.ns.Command(name, args...)
	} else {
		cmd = exec.Command(name, args...)
	}
	cmd.Env = append(os.Environ(), "PI_CODING_AGENT_DIR="+h.dir, "HOME="+h.home, "DISABLE_AUTOUPDATER=1")
	cmd.Env = append(cmd.Env, h.env...)
	cmd.Dir = h.home
	return cmd
}

// run runs a command of the host to its end: stdout, and the error with
// stderr in it.
func (h *fedHost) run(id string, args ...string) (string, error) {
	cmd := h.command(id, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s on %s: %w: %s", id, strings.Join(args, " "), h.name, err, stderr.String())
	}
	return string(out), nil
}

// must is run that fails the test on an error.
func (h *fedHost) must(id string, args ...string) string {
	h.w.t.Helper()
	out, err := h.run(id, args...)
	require.NoError(h.w.t, err, "%s", out)
	return out
}

// start runs the host's `agent-fleet node run` and waits until its broker
// answers on the host's broker socket (it may not have joined yet: see
// waitLive).
func (h *fedHost) start() {
	t := h.w.t
	t.Helper()
	n := h.startNode()
	p := intercom.NewPaths(h.dir)
	for {
		if hl, _ := intercom.ProbeBroker(context.Background(), p); hl == intercom.Compatible {
			return
		}
		select {
		case err := <-n.waited:
			n.waited <- err
			t.Fatalf("host %s: node run exited (%v):\n%s", h.name, err, n.out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startNode starts `agent-fleet node run` and returns at once.
func (h *fedHost) startNode(args ...string) *fedNode {
	h.w.t.Helper()
	cmd := h.command("", append([]string{"node", "run"}, args...)...)
	n := &fedNode{cmd: cmd, out: &lockedBuffer{}, waited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = n.out, n.out
	require.NoError(h.w.t, cmd.Start())
	go func() { n.waited <- cmd.Wait() }()
	h.mu.Lock()
	h.node = n
	h.mu.Unlock()
	return n
}

// exited waits (hang guard: 60 s) for a node run to end and returns its
// error and output.
func (n *fedNode) exited(t *testing.T) (error, string) {
	t.Helper()
	select {
	case err := <-n.waited:
		n.waited <- err
		return err, n.out.String()
	case <-time.After(60 * time.Second):
		t.Fatalf("node run did not exit:\n%s", n.out.String())
		return nil, ""
	}
}

// kill ends the host's node with SIGKILL, by pid, and reaps it.
func (h *fedHost) kill() {
	h.mu.Lock()
	n := h.node
	h.node = nil
	h.mu.Unlock()
	if n == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	err := <-n.waited
	n.waited <- err
	h.mu.Lock()
	h.past = append(h.past, n.out.String())
	h.mu.Unlock()
}

// stop ends the host's node with SIGTERM (SIGKILL after 20 s).
func (h *fedHost) stop() {
	h.mu.Lock()
	n := h.node
	h.mu.Unlock()
	if n == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-n.waited:
		n.waited <- err
	case <-time.After(20 * time.Second):
	}
	h.kill()
}

func (h *fedHost) nodeOutput() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := strings.Join(h.past, "\n--- node restarted ---\n")
	if h.node != nil {
		out += "\n--- current node ---\n" + h.node.out.String()
	}
	return out
}

// federation is the host's node status through its local API (the body
// of op federation).
func (h *fedHost) federation() (map[string]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	api := &intercom.LocalAPIClient{Path: intercom.NewPaths(h.dir).LocalAPISocket()}
	body, err := api.Federation(ctx)
	if err != nil {
		return nil, err
	}
	var st map[string]any
	return st, json.Unmarshal(body, &st)
}

// waitLive waits (hang guard: 60 s) until the host's node sees exactly
// the other hosts named live.
func (h *fedHost) waitLive(others ...string) {
	t := h.w.t
	t.Helper()
	var last string
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := h.federation()
		if err == nil {
			got := liveHostNames(st)
			if equalSets(got, others) {
				return
			}
			last = fmt.Sprint(got)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("host %s: want live hosts %v, last saw %s\nnode:\n%s", h.name, others, last, h.nodeOutput())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitJoined waits until every host sees every other live.
func (w *fedWorld) waitJoined() {
	w.t.Helper()
	for name, h := range w.hosts {
		var others []string
		for o := range w.hosts {
			if o != name {
				others = append(others, o)
			}
		}
		h.waitLive(others...)
	}
}

// liveHostNames reads the names of the live other hosts from a node's
// federation status (federation.Status's liveHosts).
func liveHostNames(st map[string]any) []string {
	var names []string
	hosts, _ := st["liveHosts"].([]any)
	for _, x := range hosts {
		if n, ok := x.(string); ok {
			names = append(names, n)
		}
	}
	return names
}

func equalSets(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, x := range a {
		seen[x]++
	}
	for _, x := range b {
		if seen[x] == 0 {
			return false
		}
		seen[x]--
	}
	return true
}

// pid is the host's current node pid (0 when none runs).
func (h *fedHost) pid() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.node == nil {
		return 0
	}
	return h.node.cmd.Process.Pid
}

// fedRegister registers a raw v4 client of p's broker that passes over
// the broadcasts of sessions coming and going on any host.
func fedRegister(t *testing.T, p intercom.Paths, id string, o intercomtest.RegisterOptions) *intercomtest.Client {
	t.Helper()
	c := intercomtest.Register(t, p, id, o)
	c.SkipBroadcasts = true
	c.Wait = 2 * time.Minute // a host is declared gone after seconds of silence, longer on a busy machine
	return c
}
