package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

type served struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	paths  intercom.Paths
}

func serve(t *testing.T, dir string, tweak ...func(*broker.Config)) *served {
	t.Helper()
	p := intercom.NewPaths(dir)
	cfg := broker.Config{Paths: p, IdleExit: -1, TrustedLocal: true, CheckPeerUID: true}
	for _, f := range tweak {
		f(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{cancel: cancel, done: make(chan struct{}), paths: p}
	go func() {
		s.err = broker.ListenAndServe(ctx, cfg)
		close(s.done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
		}
	})
	waitFor(t, "the broker to listen", func() bool {
		_, err := os.Stat(p.PIDFile())
		return err == nil
	})
	return s
}

func (s *served) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-s.done:
		return s.err
	case <-time.After(10 * time.Second):
		t.Fatal("broker did not exit")
		return nil
	}
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Mode().Perm()
}

func TestListenAndServeFilesAndOwnership(t *testing.T) {
	dir := intercomtest.ShortDir(t)
	s := serve(t, dir)
	p := s.paths
	require.Equal(t, os.FileMode(0o700), mode(t, p.Dir))
	require.Equal(t, os.FileMode(0o600), mode(t, p.BrokerSocket()))
	require.Equal(t, os.FileMode(0o600), mode(t, p.LocalAPISocket()))
	require.Equal(t, os.FileMode(0o600), mode(t, p.PIDFile()))
	require.Equal(t, os.FileMode(0o600), mode(t, p.OwnerFile()))
	pid, _ := os.ReadFile(p.PIDFile())
	require.Equal(t, strconv.Itoa(os.Getpid()), string(pid), "decimal pid, no newline")
	owner, _ := os.ReadFile(p.OwnerFile())
	require.Equal(t, string(pid), string(owner))

	// A second broker on the directory fails and leaves the first alone.
	err := broker.ListenAndServe(context.Background(), broker.Config{Paths: p})
	require.ErrorIs(t, err, broker.ErrAlreadyRunning)
	var oe *broker.OwnerError
	require.True(t, errors.As(err, &oe))
	require.Equal(t, os.Getpid(), oe.PID)
	conn, err := net.Dial("unix", p.BrokerSocket())
	require.NoError(t, err, "first broker still listening")
	conn.Close()

	s.cancel()
	require.NoError(t, s.wait(t))
	for _, f := range []string{p.BrokerSocket(), p.LocalAPISocket(), p.PIDFile(), p.OwnerFile()} {
		_, err := os.Stat(f)
		require.True(t, os.IsNotExist(err), "%s removed on shutdown", f)
	}
}

func TestStaleOwnerAndSocketAreTakenOver(t *testing.T) {
	dir := intercomtest.ShortDir(t)
	p := intercom.NewPaths(dir)
	require.NoError(t, intercom.EnsureDir(p.Dir))
	// A crashed broker: its owner names a dead pid, its socket file remains.
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	require.NoError(t, os.WriteFile(p.OwnerFile(), []byte(strconv.Itoa(dead.Process.Pid)), 0o600))
	ln, err := net.Listen("unix", p.BrokerSocket())
	require.NoError(t, err)
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()

	serve(t, dir)
	c, err := net.Dial("unix", p.BrokerSocket())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write(wire.AppendHealthRequest(nil, "h"))
	require.NoError(t, err)
	payload, err := wire.NewFrameReader(c).Next()
	require.NoError(t, err)
	f, err := wire.DecodeBrokerFrame(payload)
	require.NoError(t, err)
	require.Equal(t, wire.TypeHealthOK, f.Type)
}

// TestLiveSocketWithoutOwnerIsLeftAlone: a listener that answers on
// broker.sock though broker.owner names nobody (an in-process broker, or an
// owner file removed by hand) is another broker: ListenAndServe refuses
// with ErrAlreadyRunning instead of unlinking its socket.
func TestLiveSocketWithoutOwnerIsLeftAlone(t *testing.T) {
	other := intercomtest.StartBroker(t, nil)
	p := other.Paths
	err := broker.ListenAndServe(context.Background(), broker.Config{Paths: p})
	require.ErrorIs(t, err, broker.ErrAlreadyRunning)
	var inUse *intercom.SocketInUseError
	require.True(t, errors.As(err, &inUse), "%v", err)
	require.NoFileExists(t, p.OwnerFile(), "the refused broker released its owner file")
	c := other.Register("still", intercomtest.RegisterOptions{})
	require.Equal(t, []string{"still"}, c.List(), "the first broker still serves its socket")
}

func TestShutdownKeepsFilesOfANewOwner(t *testing.T) {
	dir := intercomtest.ShortDir(t)
	s := serve(t, dir)
	// Another broker has taken over (its owner file replaced ours).
	require.NoError(t, os.WriteFile(s.paths.OwnerFile(), []byte("999999"), 0o600))
	s.cancel()
	require.NoError(t, s.wait(t))
	_, err := os.Stat(s.paths.OwnerFile())
	require.NoError(t, err, "not ours any more: left in place")
	_, err = os.Stat(s.paths.BrokerSocket())
	require.NoError(t, err)
}

