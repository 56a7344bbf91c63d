package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// agentFleet returns a command running this test binary as agent-fleet with
// PI_CODING_AGENT_DIR=dir.
func agentFleet(t *testing.T, dir string, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "AGENT_FLEET_RUN_MAIN=1", "PI_CODING_AGENT_DIR="+dir)
	return cmd
}

func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "afc")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is a started agent-fleet process; Wait may be called once, or not at
// all (cleanup kills and reaps it).
type proc struct {
	*exec.Cmd
	stderr *lockedBuffer
	waited chan error
}

func (p *proc) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-p.waited:
		p.waited <- err
		return err
	case <-time.After(15 * time.Second):
		t.Fatalf("process did not exit: %s", p.stderr.String())
		return nil
	}
}

// startBrokerProcess starts `agent-fleet broker` and waits until it listens.
func startBrokerProcess(t *testing.T, dir string, args ...string) *proc {
	t.Helper()
	cmd := agentFleet(t, dir, append([]string{"broker"}, args...)...)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	p := &proc{Cmd: cmd, stderr: stderr, waited: make(chan error, 1)}
	go func() { p.waited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.waited
	})
	pidFile := filepath.Join(dir, "intercom", "broker.pid")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if data, err := os.ReadFile(pidFile); err == nil && string(data) == strconv.Itoa(cmd.Process.Pid) {
			return p
		}
		require.True(t, time.Now().Before(deadline), "broker did not start: %s", stderr.String())
		time.Sleep(10 * time.Millisecond)
	}
}

func health(t *testing.T, sock string) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Write(wire.AppendHealthRequest(nil, "h"))
	require.NoError(t, err)
	p, err := wire.NewFrameReader(c).Next()
	require.NoError(t, err)
	f, err := wire.DecodeBrokerFrame(p)
	require.NoError(t, err)
	require.Equal(t, wire.TypeHealthOK, f.Type)
}

func TestBrokerProcessLifecycle(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	idir := filepath.Join(dir, "intercom")
	first := startBrokerProcess(t, dir)
	for _, f := range []string{"broker.sock", "broker.pid", "broker.owner", "agent-fleet.sock"} {
		fi, err := os.Stat(filepath.Join(idir, f))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), f)
	}
	health(t, filepath.Join(idir, "broker.sock"))

	// A second broker exits 4 with a clear message; the first is untouched.
	second := agentFleet(t, dir, "broker")
	out, err := second.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, exitConflict, ee.ExitCode())
	require.Contains(t, string(out), "already running")
	require.Contains(t, string(out), strconv.Itoa(first.Process.Pid))
	health(t, filepath.Join(idir, "broker.sock"))

	// SIGTERM: clean exit, files gone.
	require.NoError(t, first.Process.Signal(syscall.SIGTERM))
	require.NoError(t, first.wait(t))
	for _, f := range []string{"broker.sock", "broker.pid", "broker.owner", "agent-fleet.sock"} {
		_, err := os.Stat(filepath.Join(idir, f))
		require.True(t, os.IsNotExist(err), "%s left behind", f)
	}

	// kill -9 leaves a stale socket and owner; the next broker takes over.
	crashed := startBrokerProcess(t, dir)
	require.NoError(t, crashed.Process.Kill())
	_ = crashed.wait(t)
	_, err = os.Stat(filepath.Join(idir, "broker.owner"))
	require.NoError(t, err, "kill -9 leaves the owner file")
	next := startBrokerProcess(t, dir)
	health(t, filepath.Join(idir, "broker.sock"))
	require.NoError(t, next.Process.Signal(syscall.SIGINT))
	require.NoError(t, next.wait(t))
}

func TestBrokerProcessIdleExit(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	p := startBrokerProcess(t, dir, "--idle-exit", "200ms")
	c, err := net.Dial("unix", filepath.Join(dir, "intercom", "broker.sock"))
	require.NoError(t, err)
	_, err = c.Write(wire.AppendRegisterFrame(nil, &wire.RegisterRequest{SessionID: "s", Cwd: "/", Model: "m", PID: 1, StartedAt: 1, LastActivity: 1}))
	require.NoError(t, err)
	_, err = wire.NewFrameReader(c).Next()
	require.NoError(t, err)
	c.Close()
	require.NoError(t, p.wait(t), "broker exits after its last session left")
}

func TestBrokerBadAskTimeout(t *testing.T) {
	t.Parallel()
	cmd := agentFleet(t, shortDir(t), "broker")
	cmd.Env = append(cmd.Env, "PI_INTERCOM_ASK_TIMEOUT_MS=soon")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, exitUsage, ee.ExitCode())
	require.Contains(t, string(out), "PI_INTERCOM_ASK_TIMEOUT_MS")
}

func TestVersion(t *testing.T) {
	t.Parallel()
	out, err := agentFleet(t, shortDir(t), "version").Output()
	require.NoError(t, err)
	require.Contains(t, string(out), "protocol: pi-intercom v4")
}

func TestUnknownFlagIsUsageError(t *testing.T) {
	t.Parallel()
	err := agentFleet(t, shortDir(t), "broker", "--bogus").Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, exitUsage, ee.ExitCode())
}
