package federation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// embeddedReadyTimeout bounds how long the embedded server may take to
// listen.
const embeddedReadyTimeout = 30 * time.Second

// Embedded is a NATS server running inside this process, JetStream on,
// its store in <intercom>/nats.
type Embedded struct {
	srv *server.Server
	url string
}

// StartEmbedded starts the server cfg.Embedded describes and waits until
// it takes connections. Clients authenticate with one of
// embedded.nkeys, the node's own nkey (cfg.Nkey) or embedded.users;
// with none of them listed (loopback only, see Validate) any client
// connects. logger receives the server's own log (nil discards it).
func StartEmbedded(cfg *Config, logger *slog.Logger) (*Embedded, error) {
	e := cfg.Embedded
	if e == nil {
		return nil, &ConfigError{Path: cfg.Path, Field: "embedded", Problem: "no embedded section"}
	}
	host, portText, err := net.SplitHostPort(e.Listen)
	if err != nil {
		return nil, &ConfigError{Path: cfg.Path, Field: "embedded.listen", Problem: fmt.Sprintf("%q is not host:port", e.Listen)}
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, &ConfigError{Path: cfg.Path, Field: "embedded.listen", Problem: fmt.Sprintf("%q: bad port", e.Listen)}
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	store := filepath.Join(cfg.Dir, "nats")
	if err := os.MkdirAll(store, 0o700); err != nil {
		return nil, fmt.Errorf("embedded NATS store: %w", err)
	}
	opts := &server.Options{
		ServerName:             "agent-fleet-" + cfg.Name,
		Host:                   host,
		Port:                   port,
		NoSigs:                 true,
		JetStream:              true,
		StoreDir:               store,
		JetStreamMaxMemory:     64 << 20,
		JetStreamMaxStore:      1 << 30,
		DisableJetStreamBanner: true,
		MaxPayload:             8 << 20,
	}
	keys := append([]string(nil), e.Nkeys...)
	if cfg.Nkey != "" {
		pub, err := nkeyPublic(cfg.Nkey)
		if err != nil {
			return nil, &ConfigError{Path: cfg.Path, Field: "nkey", Problem: err.Error()}
		}
		keys = append(keys, pub)
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: k})
		}
	}
	for _, u := range e.Users {
		pw, err := readSecret(u.PasswordFile)
		if err != nil {
			return nil, &ConfigError{Path: cfg.Path, Field: "embedded.users", Problem: err.Error()}
		}
		opts.Users = append(opts.Users, &server.User{Username: u.User, Password: pw})
	}
	if t := e.TLS; t != nil {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: t.Cert, KeyFile: t.Key, CaFile: t.CA, Verify: t.CA != ""})
		if err != nil {
			return nil, &ConfigError{Path: cfg.Path, Field: "embedded.tls", Problem: err.Error()}
		}
		opts.TLS, opts.TLSConfig, opts.TLSVerify = true, tc, t.CA != ""
		opts.TLSTimeout = 5
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS server: %w", err)
	}
	lg := &serverLog{log: logger}
	srv.SetLoggerV2(lg, false, false, false)
	srv.Start()
	if !srv.ReadyForConnections(embeddedReadyTimeout) {
		srv.Shutdown()
		if f := lg.fatal(); f != "" {
			return nil, fmt.Errorf("embedded NATS server on %s: %s", e.Listen, f)
		}
		return nil, fmt.Errorf("embedded NATS server on %s did not take connections within %s", e.Listen, embeddedReadyTimeout)
	}
	return &Embedded{srv: srv, url: srv.ClientURL()}, nil
}

// ClientURL is where clients reach the server (nats:// or tls://, the
// actual port when listen asked for port 0).
func (e *Embedded) ClientURL() string { return e.url }

// Server is the nats-server itself, for tests and diagnostics.
func (e *Embedded) Server() *server.Server { return e.srv }

// Shutdown stops the server and waits for it to end; clients see the
// connection drop.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

func nkeyPublic(seedFile string) (string, error) {
	data, err := os.ReadFile(seedFile)
	if err != nil {
		return "", err
	}
	kp, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		return "", fmt.Errorf("%s holds no nkey seed: %w", seedFile, err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(pub, "U") {
		return "", fmt.Errorf("%s is not a user nkey seed (SU…)", seedFile)
	}
	return pub, nil
}

func readSecret(file string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(data))
	if s == "" {
		return "", errors.New(file + " is empty")
	}
	return s, nil
}

// serverLog hands the server's log to slog and keeps its last fatal
// message (the server does not exit on one when embedded).
type serverLog struct {
	log     *slog.Logger
	mu      sync.Mutex
	lastErr string
}

func (l *serverLog) out(level slog.Level, format string, v []any) {
	if l.log != nil {
		l.log.Log(context.Background(), level, "nats-server: "+fmt.Sprintf(format, v...))
	}
}

func (l *serverLog) fatal() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

func (l *serverLog) Noticef(format string, v ...any) { l.out(slog.LevelInfo, format, v) }
func (l *serverLog) Warnf(format string, v ...any)   { l.out(slog.LevelWarn, format, v) }
func (l *serverLog) Errorf(format string, v ...any)  { l.out(slog.LevelError, format, v) }
func (l *serverLog) Debugf(format string, v ...any)  { l.out(slog.LevelDebug, format, v) }
func (l *serverLog) Tracef(format string, v ...any)  { l.out(slog.LevelDebug-4, format, v) }
func (l *serverLog) Fatalf(format string, v ...any) {
	l.mu.Lock()
	l.lastErr = fmt.Sprintf(format, v...)
	l.mu.Unlock()
	l.out(slog.LevelError, format, v)
}
