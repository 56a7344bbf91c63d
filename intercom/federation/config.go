// Package federation joins the hosts of one user over NATS
// (docs/federation.md): the node configuration (node.toml), the NATS link
// with the host's identity and the live hosts it sees, an optional
// embedded NATS server, scope tokens, and the bridge between the local v4
// broker and the other hosts. NATS carries every byte, authenticates every
// host and encrypts with TLS; nothing here is a cluster protocol of its
// own.
package federation

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// NodeNamePattern is what a node name looks like.
const NodeNamePattern = "^[a-z0-9][a-z0-9-]{0,62}$"

// DefaultPrefix is the subject prefix when node.toml names none.
const DefaultPrefix = "agent-fleet"

// DefaultCluster is the cluster name when node.toml names none.
const DefaultCluster = "default"

// DefaultURL is the NATS server a node joins when node.toml names none and
// runs no embedded server.
const DefaultURL = "nats://127.0.0.1:4222"

// ClusterKeyBytes is the length of a cluster key.
const ClusterKeyBytes = 32

var (
	nodeNameRe    = regexp.MustCompile(NodeNamePattern)
	prefixTokenRe = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

// ErrNoConfig means node.toml does not exist; the error names its path.
var ErrNoConfig = errors.New("no node configuration")

// ConfigError is a node.toml that cannot be used: Field names the key
// ("urls", "tls.ca", "embedded.listen", …), Problem says why.
type ConfigError struct {
	Path    string // node.toml, "" for a Config built in memory
	Field   string
	Problem string
}

func (e *ConfigError) Error() string {
	where := "node configuration"
	if e.Path != "" {
		where = e.Path
	}
	if e.Field == "" {
		return where + ": " + e.Problem
	}
	return where + ": " + e.Field + ": " + e.Problem
}

// Config is a host's node configuration, node.toml. File names are
// absolute after LoadConfig (a relative name is below the intercom
// directory).
type Config struct {
	// Name is the node name (NodeNamePattern), unique among live hosts.
	Name string `toml:"name"`
	// Cluster names the cluster; with ClusterKey it must match every
	// other host's on the prefix.
	Cluster string `toml:"cluster"`
	// Prefix is the first subject tokens of everything this host sends.
	Prefix string `toml:"prefix"`
	// URLs are the NATS servers to join (nats:// or tls://).
	URLs []string `toml:"urls,omitempty"`
	// Creds is a NATS credentials file (user JWT and nkey seed).
	Creds string `toml:"creds,omitempty"`
	// Nkey is an nkey seed file (a user seed, "SU…").
	Nkey string `toml:"nkey,omitempty"`
	// User and PasswordFile are a NATS user and a file holding its
	// password.
	User         string `toml:"user,omitempty"`
	PasswordFile string `toml:"password_file,omitempty"`
	// TLS is the client side of TLS to the NATS servers.
	TLS *TLSFiles `toml:"tls,omitempty"`
	// ClusterKeyFile holds the cluster key as hex (0600).
	ClusterKeyFile string `toml:"cluster_key_file"`
	// Share says which local sessions are announced to other hosts.
	Share Share `toml:"share"`
	// Embedded, when set, runs a NATS server inside this host's node.
	Embedded *EmbeddedConfig `toml:"embedded,omitempty"`

	// Dir is the intercom directory the file was read from.
	Dir string `toml:"-"`
	// Path is node.toml itself.
	Path string `toml:"-"`
	// ClusterKey is the key read from ClusterKeyFile.
	ClusterKey []byte `toml:"-"`
}

// TLSFiles names PEM files: CA is the roots to verify the peer with, Cert
// and Key this side's certificate (both or neither).
type TLSFiles struct {
	CA   string `toml:"ca,omitempty"`
	Cert string `toml:"cert,omitempty"`
	Key  string `toml:"key,omitempty"`
}

// Share selects the local sessions announced to other hosts; nothing is
// shared by default.
type Share struct {
	// Sessions are globs (path.Match) matched against a session's id
	// and name.
	Sessions []string `toml:"sessions,omitempty"`
	// Teams are named teams (named-teams.json) whose scope is shared.
	Teams []string `toml:"teams,omitempty"`
	// Scopes are raw scope ids that are shared.
	Scopes []string `toml:"scopes,omitempty"`
}

// EmbeddedConfig is a NATS server run inside the node.
type EmbeddedConfig struct {
	// Listen is host:port for clients (port 0 picks a free one).
	Listen string `toml:"listen"`
	// TLS is the server side: Cert and Key are required for TLS, CA
	// makes the server verify client certificates.
	TLS *TLSFiles `toml:"tls,omitempty"`
	// Nkeys are the public user nkeys ("U…") allowed to connect; the
	// node's own nkey is always allowed.
	Nkeys []string `toml:"nkeys,omitempty"`
	// Users are users with a password file allowed to connect.
	Users []EmbeddedUser `toml:"users,omitempty"`
}

// EmbeddedUser is a user of the embedded server.
type EmbeddedUser struct {
	User         string `toml:"user"`
	PasswordFile string `toml:"password_file"`
}

// ConfigPath is node.toml of p.
func ConfigPath(p intercom.Paths) string { return filepath.Join(p.Dir, "node.toml") }

// DefaultClusterKeyFile is where node init puts the cluster key.
func DefaultClusterKeyFile(p intercom.Paths) string { return filepath.Join(p.Dir, "cluster.key") }

// DefaultNodeName is the host name lowercased and mapped to
// NodeNamePattern ("host" when nothing usable is left).
func DefaultNodeName() string {
	h, _ := os.Hostname()
	return NodeNameOf(h)
}

// NodeNameOf maps any string to a node name: lowercased, the first label
// of a dotted name, every other character '-', at most 63 characters.
func NodeNameOf(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if i := strings.IndexByte(s, '.'); i > 0 {
		s = s[:i]
	}
	b := []byte(s)
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '-'
		}
	}
	s = strings.TrimLeft(string(b), "-")
	if len(s) > 63 {
		s = s[:63]
	}
	if s == "" {
		return "host"
	}
	return s
}

