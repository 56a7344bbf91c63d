package federation_test

import (
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-fleet/agent-fleet/intercom/federation"
)

func connectHost(t *testing.T, cfg *federation.Config, o federation.LinkOptions) *federation.Link {
	t.Helper()
	l, err := federation.Connect(ctxGuard(t), cfg, o)
	if err != nil {
		t.Fatalf("connect %s: %v", cfg.Name, err)
	}
	t.Cleanup(l.Close)
	return l
}

// pingNames is who answers a ping of a fresh client link: what a CLI
// verb on another host sees.
func pingNames(t *testing.T, w *natsWorld) []string {
	t.Helper()
	cfg, _ := w.hostConfig("probe", 0, w.keyFile)
	c, err := federation.ConnectClient(ctxGuard(t), cfg, federation.LinkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hosts, err := c.Ping(ctxGuard(t))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range hosts {
		names = append(names, h.Host)
	}
	return names
}

func TestLinkNameCollisionRefused(t *testing.T) {
	t.Parallel()
	w := newNATSWorld(t, 2)
	aCfg, _ := w.hostConfig("alpha", 0, w.keyFile)
	a := connectHost(t, aCfg, federation.LinkOptions{})
	if a.Self() != "alpha" || a.Prefix() != "agent-fleet" || a.Subject("beta", "deliver") != "agent-fleet.host.beta.deliver" {
		t.Fatalf("identity: %s %s %s", a.Self(), a.Prefix(), a.Subject("beta", "deliver"))
	}
	bCfg, _ := w.hostConfig("alpha", 1, w.keyFile)
	_, err := federation.Connect(ctxGuard(t), bCfg, federation.LinkOptions{})
	if !errors.Is(err, federation.ErrNodeNameTaken) || !strings.Contains(err.Error(), "node name alpha") {
		t.Fatalf("second alpha: %v", err)
	}
	if got := pingNames(t, w); len(got) != 1 || got[0] != "alpha" {
		t.Fatalf("hosts answering after the refused claim: %v", got)
	}
	// Once alpha leaves, the name is free again.
	a.Close()
	b := connectHost(t, bCfg, federation.LinkOptions{})
	if b.Self() != "alpha" {
		t.Fatal(b.Self())
	}
}

func TestLinkWrongClusterRefused(t *testing.T) {
	t.Parallel()
	w := newNATSWorld(t, 3)
	aCfg, _ := w.hostConfig("alpha", 0, w.keyFile)
	ev := newHostEvents()
	connectHost(t, aCfg, ev.options(federation.LinkOptions{}))

	otherKey := filepath.Join(shortDir(t), "other.key")
	if _, err := federation.GenerateClusterKey(otherKey); err != nil {
		t.Fatal(err)
	}
	bCfg, _ := w.hostConfig("beta", 1, otherKey)
	_, err := federation.Connect(ctxGuard(t), bCfg, federation.LinkOptions{})
	var wc *federation.WrongClusterError
	if !errors.Is(err, federation.ErrWrongCluster) || !errors.As(err, &wc) || wc.Host != "alpha" ||
		!strings.Contains(err.Error(), "cluster key fingerprint") {
		t.Fatalf("other key: %v", err)
	}

	cCfg, _ := w.hostConfig("gamma", 2, w.keyFile)
	cCfg.Cluster = "elsewhere"
	_, err = federation.Connect(ctxGuard(t), cCfg, federation.LinkOptions{})
	if !errors.Is(err, federation.ErrWrongCluster) || !strings.Contains(err.Error(), "(cluster default, this host's is elsewhere)") {
		t.Fatalf("other cluster name: %v", err)
	}
	if got := pingNames(t, w); len(got) != 1 || got[0] != "alpha" {
		t.Fatalf("hosts answering after the refused joins: %v", got)
	}
	// The same cluster on another prefix is no conflict.
	cCfg.Prefix = "elsewhere"
	connectHost(t, cCfg, federation.LinkOptions{})
	if got := ev.snapshot(); len(got) != 0 {
		t.Fatalf("alpha saw hosts of another cluster or prefix: %v", got)
	}
}

func TestLinkBadCredentials(t *testing.T) {
	t.Parallel()
	w := newNATSWorld(t, 1)
	cfg, p := w.hostConfig("alpha", 0, w.keyFile)
	seed, _ := writeSeed(t, p.Dir) // a key the server does not list
	cfg.Nkey = seed
	_, err := federation.Connect(ctxGuard(t), cfg, federation.LinkOptions{})
	if !errors.Is(err, federation.ErrBadCredentials) || !strings.Contains(err.Error(), w.url) {
		t.Fatalf("unlisted nkey: %v", err)
	}
	cfg.Nkey = ""
	_, err = federation.ConnectClient(ctxGuard(t), cfg, federation.LinkOptions{})
	if !errors.Is(err, federation.ErrBadCredentials) {
		t.Fatalf("no credential: %v", err)
	}
}

func TestLinkUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + ln.Addr().String()
	_ = ln.Close()
	p := writeNodeTOML(t, "urls = [\""+url+"\"]\n")
	cfg, err := federation.LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	_, err = federation.Connect(ctxGuard(t), cfg, federation.LinkOptions{})
	var ue *federation.UnreachableError
	if !errors.Is(err, federation.ErrUnreachable) || !errors.As(err, &ue) || ue.URLs[0] != url || !strings.Contains(err.Error(), url) {
		t.Fatalf("closed port: %v", err)
	}
}

func TestLinkHostsUpDown(t *testing.T) {
	t.Parallel()
	w := newNATSWorld(t, 2)
	aCfg, _ := w.hostConfig("alpha", 0, w.keyFile)
	bCfg, _ := w.hostConfig("beta", 1, w.keyFile)
	ev := newHostEvents()
	a := connectHost(t, aCfg, ev.options(federation.LinkOptions{Version: "test"}))
	b, err := federation.Connect(ctxGuard(t), bCfg, federation.LinkOptions{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ev.waitCount(t, "up beta", 1)
	live := a.LiveHosts()
	if len(live) != 1 || live[0].Host != "beta" || live[0].Version != "test" || !a.IsLive("beta") {
		t.Fatalf("alpha's live hosts: %+v", live)
	}

	// A link that closes leaves at once.
	b.Close()
	ev.waitCount(t, "down beta", 1)
	if len(a.LiveHosts()) != 0 || a.IsLive("beta") {
		t.Fatalf("beta still live: %+v", a.LiveHosts())
	}
	b = connectHost(t, bCfg, federation.LinkOptions{})
	ev.waitCount(t, "up beta", 2)

	// The server goes away: every host falls silent, and both links
	// come back by themselves when it returns.
	w.srv.Shutdown()
	ev.waitCount(t, "down beta", 2)
	if a.Connected() || a.State() != "reconnecting" {
		t.Fatalf("alpha with no server: %s", a.State())
	}
	w.start()
	ev.waitCount(t, "up beta", 3)
	if !b.Connected() || b.State() != "connected" {
		t.Fatalf("beta after the server returned: %s", b.State())
	}
}
