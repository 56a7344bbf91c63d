//go:build !windows

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/node"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/remote"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/federation"
)

// nodeHost is one host of a test cluster: its own agent directory.
type nodeHost struct {
	t   *testing.T
	dir string
}

func newNodeHost(t *testing.T) *nodeHost {
	h := &nodeHost{t: t, dir: shortDir(t)}
	t.Cleanup(func() { stopBroker(t, h.dir) })
	return h
}

func (h *nodeHost) run(args ...string) (string, error) {
	out, err := agentFleet(h.t, h.dir, args...).CombinedOutput()
	return string(out), err
}

func (h *nodeHost) must(args ...string) string {
	h.t.Helper()
	out, err := h.run(args...)
	require.NoError(h.t, err, "%v: %s", args, out)
	return out
}

func (h *nodeHost) jsonOf(v any, args ...string) {
	h.t.Helper()
	out, err := agentFleet(h.t, h.dir, args...).Output()
	require.NoError(h.t, err, "%v: %s", args, out)
	require.NoError(h.t, json.Unmarshal(out, v), "%s", out)
}

func (h *nodeHost) status() node.Status {
	var st node.Status
	h.jsonOf(&st, "node", "status", "--json")
	return st
}

func (h *nodeHost) seed() string { return filepath.Join(h.dir, "intercom", "node.nk") }

// startNode runs node run and waits until its node answers.
func (h *nodeHost) startNode() *proc {
	h.t.Helper()
	cmd := agentFleet(h.t, h.dir, "node", "run", "--log-level", "debug")
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	require.NoError(h.t, cmd.Start())
	p := &proc{Cmd: cmd, stderr: stderr, waited: make(chan error, 1)}
	go func() { p.waited <- cmd.Wait() }()
	h.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.waited
		if h.t.Failed() {
			h.t.Logf("node run of %s:\n%s", h.dir, stderr.String())
		}
	})
	require.Eventually(h.t, func() bool {
		select {
		case err := <-p.waited:
			p.waited <- err
			h.t.Fatalf("node run ended: %v: %s", err, stderr.String())
		default:
		}
		return h.status().On
	}, time.Minute, 50*time.Millisecond, "the node comes up: %s", stderr.String())
	return p
}

// routing is intercom status's routing line on the host.
func (h *nodeHost) routing() string {
	out := h.must("intercom", "status")
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "Multi-node routing:") {
			return l
		}
	}
	return ""
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Mode().Perm()
}

