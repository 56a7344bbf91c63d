package federation_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/federation"
)

func writeNodeTOML(t *testing.T, text string) intercom.Paths {
	t.Helper()
	p := intercom.NewPaths(shortDir(t))
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := federation.GenerateClusterKey(federation.DefaultClusterKeyFile(p)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(federation.ConfigPath(p), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func wantConfigError(t *testing.T, err error, field, problem string) {
	t.Helper()
	var ce *federation.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("want a *ConfigError on %s, got %v", field, err)
	}
	if ce.Field != field || !strings.Contains(ce.Error(), problem) {
		t.Fatalf("want field %q with %q, got field %q: %v", field, problem, ce.Field, ce)
	}
}

func TestLoadConfigDefaults(t *testing.T) {
	p := writeNodeTOML(t, "")
	cfg, err := federation.LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != federation.DefaultNodeName() || cfg.Cluster != "default" || cfg.Prefix != "agent-fleet" {
		t.Fatalf("defaults: name %q cluster %q prefix %q", cfg.Name, cfg.Cluster, cfg.Prefix)
	}
	if len(cfg.URLs) != 1 || cfg.URLs[0] != federation.DefaultURL {
		t.Fatalf("default urls %v", cfg.URLs)
	}
	if cfg.ClusterKeyFile != filepath.Join(p.Dir, "cluster.key") || len(cfg.ClusterKey) != 32 {
		t.Fatalf("cluster key %s (%d bytes)", cfg.ClusterKeyFile, len(cfg.ClusterKey))
	}
}

func TestNodeNameOf(t *testing.T) {
	for in, want := range map[string]string{
		"Build-Box.example.com": "build-box",
		"My_Laptop":             "my-laptop",
		"--x":                   "x",
		"":                      "host",
		strings.Repeat("a", 80): strings.Repeat("a", 63),
	} {
		if got := federation.NodeNameOf(in); got != want {
			t.Errorf("NodeNameOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLoadConfigErrors(t *testing.T) {
	_, err := federation.LoadConfig(intercom.NewPaths(shortDir(t)))
	if !errors.Is(err, federation.ErrNoConfig) || !strings.Contains(err.Error(), "node.toml") {
		t.Fatalf("missing file: %v", err)
	}
	cases := []struct {
		name, text, field, problem string
	}{
		{"unknown key", "name = \"a\"\nbogus = 1\n", "bogus", "unknown key"},
		{"unknown nested key", "[share]\nsessionz = [\"x\"]\n", "share.sessionz", "unknown key"},
		{"bad name", "name = \"Not_OK\"\n", "name", "does not match"},
		{"bad prefix", "prefix = \"a.*\"\n", "prefix", "subject tokens"},
		{"clear text to another host", "urls = [\"nats://10.1.2.3:4222\"]\nuser = \"u\"\npassword_file = \"cluster.key\"\n", "urls", "clear text"},
		{"no credential to another host", "urls = [\"tls://nats.example.com:4222\"]\n", "urls", "no credential"},
		{"credential in the URL", "urls = [\"nats://u:secret@127.0.0.1:4222\"]\n", "urls", "not the URL"},
		{"bad scheme", "urls = [\"http://127.0.0.1:4222\"]\n", "urls", "scheme"},
		{"missing nkey file", "nkey = \"nope.nk\"\n", "nkey", "no such file"},
		{"embedded clear text", "[embedded]\nlisten = \"0.0.0.0:4222\"\n", "embedded.listen", "clear text"},
		{"bad glob", "[share]\nsessions = [\"[\"]\n", "share.sessions", "bad glob"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := federation.LoadConfig(writeNodeTOML(t, c.text))
			wantConfigError(t, err, c.field, c.problem)
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("error shows the password: %v", err)
			}
		})
	}
}

func TestLoadConfigLoopbackNeedsNoCredential(t *testing.T) {
	p := writeNodeTOML(t, "urls = [\"nats://127.0.0.1:4222\", \"nats://localhost:4223\", \"nats://[::1]:4224\"]\n")
	if _, err := federation.LoadConfig(p); err != nil {
		t.Fatal(err)
	}
}

func TestClusterKeyFileMustBePrivate(t *testing.T) {
	p := writeNodeTOML(t, "")
	if err := os.Chmod(federation.DefaultClusterKeyFile(p), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := federation.LoadConfig(p)
	wantConfigError(t, err, "cluster_key_file", "readable by others")
	if _, err := federation.GenerateClusterKey(federation.DefaultClusterKeyFile(p)); !errors.Is(err, os.ErrExist) {
		t.Fatalf("a second key over the first: %v", err)
	}
}

// The node's credential files are secrets like the cluster key: one that
// others can read is refused, saying how to fix it.
func TestCredentialFilesMustBePrivate(t *testing.T) {
	for field, text := range map[string]string{"nkey": "nkey = \"node.nk\"\n", "creds": "creds = \"node.nk\"\n"} {
		p := writeNodeTOML(t, text)
		seed := filepath.Join(p.Dir, "node.nk")
		if err := os.WriteFile(seed, []byte("SUAIBDPBAUTWCWBKIO6XHQNINK5FWJW4OHLXC3HQ2KFE4PEJUA44CNHTC4\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := federation.LoadConfig(p)
		wantConfigError(t, err, field, "readable by others (mode 0644): chmod 600 it")
		if err := os.Chmod(seed, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := federation.LoadConfig(p); err != nil {
			t.Fatalf("%s at 0600: %v", field, err)
		}
	}
}

func TestWriteConfigRoundTrip(t *testing.T) {
	p := writeNodeTOML(t, "")
	cfg := federation.NewConfig(p)
	cfg.Name = "box-1"
	cfg.Cluster = "home"
	cfg.Prefix = "af.test"
	cfg.URLs = []string{"nats://127.0.0.1:4222"}
	cfg.Share = federation.Share{Sessions: []string{"worker-*"}, Teams: []string{"alpha"}, Scopes: []string{"s1"}}
	cfg.Embedded = &federation.EmbeddedConfig{Listen: "127.0.0.1:4222"}
	if err := federation.WriteConfig(p, cfg); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(federation.ConfigPath(p))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("node.toml mode: %v %v", st.Mode(), err)
	}
	got, err := federation.LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "box-1" || got.Cluster != "home" || got.Prefix != "af.test" || got.Share.Teams[0] != "alpha" ||
		got.Share.Sessions[0] != "worker-*" || got.Embedded == nil || got.Embedded.Listen != "127.0.0.1:4222" {
		t.Fatalf("round trip: %+v", got)
	}
}

func TestScopeToken(t *testing.T) {
	k1 := make([]byte, 32)
	k2 := make([]byte, 32)
	k2[0] = 1
	a := federation.ScopeToken(k1, "scope-a")
	if a != federation.ScopeToken(k1, "scope-a") {
		t.Fatal("same key and scope give different tokens")
	}
	if a == federation.ScopeToken(k1, "scope-b") {
		t.Fatal("two scopes share a token")
	}
	if a == federation.ScopeToken(k2, "scope-a") {
		t.Fatal("two cluster keys share a token")
	}
	if strings.Contains(a, "scope-a") || len(a) != 64 {
		t.Fatalf("token %q", a)
	}
	if federation.ScopeToken(k1, "") != "" {
		t.Fatal("unscoped is not \"\"")
	}
	if fp := federation.KeyFingerprint(k1); len(fp) != 16 || fp == federation.KeyFingerprint(k2) {
		t.Fatalf("fingerprints %q %q", fp, federation.KeyFingerprint(k2))
	}
}