func TestIdleExit(t *testing.T) {
	dir := intercomtest.ShortDir(t)
	s := serve(t, dir, func(c *broker.Config) { c.IdleExit = 200 * time.Millisecond })
	// Never had a session: stays up.
	time.Sleep(400 * time.Millisecond)
	select {
	case <-s.done:
		t.Fatal("a broker that never had a session must not idle out")
	default:
	}
	a := intercomtest.Register(t, s.paths, "a", intercomtest.RegisterOptions{Scope: scopeA})
	b := intercomtest.Register(t, s.paths, "b", intercomtest.RegisterOptions{Scope: scopeB})
	a.Write(wire.AppendUnregisterFrame(nil, false))
	time.Sleep(400 * time.Millisecond) // one session left: still up
	b.List()
	b.Conn.Close()
	require.NoError(t, s.wait(t))
	_, err := os.Stat(s.paths.BrokerSocket())
	require.True(t, os.IsNotExist(err))
}

func TestIdleExitCancelledByRegistration(t *testing.T) {
	dir := intercomtest.ShortDir(t)
	// b registers well within the idle window after a left (however busy
	// the machine), and the broker is still up after the window ended.
	const idle = 2 * time.Second
	s := serve(t, dir, func(c *broker.Config) { c.IdleExit = idle })
	a := intercomtest.Register(t, s.paths, "a", intercomtest.RegisterOptions{})
	a.Conn.Close()
	api := &intercom.LocalAPIClient{Path: s.paths.LocalAPISocket()}
	waitFor(t, "a's departure (the idle timer armed)", func() bool {
		st, err := api.Stats(context.Background())
		return err == nil && st.Sessions == 0
	})
	b := intercomtest.Register(t, s.paths, "b", intercomtest.RegisterOptions{})
	time.Sleep(idle + 500*time.Millisecond)
	require.Equal(t, []string{"b"}, b.List(), "the broker stayed up")
}

func TestLocalAPI(t *testing.T) {
	dir := intercomtest.ShortDir(t)
	s := serve(t, dir)
	a := intercomtest.Register(t, s.paths, "a", intercomtest.RegisterOptions{Scope: scopeA})
	b := intercomtest.Register(t, s.paths, "b", intercomtest.RegisterOptions{Scope: scopeA})
	a.Expect(wire.TypeSessionJoined)
	a.Deliver("b", b, intercomtest.Message("m", "x"))

	api := &intercom.LocalAPIClient{Path: s.paths.LocalAPISocket()}
	ctx := context.Background()
	st, err := api.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, os.Getpid(), st.PID)
	require.Equal(t, 2, st.Sessions)
	require.EqualValues(t, 1, st.Accepted)
	require.EqualValues(t, 1, st.Delivered)
	require.GreaterOrEqual(t, st.FramesIn, uint64(4))

	peer, err := api.Peer(ctx, "a")
	require.NoError(t, err)
	require.True(t, peer.Connected)
	require.Equal(t, os.Getpid(), peer.PID, "kernel-verified pid of the connection")
	require.Equal(t, os.Getuid(), peer.UID)
	peer, err = api.Peer(ctx, "nobody")
	require.NoError(t, err)
	require.False(t, peer.Connected)

	_, err = api.Do(ctx, intercom.APIRequest{Op: "bogus"})
	require.ErrorContains(t, err, "unknown op")

	raw, err := net.Dial("unix", s.paths.LocalAPISocket())
	require.NoError(t, err)
	_, _ = raw.Write([]byte(`{"op":"stats"}` + "\n"))
	buf := make([]byte, 4096)
	n, _ := raw.Read(buf)
	require.NotContains(t, string(buf[:n]), scopeA, "no scope in the local API")
	raw.Close()

	require.NoError(t, api.Shutdown(ctx))
	require.NoError(t, s.wait(t))
	a.ExpectClosed()
	_, err = api.Stats(ctx)
	require.ErrorIs(t, err, intercom.ErrNoLocalAPI)
}

func TestSocketPathTooLong(t *testing.T) {
	dir := intercomtest.ShortDir(t) + "/" + string(make([]byte, 0)) + "very-long-directory-name-to-push-the-socket-path-over-the-limit-of-the-kernel-sun-path"
	err := broker.ListenAndServe(context.Background(), broker.Config{Paths: intercom.NewPaths(dir)})
	require.ErrorIs(t, err, intercom.ErrSocketPathTooLong)
	require.Contains(t, err.Error(), "PI_CODING_AGENT_DIR")
}

// A peer that writes its last frame and shuts its side at once gives the
// broker the frame and the end in one event; the broker must act on both
// without another event to wake it (the event loop parks between
// events). Twenty sessions each unregister and shut their write side, as
// intercom.Client.Close does; the broker must close every connection, and
// the observer hear every session leave, though nothing else happens on
// the broker. (The drain wait and the registration timeout, after which
// the broker would close anyway, are an hour here.)
func TestLastFrameAndShutdownInOneEvent(t *testing.T) {
	t.Cleanup(broker.SetDrainWait(time.Hour)) // restored after the broker stops
	h := startBroker(t, func(c *broker.Config) { c.RegistrationTimeout = time.Hour })
	obs := h.Register("observer", intercomtest.RegisterOptions{})
	for i := range 20 {
		id := fmt.Sprintf("brief-%d", i)
		c := h.Register(id, intercomtest.RegisterOptions{})
		require.Equal(t, id, obs.Expect(wire.TypeSessionJoined).Session.ID)
		_, err := c.Conn.Write(wire.AppendUnregisterFrame(nil, false))
		require.NoError(t, err)
		require.NoError(t, c.Conn.(*net.UnixConn).CloseWrite())
		c.DrainUntilClosed()
		require.Equal(t, id, obs.Expect(wire.TypeSessionLeft).SessionID)
	}
}
