//go:build linux

package broker_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
)

// systemdSocket plays systemd's part in socket activation: it binds path
// (0600, in a 0700 directory) and keeps that listener for the whole test,
// handing the broker a duplicate of it as systemd does.
func systemdSocket(t *testing.T, path string) *net.UnixListener {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	require.NoError(t, err)
	ln.SetUnlinkOnClose(false)
	require.NoError(t, os.Chmod(path, intercom.FileMode))
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// activateWith makes the next broker.ListenAndServe see lns as the sockets
// systemd passed it.
func activateWith(t *testing.T, lns ...*net.UnixListener) {
	t.Helper()
	var files []*os.File
	for _, ln := range lns {
		f, err := ln.File()
		require.NoError(t, err)
		files = append(files, f)
	}
	t.Cleanup(broker.ActivateWith(files))
}

func runBroker(cfg broker.Config) (<-chan error, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- broker.ListenAndServe(ctx, cfg) }()
	return done, cancel
}

func waitExit(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("broker did not exit")
		return nil
	}
}

func TestSocketActivatedBrokerServesTheInheritedSocketAndLeavesIt(t *testing.T) {
	p := intercom.NewPaths(intercomtest.ShortDir(t))
	require.NoError(t, intercom.EnsureDir(p.Dir))
	ln := systemdSocket(t, p.BrokerSocket())
	before, err := os.Stat(p.BrokerSocket())
	require.NoError(t, err)
	activateWith(t, ln)

	done, cancel := runBroker(broker.Config{Paths: p, IdleExit: 300 * time.Millisecond, TrustedLocal: true, CheckPeerUID: true})
	defer cancel()
	// The probe is the connection that woke the broker.
	h, detail := intercom.ProbeBroker(context.Background(), p)
	require.Equal(t, intercom.Compatible, h, detail)
	data, err := os.ReadFile(p.PIDFile())
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(os.Getpid()), string(data), "ownership files work as without activation")

	// A session keeps it up past the idle delay; when the last one leaves it
	// exits on its own, though the probe alone would have sufficed.
	a := intercomtest.Register(t, p, "a", intercomtest.RegisterOptions{})
	time.Sleep(600 * time.Millisecond)
	require.Equal(t, []string{"a"}, a.List())
	a.Conn.Close()
	require.NoError(t, waitExit(t, done))

	after, err := os.Stat(p.BrokerSocket())
	require.NoError(t, err, "the broker never unlinks the socket systemd listens on")
	require.True(t, os.SameFile(before, after), "nor replaces it")
	require.Equal(t, intercom.FileMode, after.Mode().Perm())
	for _, f := range []string{p.PIDFile(), p.OwnerFile(), p.LocalAPISocket()} {
		require.NoFileExists(t, f)
	}

	// systemd still listens: the next client's connection waits in the
	// backlog for the next activation.
	c, err := net.Dial("unix", p.BrokerSocket())
	require.NoError(t, err)
	c.Close()
	_ = ln.SetDeadline(time.Now().Add(2 * time.Second))
	next, err := ln.Accept()
	require.NoError(t, err, "the listener stays with systemd")
	next.Close()
}

// A broker woken by a probe alone (doctor, a health check) never sees a
// session; it must still exit and hand the socket back to systemd.
func TestSocketActivatedBrokerWokenByAProbeExitsAgain(t *testing.T) {
	p := intercom.NewPaths(intercomtest.ShortDir(t))
	require.NoError(t, intercom.EnsureDir(p.Dir))
	activateWith(t, systemdSocket(t, p.BrokerSocket()))
	done, cancel := runBroker(broker.Config{Paths: p, IdleExit: 200 * time.Millisecond})
	defer cancel()
	h, detail := intercom.ProbeBroker(context.Background(), p)
	require.Equal(t, intercom.Compatible, h, detail)
	require.NoError(t, waitExit(t, done))
	require.FileExists(t, p.BrokerSocket())
}

