package federation_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/federation"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
)

// hangGuard bounds waits that should end quickly; it is no assertion on
// speed.
const hangGuard = 2 * time.Minute

// natsWorld is a real NATS server embedded in the test on 127.0.0.1 with
// nkey auth, and the cluster key every host of the test shares.
type natsWorld struct {
	t       *testing.T
	srvCfg  *federation.Config
	srv     *federation.Embedded
	url     string
	keyFile string
	seeds   []string // authorized user seed files
}

// shortDir is a temp directory with a short path (Unix socket paths are
// limited), removed at the end of the test.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "fb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func writeSeed(t *testing.T, dir string) (seedFile, pub string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ = kp.PublicKey()
	seedFile = filepath.Join(dir, pub[:8]+".nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return seedFile, pub
}

// newNATSWorld starts the server allowing users nkeys.
func newNATSWorld(t *testing.T, users int) *natsWorld {
	t.Helper()
	dir := shortDir(t)
	w := &natsWorld{t: t, keyFile: filepath.Join(dir, "cluster.key")}
	if _, err := federation.GenerateClusterKey(w.keyFile); err != nil {
		t.Fatal(err)
	}
	var pubs []string
	for range users {
		s, p := writeSeed(t, dir)
		w.seeds = append(w.seeds, s)
		pubs = append(pubs, p)
	}
	p := intercom.NewPaths(filepath.Join(dir, "srv"))
	w.srvCfg = federation.NewConfig(p)
	w.srvCfg.Name = "nats"
	w.srvCfg.Embedded = &federation.EmbeddedConfig{Listen: "127.0.0.1:0", Nkeys: pubs}
	w.start()
	return w
}

func (w *natsWorld) start() {
	w.t.Helper()
	srv, err := federation.StartEmbedded(w.srvCfg, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	w.srv, w.url = srv, srv.ClientURL()
	// A restart must come back on the same port.
	w.srvCfg.Embedded.Listen = strings.TrimPrefix(w.url, "nats://")
	w.t.Cleanup(srv.Shutdown)
}

// hostConfig writes node.toml for a host named name in a fresh agent dir,
// with the i-th authorized seed, and loads it back.
func (w *natsWorld) hostConfig(name string, i int, keyFile string) (*federation.Config, intercom.Paths) {
	w.t.Helper()
	p := intercom.NewPaths(shortDir(w.t))
	cfg := federation.NewConfig(p)
	cfg.Name = name
	cfg.URLs = []string{w.url}
	cfg.Nkey = w.seeds[i]
	cfg.ClusterKeyFile = keyFile
	cfg.Share.Sessions = []string{"shared-*"}
	if err := federation.WriteConfig(p, cfg); err != nil {
		w.t.Fatal(err)
	}
	got, err := federation.LoadConfig(p)
	if err != nil {
		w.t.Fatal(err)
	}
	return got, p
}

// hostEvents records a link's host callbacks.
type hostEvents struct {
	mu   sync.Mutex
	cond *sync.Cond
	log  []string // "up NAME" / "down NAME"
}

func newHostEvents() *hostEvents {
	e := &hostEvents{}
	e.cond = sync.NewCond(&e.mu)
	return e
}

func (e *hostEvents) add(s string) {
	e.mu.Lock()
	e.log = append(e.log, s)
	e.mu.Unlock()
	e.cond.Broadcast()
}

func (e *hostEvents) options(o federation.LinkOptions) federation.LinkOptions {
	o.OnHostUp = func(h federation.HostInfo) { e.add("up " + h.Host) }
	o.OnHostDown = func(h federation.HostInfo) { e.add("down " + h.Host) }
	return o
}

// waitCount waits until event has happened n times.
func (e *hostEvents) waitCount(t *testing.T, event string, n int) {
	t.Helper()
	deadline := time.AfterFunc(hangGuard, func() { e.add("hang guard") })
	defer deadline.Stop()
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		c := 0
		for _, s := range e.log {
			if s == event {
				c++
			}
			if s == "hang guard" {
				t.Fatalf("waited for %d × %q; events: %v", n, event, e.log)
			}
		}
		if c >= n {
			return
		}
		e.cond.Wait()
	}
}

func (e *hostEvents) snapshot() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.log...)
}

// logBuffer is a captured slog logger.
type logBuffer struct{ intercomtest.Buffer }

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func ctxGuard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}
