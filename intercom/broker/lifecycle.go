package broker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// ErrAlreadyRunning means another live broker owns the agent directory. It
// is left untouched.
var ErrAlreadyRunning = errors.New("intercom broker already running")

// ErrActivation means systemd socket-activated the broker with sockets that
// do not include its endpoint (a socket unit for another agent directory).
var ErrActivation = errors.New("socket activation without the broker socket")

// OwnerError names the live process that owns broker.owner.
type OwnerError struct {
	PID  int
	File string
}

func (e *OwnerError) Error() string {
	return fmt.Sprintf("%s: %s is owned by live process %d; stop that broker first (if no broker runs under that pid, remove %s)",
		ErrAlreadyRunning, e.File, e.PID, e.File)
}

func (e *OwnerError) Unwrap() error { return ErrAlreadyRunning }

// ListenAndServe is the whole life of `agent-fleet broker` (spec §6.3–§6.4):
// take broker.owner exclusively, replace a stale broker.sock, listen on it
// and on the local API socket (both 0600), write broker.pid, serve until ctx
// ends or the broker goes idle, and remove those files on the way out —
// only while broker.owner still names this process, and broker.sock only
// while it is still the socket this broker bound.
//
// Under systemd socket activation (LISTEN_FDS naming broker.sock) the broker
// serves the inherited listener instead: it never unlinks or replaces that
// socket, and when it exits (idle exit included) systemd keeps listening and
// starts the next broker on the next connection. Ownership works as without
// activation: a live broker.owner of another process makes it exit with
// ErrAlreadyRunning.
func ListenAndServe(ctx context.Context, cfg Config) error {
	p := cfg.Paths
	if err := intercom.EnsureDir(p.Dir); err != nil {
		return err
	}
	for _, sock := range []string{p.BrokerSocket(), p.LocalAPISocket()} {
		if err := intercom.CheckSocketPath(sock); err != nil {
			return err
		}
	}
	inherited, err := inheritedListener(p)
	if err != nil {
		return err
	}
	if err := acquireOwner(p.OwnerFile()); err != nil {
		if inherited != nil {
			_ = inherited.Close()
		}
		return err
	}
	removeSocket := func() {}
	defer func() { releaseOwner(p, removeSocket) }()

	cfg.idleFromStart = inherited != nil
	b, err := New(cfg)
	if err != nil {
		if inherited != nil {
			_ = inherited.Close()
		}
		return err
	}
	ln := inherited
	if ln == nil {
		var remove func()
		if ln, remove, err = listenEndpoint(p); err != nil {
			return err // removeSocket stays a no-op: nothing was bound
		}
		removeSocket = remove
	}
	api, err := listenSocket(p.LocalAPISocket())
	if err != nil {
		_ = ln.Close()
		return err
	}
	// Whole or not at all: a reader that sees the file (it says both
	// sockets listen, spec §6.3) reads the pid, never an empty file.
	if err := intercom.ReplaceFile(p.PIDFile(), []byte(strconv.Itoa(os.Getpid()))); err != nil {
		_ = ln.Close()
		_ = api.Close()
		return err
	}
	b.log.Info(fmt.Sprintf("Intercom broker started (pid: %d, remote-access-v1)", os.Getpid()),
		"socket", endpointName(p), "api", p.LocalAPISocket(), "socketActivated", inherited != nil)
	if cfg.Prepare != nil {
		cfg.Prepare(b)
	}
	return b.Run(ctx, ln, api)
}

// listenSocket binds a Unix socket of the broker (intercom.ListenSocket:
// a stale socket file is replaced, 0600). A live listener on the path is
// another broker, so that is ErrAlreadyRunning. The listener does not
// unlink on Close: removal is the owner's decision.
func listenSocket(path string) (net.Listener, error) {
	ln, err := intercom.ListenSocket(path)
	var inUse *intercom.SocketInUseError
	if errors.As(err, &inUse) {
		return nil, fmt.Errorf("%w: %w", ErrAlreadyRunning, err)
	}
	if err != nil {
		return nil, err
	}
	return ln, nil
}

// acquireOwner creates broker.owner exclusively, holding our pid. The file
// appears with its content (a hard link of a written temporary file), so
// another broker never reads it empty and takes it for a stale one. An
// owner file naming a dead process is stale: it is removed and taken, once.
func acquireOwner(path string) error {
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())), intercom.FileMode); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	defer os.Remove(tmp)
	for attempt := 0; ; attempt++ {
		err := os.Link(tmp, path)
		if err == nil {
			return nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create %s: %w", path, err)
		}
		pid := intercom.ReadPIDFile(path)
		if pid > 0 && intercom.ProcessAlive(pid) {
			return &OwnerError{PID: pid, File: path}
		}
		if attempt > 0 {
			return fmt.Errorf("%w: could not replace the stale %s", ErrAlreadyRunning, path)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove stale %s: %w", path, err)
		}
	}
}

// releaseOwner removes the broker's files if broker.owner still names this
// process; a broker that lost ownership leaves its successor's files alone.
// removeSocket removes the endpoint this broker bound (nothing under socket
// activation).
func releaseOwner(p intercom.Paths, removeSocket func()) {
	if intercom.ReadPIDFile(p.OwnerFile()) != os.Getpid() {
		return
	}
	removeSocket()
	for _, f := range []string{p.LocalAPISocket(), p.PIDFile(), p.OwnerFile()} {
		_ = os.Remove(f)
	}
}
