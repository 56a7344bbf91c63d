package federation_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/federation"
	"github.com/agent-fleet/agent-fleet/teams"
)

// fakeHost is one host of a bridge test: its link, bridge and fake
// broker, with its log captured.
type fakeHost struct {
	cfg    *federation.Config
	link   *federation.Link
	bridge *federation.Bridge
	b      *fakeBroker
	logs   *logBuffer
}

func (w *natsWorld) fakeHost(t *testing.T, name string, i int, edit func(*federation.Config, string)) *fakeHost {
	t.Helper()
	cfg, p := w.hostConfig(name, i, w.keyFile)
	if edit != nil {
		edit(cfg, p.AgentDir)
	}
	h := &fakeHost{cfg: cfg, logs: &logBuffer{}}
	h.link = connectHost(t, cfg, federation.LinkOptions{Logger: h.logs.logger()})
	h.b = newFakeBroker(cfg.Scoper())
	h.bridge = federation.NewBridge(h.link, h.b, cfg, h.logs.logger())
	h.bridge.TeamScope = teamScope(p)
	h.b.fed = h.bridge
	if err := h.bridge.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.bridge.Close)
	return h
}

// wiretap records every subject and payload on the server.
type wiretap struct {
	mu       sync.Mutex
	subjects []string
	payloads []string
}