// LoadConfig reads node.toml of p, fills defaults, makes file names
// absolute, reads the cluster key and validates. A missing file is
// ErrNoConfig; anything unusable, an unknown key included, is a
// *ConfigError.
func LoadConfig(p intercom.Paths) (*Config, error) {
	file := ConfigPath(p)
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s does not exist (agent-fleet node init writes it)", ErrNoConfig, file)
	}
	if err != nil {
		return nil, fmt.Errorf("read node configuration: %w", err)
	}
	cfg, err := ParseConfig(data, p)
	if err != nil {
		return nil, err
	}
	if err := cfg.loadClusterKey(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// ParseConfig decodes node.toml text for p and fills defaults, without
// reading the cluster key or validating.
func ParseConfig(data []byte, p intercom.Paths) (*Config, error) {
	file := ConfigPath(p)
	cfg := &Config{}
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		var strict *toml.StrictMissingError
		if errors.As(err, &strict) {
			var keys []string
			for _, e := range strict.Errors {
				keys = append(keys, strings.Join(e.Key(), "."))
			}
			return nil, &ConfigError{Path: file, Field: strings.Join(keys, ", "), Problem: "unknown key"}
		}
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return nil, &ConfigError{Path: file, Field: strings.Join(de.Key(), "."),
				Problem: fmt.Sprintf("line %d column %d: %s", row, col, de.Error())}
		}
		return nil, &ConfigError{Path: file, Problem: err.Error()}
	}
	cfg.Dir, cfg.Path = p.Dir, file
	cfg.fillDefaults()
	return cfg, nil
}

// NewConfig is a configuration with every default for p: the host's name,
// the default cluster and prefix, the cluster key file next to node.toml.
func NewConfig(p intercom.Paths) *Config {
	cfg := &Config{Dir: p.Dir, Path: ConfigPath(p)}
	cfg.fillDefaults()
	return cfg
}