// Two hosts, one running the embedded NATS server, the other joining it
// with its own nkey: both see each other live; hosts with an unknown key,
// a taken name or another cluster's key are refused and join nothing.
func TestNodeHostsJoinOverEmbeddedNATS(t *testing.T) {
	t.Parallel()
	a, b := newNodeHost(t), newNodeHost(t)

	// Before any node.toml: routing is off and doctor says so.
	require.Equal(t, "Multi-node routing: off (no node configuration at "+federation.ConfigPath(intercom.NewPaths(a.dir))+")", a.routing())

	var key node.KeyReport
	b.jsonOf(&key, "node", "key", "--json")
	require.True(t, key.Created)
	require.Equal(t, b.seed(), key.File)
	require.Regexp(t, `^U[A-Z0-9]{55}$`, key.PublicKey)
	require.Equal(t, os.FileMode(0o600), fileMode(t, key.File))
	require.Equal(t, key.PublicKey+"\n", b.must("node", "key"), "an existing seed is kept")

	var rep node.InitReport
	a.jsonOf(&rep, "node", "init", "--embedded", "--name", "alpha", "--listen", "127.0.0.1:0", "--allow-nkey", key.PublicKey, "--json")
	require.True(t, rep.ClusterKeyCreated)
	require.True(t, rep.NkeyCreated)
	pa := intercom.NewPaths(a.dir)
	for _, f := range []string{rep.Config, rep.ClusterKeyFile, rep.Nkey} {
		require.Equal(t, os.FileMode(0o600), fileMode(t, f), f)
	}
	cfg, err := federation.LoadConfig(pa)
	require.NoError(t, err, "node init writes what node run reads")
	require.Equal(t, "alpha", cfg.Name)
	require.Equal(t, []string{key.PublicKey}, cfg.Embedded.Nkeys)
	require.Len(t, cfg.ClusterKey, federation.ClusterKeyBytes)
	// Adding a host's key again keeps this host's name and address.
	require.Contains(t, rep.OtherHosts, "here: agent-fleet node init --embedded --name alpha --listen 127.0.0.1:0 --cluster "+
		rep.Cluster+" --prefix "+rep.Prefix+" --allow-nkey THAT-KEY --force, and restart this node")
	_, err = a.run("node", "init", "--embedded", "--name", "alpha")
	requireExit(t, err, exitConflict)
	require.Equal(t, "Multi-node routing: off (node not running)", a.routing())

	a.startNode()
	require.Equal(t, "Multi-node routing: on (nats, prefix agent-fleet), 0 other hosts live", a.routing())
	var res intercom.StatusResult
	a.jsonOf(&res, "intercom", "status", "--json")
	require.NotNil(t, res.Routing)
	require.True(t, res.Routing.On)
	require.Zero(t, res.Routing.OtherHosts)
	doctor := doctorChecks(t, a)
	require.Contains(t, doctor["federation"], "ok: node alpha, cluster default, prefix agent-fleet")
	require.Contains(t, doctor["NATS"], "ok: reachable at nats://127.0.0.1:")
	require.Contains(t, doctor["node"], "ok: running (pid ")
	require.Contains(t, doctor["node credentials"], "ok: nkey "+rep.Nkey)
	url := a.status().Embedded
	require.NotEmpty(t, url)

	// A second node on the same directory is refused as a second broker.
	_, err = a.run("node", "run")
	requireExit(t, err, exitConflict)

	joinArgs := func(name, seed string, extra ...string) []string {
		return append([]string{"node", "init", "--name", name, "--nats", url, "--nkey", seed}, extra...)
	}
	b.must(joinArgs("beta", b.seed(), "--cluster-key", rep.ClusterKeyFile)...)
	b.startNode()
	require.Eventually(t, func() bool {
		return a.routing() == "Multi-node routing: on (nats, prefix agent-fleet), 1 other host live" &&
			b.routing() == "Multi-node routing: on (nats, prefix agent-fleet), 1 other host live"
	}, time.Minute, 100*time.Millisecond)
	require.Equal(t, []string{"beta"}, a.status().LiveHosts)
	require.Equal(t, []string{"alpha"}, b.status().LiveHosts)

	// B's node answers fleet verbs for the other hosts: a list from A
	// reaches B's fleet (which may have no user manager here to read).
	link, err := federation.ConnectClient(context.Background(), cfg, federation.LinkOptions{URLs: []string{url}})
	require.NoError(t, err)
	defer link.Close()
	workers, err := (&remote.Client{Transport: node.Transport(link), Caller: "alice"}).List(context.Background(), "beta", true)
	if err != nil {
		require.NotErrorIs(t, err, remote.ErrHostUnreachable)
		require.Contains(t, err.Error(), "user manager", "B's fleet answered")
	} else {
		require.Empty(t, workers)
	}

	// A listener on B that asks to be shared is listed on A with its host;
	// one that does not ask stays on B.
	shared := as(t, b.dir, "bob", "intercom", "listen", "--share")
	shared.Stderr = &lockedBuffer{}
	require.NoError(t, shared.Start())
	t.Cleanup(func() { _ = shared.Process.Kill(); _ = shared.Wait() })
	startListener(t, b.dir, "carol")
	require.Eventually(t, func() bool {
		out, err := as(t, a.dir, "alice", "intercom", "list").CombinedOutput()
		return err == nil && regexp.MustCompile(`(?m)^beta +bob +`).Match(out)
	}, time.Minute, 100*time.Millisecond)
	out, err := as(t, a.dir, "alice", "intercom", "list").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Regexp(t, `^HOST +SESSION +MODEL +STATUS +CWD\n`, string(out))
	require.NotContains(t, string(out), "carol", "an unshared session stays on its host")
	var list intercom.ListResult
	data, err := as(t, a.dir, "alice", "intercom", "list", "--json").Output()
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &list), "%s", data)
	require.Len(t, list.Sessions, 1)
	require.Equal(t, "bob", list.Sessions[0].ID)
	require.Equal(t, "beta", list.Sessions[0].RemoteHostID)
	require.Equal(t, "remote", list.Sessions[0].Origin)
	require.Equal(t, 1, a.status().RemoteSessions)
	require.Equal(t, 1, b.status().SharedSessions)
	out, err = as(t, b.dir, "dave", "intercom", "list").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Regexp(t, `(?m)^beta +carol +`, string(out), "this host's sessions show its node name")

	// Refused joins: each says why, exits with its code, and leaves no
	// broker behind.
	refused := func(h *nodeHost, code int, want string) {
		t.Helper()
		out, err := h.run("node", "run")
		requireExit(t, err, code)
		require.Contains(t, out, want)
		require.NoFileExists(t, intercom.NewPaths(h.dir).PIDFile(), "nothing joined, no broker runs")
	}
	stranger := newNodeHost(t)
	stranger.must("node", "key")
	stranger.must(joinArgs("gamma", stranger.seed(), "--cluster-key", rep.ClusterKeyFile)...)
	refused(stranger, exitUsage, "the NATS server refused the credentials")
	require.Contains(t, doctorChecks(t, stranger)["NATS"], "fail: the NATS server refused the credentials")

	twin := newNodeHost(t)
	twin.must(joinArgs("beta", b.seed(), "--cluster-key", rep.ClusterKeyFile)...)
	refused(twin, exitConflict, "node name beta is held by a live host")

	other := newNodeHost(t)
	other.must(joinArgs("delta", b.seed())...) // a cluster key of its own
	refused(other, exitConflict, "belongs to another cluster")
	require.Equal(t, []string{"beta"}, a.status().LiveHosts, "none of them joined")
}