func (w *natsWorld) tap(t *testing.T) *wiretap {
	t.Helper()
	nc, err := nats.Connect(w.url, mustNkey(t, w.seeds[0]))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	tp := &wiretap{}
	if _, err := nc.Subscribe(">", func(m *nats.Msg) {
		tp.mu.Lock()
		tp.subjects = append(tp.subjects, m.Subject, m.Reply)
		tp.payloads = append(tp.payloads, string(m.Data))
		tp.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return tp
}

func mustNkey(t *testing.T, seed string) nats.Option {
	t.Helper()
	o, err := nats.NkeyOptionFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestBridgeSharesAndCarries(t *testing.T) {
	t.Parallel()
	w := newNATSWorld(t, 2)
	tap := w.tap(t)
	var teamScope string
	alpha := w.fakeHost(t, "alpha", 0, func(cfg *federation.Config, agentDir string) {
		cfg.Share.Teams = []string{"crew"}
		_, scope, err := teams.NewStore(pathsOf(agentDir)).Create(context.Background(), "crew", "shared-a")
		if err != nil {
			t.Fatal(err)
		}
		teamScope = scope.Value()
	})
	beta := w.fakeHost(t, "beta", 1, nil)

	// Only what node.toml shares crosses: a glob match and the team's
	// scope, not a private session.
	alpha.b.register("shared-a", "", "")
	alpha.b.register("private-x", "", "")
	alpha.b.register("crew-member", "", teamScope)
	beta.b.register("shared-b", "B", "")
	beta.b.waitFor(t, "alpha's sessions on beta", func() bool {
		return beta.b.has("attach alpha shared-a") && beta.b.has("attach alpha crew-member")
	})
	alpha.b.waitFor(t, "beta's session on alpha", func() bool { return alpha.b.has("attach beta shared-b") })
	beta.b.mu.Lock()
	_, private := beta.b.proxies["private-x"]
	crew := beta.b.proxies["crew-member"]
	beta.b.mu.Unlock()
	if private {
		t.Fatal("a session node.toml does not share reached beta")
	}
	if crew.token == "" || crew.token != federation.ScopeToken(alpha.cfg.ClusterKey, teamScope) || crew.info.ID != "crew-member" {
		t.Fatalf("crew-member on beta: %+v", crew)
	}

	// Share(id) brings a private session over.
	alpha.bridge.Share("private-x")
	beta.b.waitFor(t, "private-x after Share", func() bool { return beta.b.has("attach alpha private-x") })

	// A send across hosts reaches the inbox once and the sender hears
	// accepted, then delivered.
	id := alpha.b.send("shared-a", "shared-b", "m1", "hello <b> & co")
	alpha.b.waitFor(t, "delivered", func() bool { return alpha.b.has("delivered " + id) })
	beta.b.mu.Lock()
	got := append([]string(nil), beta.b.inbox["shared-b"]...)
	beta.b.mu.Unlock()
	if want := `{"id":"m1","text":"hello <b> & co","expectsReply":false}`; len(got) != 1 || got[0] != want {
		t.Fatalf("beta's inbox: %q, want exactly %q", got, want)
	}
	alpha.b.mu.Lock()
	heard := alpha.b.forwards[id].heard
	alpha.b.mu.Unlock()
	if strings.Join(heard, ",") != "accepted,delivered" {
		t.Fatalf("sender heard %v", heard)
	}

	// A deliver retried after it was handled is acked and dropped.
	nc := beta.link.Conn()
	dup, _ := json.Marshal(map[string]any{"fromHost": "alpha", "deliveryId": id, "from": "shared-a", "fromInfo": json.RawMessage(`{}`),
		"to": "shared-b", "message": []byte(`{"id":"m1","text":"x","expectsReply":false}`)})
	reply, err := nc.Request(beta.link.Subject("beta", "deliver"), dup, hangGuard)
	if err != nil || string(reply.Data) != `{"ok":true}` {
		t.Fatalf("duplicate deliver: %v %s", err, reply.Data)
	}
	beta.b.mu.Lock()
	n := len(beta.b.inbox["shared-b"])
	beta.b.mu.Unlock()
	if n != 1 {
		t.Fatalf("a retried deliver reached the inbox again (%d)", n)
	}

	// The recipient leaving reaches the other host.
	beta.b.leave("shared-b", true)
	alpha.b.waitFor(t, "shared-b leaves alpha", func() bool { return alpha.b.has("detach beta shared-b true") })

	// Ask controls travel to the recipient's host.
	alpha.bridge.AskControl(askControl("beta", "defer", "shared-a", "shared-b", "m9"))
	beta.b.waitFor(t, "ask control", func() bool { return beta.b.has("ask alpha shared-a defer m9") })

	st := alpha.bridge.Status()
	if !st.On || st.Node != "alpha" || len(st.LiveHosts) != 1 || st.LiveHosts[0] != "beta" || st.SharedSessions != 3 {
		t.Fatalf("alpha status: %+v", st)
	}
	if line := federation.StatusLine(st); line != "Multi-node routing: on (nats, prefix agent-fleet), 1 other host live" {
		t.Fatalf("status line %q", line)
	}

	// Beta goes away: its proxies leave alpha.
	beta.bridge.Close()
	beta.link.Close()
	alpha.b.waitFor(t, "beta down", func() bool { return alpha.b.has("detach host beta") })
	if st := alpha.bridge.Status(); len(st.LiveHosts) != 0 || st.RemoteSessions != 0 {
		t.Fatalf("after beta left: %+v", st)
	}

	// No scope in any subject, payload or log line; no token in a
	// subject or log line.
	token := federation.ScopeToken(alpha.cfg.ClusterKey, teamScope)
	tap.mu.Lock()
	defer tap.mu.Unlock()
	for _, s := range tap.subjects {
		if strings.Contains(s, teamScope) || strings.Contains(s, token) || strings.Contains(s, "crew-member") {
			t.Fatalf("subject %q names a scope, token or session", s)
		}
	}
	for _, p := range tap.payloads {
		if strings.Contains(p, teamScope) {
			t.Fatalf("payload carries the scope in clear: %s", p)
		}
	}
	for _, h := range []*fakeHost{alpha, beta} {
		if l := h.logs.String(); strings.Contains(l, teamScope) || strings.Contains(l, token) {
			t.Fatalf("%s's log shows a scope or token:\n%s", h.cfg.Name, l)
		}
	}
}

func pathsOf(agentDir string) intercom.Paths { return intercom.NewPaths(agentDir) }

func askControl(host, action, from, to, messageID string) broker.AskControl {
	return broker.AskControl{Host: host, Action: action, From: from, To: to, MessageID: messageID}
}

func TestBridgeHiddenCollision(t *testing.T) {
	t.Parallel()
	w := newNATSWorld(t, 2)
	alpha := w.fakeHost(t, "alpha", 0, nil)
	beta := w.fakeHost(t, "beta", 1, nil)
	alpha.b.register("shared-same", "", "")
	beta.b.register("shared-same", "", "")
	beta.b.register("shared-other", "", "")
	alpha.b.waitFor(t, "beta's other session", func() bool { return alpha.b.has("attach beta shared-other") })
	alpha.b.waitFor(t, "the collision", func() bool { return alpha.b.has("taken beta shared-same") })
	st := alpha.bridge.Status()
	if st.HiddenCollisions[0] != "shared-same" || st.RemoteSessions != 1 {
		t.Fatalf("status %+v", st)
	}
	if line := federation.StatusLine(st); !strings.Contains(line, "hidden by local ids: shared-same") {
		t.Fatalf("status line %q", line)
	}
	if line := federation.StatusLine(federation.Status{Reason: "no node configuration"}); line != "Multi-node routing: off (no node configuration)" {
		t.Fatal(line)
	}
}

// teamScope is a node's TeamScope: the scope of a named team of p.
func teamScope(p intercom.Paths) func(string) (string, error) {
	return func(team string) (string, error) {
		_, scope, err := teams.NewStore(p).Lookup(team)
		return scope.Value(), err
	}
}