func (c *Config) fillDefaults() {
	if c.Name == "" {
		c.Name = DefaultNodeName()
	}
	if c.Cluster == "" {
		c.Cluster = DefaultCluster
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.ClusterKeyFile == "" {
		c.ClusterKeyFile = "cluster.key"
	}
	if len(c.URLs) == 0 && c.Embedded == nil {
		c.URLs = []string{DefaultURL}
	}
	abs := func(f *string) {
		if *f != "" && !filepath.IsAbs(*f) && c.Dir != "" {
			*f = filepath.Join(c.Dir, *f)
		}
	}
	abs(&c.Creds)
	abs(&c.Nkey)
	abs(&c.PasswordFile)
	abs(&c.ClusterKeyFile)
	for _, t := range []*TLSFiles{c.TLS, c.embeddedTLS()} {
		if t != nil {
			abs(&t.CA)
			abs(&t.Cert)
			abs(&t.Key)
		}
	}
	if c.Embedded != nil {
		for i := range c.Embedded.Users {
			abs(&c.Embedded.Users[i].PasswordFile)
		}
	}
}

func (c *Config) embeddedTLS() *TLSFiles {
	if c.Embedded == nil {
		return nil
	}
	return c.Embedded.TLS
}

func (c *Config) loadClusterKey() error {
	key, err := ReadClusterKey(c.ClusterKeyFile)
	if err != nil {
		return c.errf("cluster_key_file", "%v", err)
	}
	c.ClusterKey = key
	return nil
}

func (c *Config) errf(field, format string, args ...any) error {
	return &ConfigError{Path: c.Path, Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Validate checks every field. Nothing crosses hosts in clear text or
// without a credential: a nats:// URL to a host other than loopback needs
// the tls section, and any URL other than loopback needs creds, nkey or
// user; the embedded server likewise needs TLS and an allowed key or user
// to listen beyond loopback. Errors are *ConfigError.
func (c *Config) Validate() error {
	if !nodeNameRe.MatchString(c.Name) {
		return c.errf("name", "%q does not match %s", c.Name, NodeNamePattern)
	}
	if !nodeNameRe.MatchString(c.Cluster) {
		return c.errf("cluster", "%q does not match %s", c.Cluster, NodeNamePattern)
	}
	if err := ValidatePrefix(c.Prefix); err != nil {
		return c.errf("prefix", "%v", err)
	}
	if len(c.ClusterKey) != ClusterKeyBytes {
		return c.errf("cluster_key_file", "no %d-byte cluster key loaded from %s", ClusterKeyBytes, c.ClusterKeyFile)
	}
	n := 0
	for _, f := range []string{c.Creds, c.Nkey, c.User} {
		if f != "" {
			n++
		}
	}
	if n > 1 {
		return c.errf("creds", "set only one of creds, nkey and user")
	}
	if (c.User == "") != (c.PasswordFile == "") {
		return c.errf("password_file", "user and password_file go together")
	}
	for field, f := range map[string]string{"creds": c.Creds, "nkey": c.Nkey, "password_file": c.PasswordFile} {
		if f != "" {
			if err := secretFile(f); err != nil {
				return c.errf(field, "%v", err)
			}
		}
	}
	if err := c.validateTLS("tls", c.TLS, false); err != nil {
		return err
	}
	for _, raw := range c.URLs {
		if err := c.validateURL(raw, n > 0); err != nil {
			return err
		}
	}
	for _, g := range c.Share.Sessions {
		if _, err := path.Match(g, ""); err != nil {
			return c.errf("share.sessions", "bad glob %q: %v", g, err)
		}
	}
	for _, t := range c.Share.Teams {
		if t == "" {
			return c.errf("share.teams", "empty team name")
		}
	}
	for _, s := range c.Share.Scopes {
		if s == "" {
			return c.errf("share.scopes", "empty scope")
		}
	}
	if c.Embedded != nil {
		return c.validateEmbedded()
	}
	return nil
}

func (c *Config) validateURL(raw string, credential bool) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return c.errf("urls", "%q is not a URL like nats://host:4222", raw)
	}
	if u.Scheme != "nats" && u.Scheme != "tls" {
		return c.errf("urls", "%q: scheme must be nats or tls", raw)
	}
	if u.User != nil {
		return c.errf("urls", "%q: put credentials in creds, nkey or user/password_file, not the URL", redactURL(u))
	}
	if isLoopback(u.Hostname()) {
		return nil
	}
	if u.Scheme == "nats" && c.TLS == nil {
		return c.errf("urls", "%s is another host and the link would be clear text: use tls:// or set the tls section", raw)
	}
	if !credential {
		return c.errf("urls", "%s is another host and no credential is set: set creds, nkey or user", raw)
	}
	return nil
}

func redactURL(u *url.URL) string {
	v := *u
	v.User = nil
	return v.String()
}

func (c *Config) validateTLS(field string, t *TLSFiles, server bool) error {
	if t == nil {
		return nil
	}
	if (t.Cert == "") != (t.Key == "") {
		return c.errf(field, "cert and key go together")
	}
	if server && t.Cert == "" {
		return c.errf(field, "a server needs cert and key")
	}
	if !server && t.CA == "" && t.Cert == "" {
		return c.errf(field, "set ca, or cert and key")
	}
	for name, f := range map[string]string{"ca": t.CA, "cert": t.Cert, "key": t.Key} {
		if f != "" {
			if err := readable(f); err != nil {
				return c.errf(field+"."+name, "%v", err)
			}
		}
	}
	return nil
}

func (c *Config) validateEmbedded() error {
	e := c.Embedded
	host, port, err := net.SplitHostPort(e.Listen)
	if err != nil {
		return c.errf("embedded.listen", "%q is not host:port", e.Listen)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return c.errf("embedded.listen", "%q: bad port", e.Listen)
	}
	if err := c.validateTLS("embedded.tls", e.TLS, true); err != nil {
		return err
	}
	for _, k := range e.Nkeys {
		if !strings.HasPrefix(k, "U") || len(k) != 56 {
			return c.errf("embedded.nkeys", "%q is not a public user nkey (U…, 56 characters)", k)
		}
	}
	for _, u := range e.Users {
		if u.User == "" || u.PasswordFile == "" {
			return c.errf("embedded.users", "each user needs user and password_file")
		}
		if err := readable(u.PasswordFile); err != nil {
			return c.errf("embedded.users", "%v", err)
		}
	}
	if isLoopback(host) {
		return nil
	}
	if e.TLS == nil {
		return c.errf("embedded.listen", "%s is reachable from other hosts and would be clear text: set embedded.tls", e.Listen)
	}
	if len(e.Nkeys) == 0 && len(e.Users) == 0 {
		return c.errf("embedded.listen", "%s is reachable from other hosts and no credential is allowed: list embedded.nkeys or embedded.users", e.Listen)
	}
	return nil
}

// secretFile checks that a credential file (the cluster key, an nkey
// seed, creds, a password file) can be read, and by nobody else.
func secretFile(f string) error {
	st, err := os.Stat(f)
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s is readable by others (mode %04o): chmod 600 it", f, st.Mode().Perm())
	}
	return readable(f)
}

