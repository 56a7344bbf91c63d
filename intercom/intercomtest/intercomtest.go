// Package intercomtest runs intercom brokers in process for tests, on real
// Unix sockets in short temporary directories, and speaks the raw v4 wire
// to them (nats-server's test/test.go is the model).
//
// StartBroker runs a broker.Broker (broker.New, then Run on listeners made
// by intercom.ListenSocket) and returns once it is Ready; ListenAndServe
// runs broker.ListenAndServe, owner and pid files included. A Client is a
// raw protocol peer: it writes frames and reads the broker's frames back
// one by one, decoding each with the strict (Claude-client) decoder so that
// every frame the broker emits is checked for its exact key set. Helpers
// that wait give up after 5 s and fail the test.
//
// The sockets are Unix sockets on every platform; on Windows the intercom
// client dials the broker's named pipe instead, which StartBroker does not
// serve. Only tests import this package.
package intercomtest

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
)

// Bounds of the helpers' waits.
const (
	frameWait = 5 * time.Second
	startWait = 10 * time.Second
	stopWait  = 10 * time.Second
)

// ShortDir returns a new directory below os.TempDir(), removed when the
// test ends. Its path is short ("/tmp/afi<digits>"), unlike t.TempDir()'s,
// which carries the test's name: every socket below an agent directory
// there stays under intercom.MaxSocketPathBytes (107 bytes).
func ShortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "afi")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Broker is a broker running in this process until Stop or the end of the
// test.
type Broker struct {
	// B is the running broker (Stats, Shutdown, Ready).
	B *broker.Broker
	// Paths are its files: Config.Paths.
	Paths intercom.Paths
	// Logs holds everything it logged (debug level and up), unless the
	// tweak replaced Config.Logger.
	Logs *Buffer
	// Frames holds every payload any Client of it received, one per line
	// (for privacy checks: what never reached any peer).
	Frames *Buffer

	t      testing.TB
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	bound  map[string]os.FileInfo // the socket files it listens on
}

// StartBroker runs a broker in this process and returns once it accepts
// connections (broker.Broker.Ready). Its Config before tweak: Paths in a
// fresh ShortDir, Logger writing to Logs, no idle exit (IdleExit -1),
// TrustedLocal and CheckPeerUID; tweak (may be nil) changes any of it,
// Paths included. It listens on broker.sock and agent-fleet.sock (the local
// API) but takes no broker.owner and writes no broker.pid: that lifecycle
// is broker.ListenAndServe's. The test fails if the broker cannot start,
// or does not stop within 10 s when the test ends; a failed test shows the
// end of the broker's log.
func StartBroker(t testing.TB, tweak func(*broker.Config)) *Broker {
	t.Helper()
	h := &Broker{t: t, Logs: &Buffer{}, Frames: &Buffer{}}
	cfg := broker.Config{
		Logger:       slog.New(slog.NewTextHandler(h.Logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		IdleExit:     -1,
		TrustedLocal: true,
		CheckPeerUID: true,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	if cfg.Paths.Dir == "" {
		cfg.Paths = intercom.NewPaths(ShortDir(t))
	}
	h.Paths = cfg.Paths
	require.NoError(t, intercom.EnsureDir(h.Paths.Dir))
	b, err := broker.New(cfg)
	require.NoError(t, err)
	h.B = b
	ln, err := intercom.ListenSocket(h.Paths.BrokerSocket())
	require.NoError(t, err)
	api, err := intercom.ListenSocket(h.Paths.LocalAPISocket())
	if err != nil {
		ln.Close()
		require.NoError(t, err)
	}
	h.bound = make(map[string]os.FileInfo)
	for _, path := range []string{h.Paths.BrokerSocket(), h.Paths.LocalAPISocket()} {
		if fi, err := os.Stat(path); err == nil {
			h.bound[path] = fi
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan error, 1)
	go func() { h.done <- b.Run(ctx, ln, api) }()
	t.Cleanup(h.Stop)
	select {
	case <-b.Ready():
	case err := <-h.done:
		t.Fatalf("broker ended before it was ready: %v", err)
	case <-time.After(startWait):
		t.Fatalf("broker not ready within %s", startWait)
	}
	return h
}

// ListenAndServe runs broker.ListenAndServe in this process: the whole
// life of `agent-fleet broker`, with broker.owner and broker.pid, for tests
// of code that reads those. Config defaults are StartBroker's, except that
// nothing is logged. It returns the broker's Paths once broker.pid exists,
// which the broker writes once both sockets listen (spec §6.3). The broker
// stops when the test ends; the test fails if it ends with an error first.
func ListenAndServe(t testing.TB, tweak func(*broker.Config)) intercom.Paths {
	t.Helper()
	cfg := broker.Config{IdleExit: -1, TrustedLocal: true, CheckPeerUID: true}
	if tweak != nil {
		tweak(&cfg)
	}
	if cfg.Paths.Dir == "" {
		cfg.Paths = intercom.NewPaths(ShortDir(t))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- broker.ListenAndServe(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("broker: %v", err)
			}
		case <-time.After(stopWait):
			t.Errorf("broker did not stop within %s", stopWait)
		}
	})
	deadline := time.After(startWait)
	for {
		if _, err := os.Stat(cfg.Paths.PIDFile()); err == nil {
			return cfg.Paths
		}
		select {
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("broker ended before it listened: %v", err)
		case <-deadline:
			t.Fatalf("broker did not listen within %s", startWait)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Stop shuts the broker down, waits for Run to return (10 s, then the test
// fails) and removes the socket files it bound unless another listener has
// replaced them, as a broker that exits does. Safe to call twice.
func (h *Broker) Stop() {
	h.once.Do(func() {
		h.cancel()
		select {
		case <-h.done:
		case <-time.After(stopWait):
			h.t.Errorf("broker did not stop within %s", stopWait)
		}
		for path, bound := range h.bound {
			if now, err := os.Stat(path); err == nil && os.SameFile(now, bound) {
				_ = os.Remove(path)
			}
		}
		if h.t.Failed() {
			h.t.Logf("broker log:\n%s", tailLines(h.Logs.String(), 60))
		}
	})
}

// tailLines is the last n lines of s.
func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// ReadAskState parses broker-asks.json: its edges, nil when there is no
// file. The test fails on a file that is not version 1.
func (h *Broker) ReadAskState() (edges []map[string]any) {
	h.t.Helper()
	data, err := os.ReadFile(h.Paths.AskState())
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(h.t, err)
	var st struct {
		Version int              `json:"version"`
		Edges   []map[string]any `json:"edges"`
	}
	require.NoError(h.t, json.Unmarshal(data, &st))
	require.Equal(h.t, 1, st.Version)
	return st.Edges
}

// AllFiles returns the content of every regular file below the agent
// directory, concatenated (for privacy checks: what never reached disk).
func (h *Broker) AllFiles() string {
	var sb strings.Builder
	_ = filepath.Walk(h.Paths.AgentDir, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			data, _ := os.ReadFile(p)
			sb.Write(data)
			sb.WriteByte('\n')
		}
		return nil
	})
	return sb.String()
}

// Buffer is a bytes.Buffer safe for concurrent use: logs and frames are
// written by the broker's and the clients' goroutines.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}