func TestSocketActivatedBrokerWithoutIdleExitWaitsForSessions(t *testing.T) {
	p := intercom.NewPaths(intercomtest.ShortDir(t))
	require.NoError(t, intercom.EnsureDir(p.Dir))
	activateWith(t, systemdSocket(t, p.BrokerSocket()))
	done, cancel := runBroker(broker.Config{Paths: p, IdleExit: -1})
	h, detail := intercom.ProbeBroker(context.Background(), p)
	require.Equal(t, intercom.Compatible, h, detail)
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("--no-idle-exit broker exited: %v", err)
	default:
	}
	cancel()
	require.NoError(t, waitExit(t, done))
	require.FileExists(t, p.BrokerSocket(), "a stop by signal leaves the socket too")
}

func TestSocketActivationForAnotherDirectoryIsRefused(t *testing.T) {
	p := intercom.NewPaths(intercomtest.ShortDir(t))
	require.NoError(t, intercom.EnsureDir(p.Dir))
	other := intercom.NewPaths(intercomtest.ShortDir(t))
	require.NoError(t, intercom.EnsureDir(other.Dir))
	activateWith(t, systemdSocket(t, other.BrokerSocket()))

	done, cancel := runBroker(broker.Config{Paths: p, IdleExit: -1})
	defer cancel()
	err := waitExit(t, done)
	require.ErrorIs(t, err, broker.ErrActivation)
	require.Contains(t, err.Error(), other.BrokerSocket())
	require.NoFileExists(t, p.BrokerSocket(), "never binds a socket of its own under activation")
	require.NoFileExists(t, p.OwnerFile())
}

func TestSocketActivatedBrokerDefersToALiveOwner(t *testing.T) {
	p := intercom.NewPaths(intercomtest.ShortDir(t))
	require.NoError(t, intercom.EnsureDir(p.Dir))
	ln := systemdSocket(t, p.BrokerSocket())
	before, err := os.Stat(p.BrokerSocket())
	require.NoError(t, err)
	// A live process (this one's parent) owns the directory.
	require.NoError(t, os.WriteFile(p.OwnerFile(), []byte(strconv.Itoa(os.Getppid())), intercom.FileMode))
	activateWith(t, ln)

	done, cancel := runBroker(broker.Config{Paths: p, IdleExit: -1})
	defer cancel()
	err = waitExit(t, done)
	var oe *broker.OwnerError
	require.True(t, errors.As(err, &oe), "got %v", err)
	require.Equal(t, os.Getppid(), oe.PID)
	after, err := os.Stat(p.BrokerSocket())
	require.NoError(t, err)
	require.True(t, os.SameFile(before, after))
	require.FileExists(t, p.OwnerFile(), "the owner's file is left alone")
}

// A broker that bound broker.sock itself removes it on exit only while it is
// still its socket: one bound there since (a socket unit started meanwhile)
// is left alone.
func TestBrokerExitLeavesASocketBoundAfterIt(t *testing.T) {
	p := intercom.NewPaths(intercomtest.ShortDir(t))
	done, cancel := runBroker(broker.Config{Paths: p, IdleExit: -1})
	waitFor(t, "the broker to listen", func() bool { _, err := os.Stat(p.PIDFile()); return err == nil })
	require.NoError(t, os.Remove(p.BrokerSocket()))
	systemdSocket(t, p.BrokerSocket())
	cancel()
	require.NoError(t, waitExit(t, done))
	require.FileExists(t, p.BrokerSocket())
	require.NoFileExists(t, p.PIDFile())

	// Without a newcomer the broker removes its own socket as before.
	require.NoError(t, os.Remove(p.BrokerSocket()))
	done, cancel = runBroker(broker.Config{Paths: p, IdleExit: -1})
	waitFor(t, "the broker to listen", func() bool { _, err := os.Stat(p.PIDFile()); return err == nil })
	cancel()
	require.NoError(t, waitExit(t, done))
	require.NoFileExists(t, p.BrokerSocket())
}