func readable(f string) error {
	fh, err := os.Open(f)
	if err != nil {
		return err
	}
	return fh.Close()
}

// isLoopback reports whether host (a name or address, no port) stays on
// this machine.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ValidatePrefix checks a subject prefix: dot-separated tokens of
// [A-Za-z0-9_-], no wildcards.
func ValidatePrefix(p string) error {
	if p == "" {
		return errors.New("empty prefix")
	}
	for _, t := range strings.Split(p, ".") {
		if !prefixTokenRe.MatchString(t) {
			return fmt.Errorf("%q is not dot-separated NATS subject tokens of letters, digits, '_' and '-'", p)
		}
	}
	return nil
}

// WriteConfig writes cfg as node.toml of p (0600, atomically). File names
// are written as they are in cfg.
func WriteConfig(p intercom.Paths, cfg *Config) error {
	data, err := toml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encode node configuration: %w", err)
	}
	if err := intercom.EnsureDir(p.Dir); err != nil {
		return err
	}
	return intercom.WriteFileAtomic(ConfigPath(p), data)
}

// GenerateClusterKey makes a new random cluster key and writes it as hex
// to file (0600); an existing file is left alone (fs.ErrExist).
func GenerateClusterKey(file string) ([]byte, error) {
	key := make([]byte, ClusterKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(file), intercom.DirMode); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, intercom.FileMode)
	if err != nil {
		return nil, fmt.Errorf("write cluster key: %w", err)
	}
	if _, err := f.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("write cluster key: %w", err)
	}
	return key, f.Close()
}

// ReadClusterKey reads a cluster key file: 64 hex digits, surrounding
// space ignored. A file others can read is refused.
func ReadClusterKey(file string) ([]byte, error) {
	if err := secretFile(file); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(data)))
	if err != nil || len(key) != ClusterKeyBytes {
		return nil, fmt.Errorf("%s does not hold %d hex digits", file, 2*ClusterKeyBytes)
	}
	return key, nil
}

// KeyFingerprint is what hosts announce of the cluster key: the first 8
// bytes of SHA-256("agent-fleet cluster key\x00" ‖ key) as 16 hex digits.
func KeyFingerprint(key []byte) string {
	h := sha256.New()
	h.Write([]byte("agent-fleet cluster key\x00"))
	h.Write(key)
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// ScopeToken is what stands for scope on other hosts:
// HMAC-SHA256(key, "agent-fleet scope\x00" ‖ scope) as 64 hex digits;
// the unscoped "" stays "".
func ScopeToken(key []byte, scope string) string {
	if scope == "" {
		return ""
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("agent-fleet scope\x00"))
	m.Write([]byte(scope))
	return hex.EncodeToString(m.Sum(nil))
}

// Scoper is ScopeToken under c's cluster key, in the shape the broker
// takes (broker.Scoper).
func (c *Config) Scoper() func(scope string) string {
	key := c.ClusterKey
	return func(scope string) string { return ScopeToken(key, scope) }
}