// doctorChecks are doctor's findings on the host as "status: detail".
func doctorChecks(t *testing.T, h *nodeHost) map[string]string {
	t.Helper()
	out, _ := agentFleet(t, h.dir, "doctor", "--json").Output() // other checks may fail here
	var res struct {
		Checks []fleet.Check `json:"checks"`
	}
	require.NoError(t, json.Unmarshal(out, &res), "%s", out)
	m := map[string]string{}
	for _, c := range res.Checks {
		m[c.Name] = string(c.Status) + ": " + c.Detail
	}
	return m
}

// A node started where a broker without federation serves takes over:
// the broker hands over and its listener carries on through the node.
func TestNodeRunTakesOverABroker(t *testing.T) {
	t.Parallel()
	h := newNodeHost(t)
	require.Equal(t, "ok: off (not configured): this host's sessions stay on it (agent-fleet node init joins it to others)", doctorChecks(t, h)["federation"])
	old := startBrokerProcess(t, h.dir, "--no-idle-exit")
	l := startListener(t, h.dir, "bob")
	// Sharing asked of a broker without federation: said once, and the
	// session works as without it.
	sharer := as(t, h.dir, "erin", "intercom", "listen", "--share")
	sharerErr := &lockedBuffer{}
	sharer.Stderr = sharerErr
	require.NoError(t, sharer.Start())
	t.Cleanup(func() { _ = sharer.Process.Kill(); _ = sharer.Wait() })
	require.Eventually(t, func() bool { return strings.Contains(sharerErr.String(), "sharing is off") }, time.Minute, 50*time.Millisecond)
	require.Eventually(t, func() bool { return strings.Contains(h.must("intercom", "list"), "bob") }, time.Minute, 50*time.Millisecond)

	h.must("node", "init", "--embedded", "--name", "solo", "--listen", "127.0.0.1:0")
	h.startNode()
	require.NoError(t, old.wait(t), "the broker without federation shut down cleanly")
	require.Eventually(t, func() bool { return strings.Contains(h.must("intercom", "list"), "bob") }, time.Minute, 50*time.Millisecond,
		"bob's listener reconnected to the node")
	out, err := as(t, h.dir, "alice", "intercom", "send", "bob", "through the node").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Eventually(t, func() bool {
		for _, m := range l.messages() {
			if m.Text == "through the node" {
				return true
			}
		}
		return false
	}, time.Minute, 50*time.Millisecond, "the message reached bob through the node")
	require.Equal(t, "Multi-node routing: on (nats, prefix agent-fleet), 0 other hosts live", h.routing())
	// erin's holder reconnected to the node and asked again: shared now.
	require.Eventually(t, func() bool { return h.status().SharedSessions == 1 }, time.Minute, 50*time.Millisecond)
	require.Equal(t, 1, strings.Count(sharerErr.String(), "sharing is off"), "said once: %s", sharerErr.String())
}
