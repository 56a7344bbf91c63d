// Package federationtest gives tests of several hosts the parts of a
// network they need on one machine: a real NATS server (nats-server/v2,
// embedded in the test process, nkey authentication, JetStream on) that
// can be stopped and started again, a TCP proxy per host in front of it
// that the test can cut and restore (that is how a host's NATS link is
// killed), and, where the test runs as root on Linux, a network namespace
// per host whose only way out is its proxy. Only tests import it.
package federationtest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// Server is a NATS server for one test: it listens on 127.0.0.1 (a random
// port, kept across Restart while it is free), accepts only the nkeys
// allowed, and keeps its JetStream store in a directory of the test, so
// what JetStream holds survives Stop and Start.
type Server struct {
	t        testing.TB
	storeDir string

	mu    sync.Mutex
	srv   *server.Server
	port  int
	users []string
}

// StartServer starts a NATS server that admits the public nkeys users
// (more may be added with Allow). The server is shut down when the test
// ends.
func StartServer(t testing.TB, users ...string) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "afnats")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, storeDir: filepath.Join(dir, "js"), port: server.RANDOM_PORT, users: append([]string(nil), users...)}
	t.Cleanup(func() {
		s.Stop()
		os.RemoveAll(dir)
	})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *Server) options() *server.Options {
	o := &server.Options{
		ServerName: "agent-fleet-test",
		Host:       "127.0.0.1",
		Port:       s.port,
		NoSigs:     true,
		NoLog:      true,
		JetStream:  true,
		StoreDir:   s.storeDir,
		// Small limits: a test's streams are tiny, and the 2-core CI
		// machine has other tests' servers too.
		JetStreamMaxMemory: 64 << 20,
		JetStreamMaxStore:  256 << 20,
	}
	for _, u := range s.users {
		o.Nkeys = append(o.Nkeys, &server.NkeyUser{Nkey: u})
	}
	return o
}

// Start starts the server if it is not running: on the port it had
// before when that is still free, else on a new one (Addr says which).
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return nil
	}
	srv, err := s.listen()
	if err != nil && s.port != server.RANDOM_PORT {
		s.port = server.RANDOM_PORT // the old port was taken meanwhile
		srv, err = s.listen()
	}
	if err != nil {
		return err
	}
	s.srv = srv
	s.port = srv.Addr().(*net.TCPAddr).Port
	return nil
}

func (s *Server) listen() (*server.Server, error) {
	srv, err := server.NewServer(s.options())
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("nats server on port %d: not ready for connections in 30 s", s.port)
	}
	return srv, nil
}

// Stop shuts the server down, dropping every client connection; Start
// brings it back. Safe to call when stopped.
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// Running says whether the server is up.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv != nil
}

// Addr is the server's host:port ("" while it is stopped).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// URL is the server's nats:// URL ("" while it is stopped).
func (s *Server) URL() string {
	if a := s.Addr(); a != "" {
		return "nats://" + a
	}
	return ""
}

// Allow admits the public nkey user from now on (a running server
// reloads its options).
func (s *Server) Allow(user string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users = append(s.users, user)
	if s.srv == nil {
		return nil
	}
	return s.srv.ReloadOptions(s.options())
}

// NewUser makes an nkey user pair: the seed (for a host's seed file) and
// the public key (for Allow or StartServer).
func NewUser(t testing.TB) (seed []byte, public string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err = kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	public, err = kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return seed, public
}

// SeedFile writes seed to dir/nkey.seed (0600) and returns its path.
func SeedFile(t testing.TB, dir string, seed []byte) string {
	t.Helper()
	path := filepath.Join(dir, "nkey.seed")
	if err := os.WriteFile(path, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
