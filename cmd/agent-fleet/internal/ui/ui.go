// Package ui is agent-fleet ui: a dashboard of the fleet served by the
// binary itself on the loopback or a Unix socket, for the person running
// it. Its assets are embedded (plain HTML, CSS and JavaScript, no build
// step, nothing fetched from elsewhere); it is kept live by server-sent
// events that fleet.Watch (registry writes, seen through inotify) and the
// intercom session's presence events drive; it acts
// through the same verbs.Run as the CLI (stop, renew, pause, resume,
// adopt), as the same caller, so the same ownership rules hold.
//
// What it can see, honestly: every worker record of the agent directory
// (every manager's), the sessions of its own scope and their presence
// status, the named teams (names, managers, members; never a scope), the
// asks and messages waiting for its caller's session, worker turns from
// their turn records, state changes it saw happen while it ran, and the
// agent directory's message history (intercom/history: what agent-fleet
// sessions sent and received, with their receipts; TypeScript clients
// record none, so a message between two of them is not seen).
package ui

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// Config configures a Server.
type Config struct {
	Factory *factory.Factory
	// Listen is the TCP address to serve on, on the loopback only
	// (default 127.0.0.1:0, a port the kernel picks). Socket, when set,
	// serves on that Unix socket instead (0600; its directory must admit
	// no one else).
	Listen, Socket string
	// Logger receives the server's warnings (nil: discarded).
	Logger *slog.Logger
	// Sample is how often the chart takes a sample and the whole state is
	// read again (unit states the registry has not recorded, a lost
	// unit); default 10 s.
	Sample time.Duration
}

// DefaultListen is where ui serves by default.
const DefaultListen = "127.0.0.1:0"

// Server is a running dashboard: New listens, Run serves.
type Server struct {
	cfg    Config
	log    *slog.Logger
	ln     net.Listener
	token  string
	host   hostCheck
	cookie string
	url    string

	state *stateKeeper
}

// New listens where cfg says and opens what the dashboard reads: the
// fleet (as the CLI's caller; without a user manager its records are
// shown with the live state unknown) and the caller's intercom session.
// A Listen address off the loopback is a usage error.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Sample <= 0 {
		cfg.Sample = 10 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, token: hex.EncodeToString(tok)}
	var err error
	if cfg.Socket != "" {
		s.ln, err = listenSocket(cfg.Socket)
		if err != nil {
			return nil, err
		}
		s.host = hostCheck{socket: true}
		s.cookie = "agent-fleet-ui"
		s.url = "http://localhost/?token=" + s.token
	} else {
		addr := cfg.Listen
		if addr == "" {
			addr = DefaultListen
		}
		if err := loopbackOnly(addr); err != nil {
			return nil, err
		}
		s.ln, err = net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("ui: listen on %s: %w", addr, err)
		}
		bound := s.ln.Addr().(*net.TCPAddr)
		port := bound.Port
		s.host = hostCheck{port: port, ip: bound.IP.String()}
		s.cookie = fmt.Sprintf("agent-fleet-ui-%d", port) // cookies ignore ports: one per server
		// The address it listens on: ::1 is not 127.0.0.1.
		s.url = fmt.Sprintf("http://%s/?token=%s", net.JoinHostPort(bound.IP.String(), strconv.Itoa(port)), s.token)
	}
	s.state, err = openState(ctx, cfg, log)
	if err != nil {
		s.ln.Close()
		return nil, err
	}
	return s, nil
}

// URL is the address to open, with the token: the first request with it
// sets the session cookie, and the page drops it from the address bar.
func (s *Server) URL() string { return s.url }

// Addr is the listener's address (a TCP address, or the socket's path).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Run serves until ctx ends, then closes the listener, the event streams
// and what New opened, and returns once every goroutine it started has
// ended.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { s.state.run(ctx) })
	srv := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	wg.Go(func() {
		<-ctx.Done()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
	})
	err := srv.Serve(s.ln)
	cancel()
	wg.Wait()
	s.state.close()
	if s.cfg.Socket != "" {
		_ = os.Remove(s.cfg.Socket)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// loopbackOnly refuses an address that is not on the loopback: the token
// is all that guards the dashboard, and only this machine's users may
// even try it.
func loopbackOnly(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return factory.Usagef("--listen %q: %v", addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return factory.Usagef("--listen %q: the port must be a number from 0 to 65535", addr)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return factory.Usagef("--listen %q: the dashboard serves on the loopback only (127.0.0.1, ::1); use --socket to reach it otherwise", addr)
	}
	return nil
}

// listenSocket listens on a Unix socket (0600) in a directory that only
// this user may enter: it is created 0700 when missing, and one that
// others may enter is refused rather than changed.
func listenSocket(path string) (net.Listener, error) {
	path, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err == nil {
		if fi.Mode().Perm()&0o077 != 0 {
			return nil, factory.Usagef("--socket %s: its directory %s is open to other users (mode %o): put the socket in a directory only you can enter (mode 0700)", path, dir, fi.Mode().Perm())
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if len(path) > intercom.MaxSocketPathBytes {
		return nil, factory.Usagef("--socket %s is %d bytes, the limit is %d: give a shorter path", path, len(path), intercom.MaxSocketPathBytes)
	}
	ln, err := intercom.ListenSocket(path)
	if err != nil {
		return nil, fmt.Errorf("ui: %w", err)
	}
	return peerChecked{ln}, nil
}

// peerChecked admits only connections of this user (SO_PEERCRED where
// the platform has it), beside the socket's mode.
type peerChecked struct{ *net.UnixListener }

func (l peerChecked) Accept() (net.Conn, error) {
	for {
		c, err := l.UnixListener.Accept()
		if err != nil {
			return nil, err
		}
		if uid, _, err := intercom.PeerCredentials(c); err == nil && uid != os.Getuid() && uid >= 0 {
			c.Close()
			continue
		}
		return c, nil
	}
}
