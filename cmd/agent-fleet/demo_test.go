package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/demo"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

var (
	demoDirRE    = regexp.MustCompile(`Using (\S+) as PI_CODING_AGENT_DIR`)
	brokerUnitRE = regexp.MustCompile(`agent-fleet-broker-[0-9a-f]{12}\.service`)
	workerUnitRE = regexp.MustCompile(`agent-fleet-worker-demo-p(?:i|o)ng-[0-9a-f]{12}\.service`)
)

// requireDemoLeftNothing checks, on the manager at inst, that no unit the
// demo started is loaded, and that its agent directory is gone. The
// workers' units are the ones it named; a demo that named none is checked
// against every demo worker unit. Other demo tests run beside it on the
// same manager, so a pattern would see their live units.
func requireDemoLeftNothing(t *testing.T, inst unitstest.Instance, out string) {
	t.Helper()
	m := unitstest.Connect(t, inst)
	patterns := workerUnitRE.FindAllString(out, -1)
	if len(patterns) == 0 {
		patterns = []string{fleet.WorkerUnitName(demo.PingWorker, "*"), fleet.WorkerUnitName(demo.PongWorker, "*")}
	}
	if b := brokerUnitRE.FindString(out); b != "" {
		patterns = append(patterns, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	left, err := m.ListUnits(ctx, patterns...)
	require.NoError(t, err)
	require.Empty(t, left, "units left behind by the demo")
	requireDemoDirGone(t, out)
}

func requireDemoDirGone(t *testing.T, out string) {
	t.Helper()
	match := demoDirRE.FindStringSubmatch(out)
	require.NotNil(t, match, "the demo names its agent directory:\n%s", out)
	require.NoDirExists(t, match[1])
}

// requireConversation checks that the narration shows both workers and
// every message they exchanged.
func requireConversation(t *testing.T, out string, pings int) {
	t.Helper()
	for i := 1; i <= pings; i++ {
		n := strconv.Itoa(i)
		require.Contains(t, out, `demo-ping: asking demo-pong "ping `+n+`"`)
		require.Contains(t, out, `demo-pong: demo-ping asked "ping `+n+`"; replying "pong `+n+`"`)
		require.Contains(t, out, `demo-ping: demo-pong replied "pong `+n+`"`)
	}
	require.Contains(t, out, "demo-ping asked "+strconv.Itoa(pings)+" times and demo-pong answered every ask.")
	require.NotContains(t, out, "level=WARN", "the workers' logs have nothing to warn of")
}

// TestDemo runs `agent-fleet demo` against the shared user manager: two
// workers talk, are listed, inspected and stopped with verified cleanup,
// and nothing is left.
func TestDemo(t *testing.T) {
	t.Parallel()
	inst := unitstest.Require(t)
	cmd := agentFleet(t, shortDir(t), "demo")
	cmd.Env = append(cmd.Env, inst.Env()...)
	began := time.Now()
	data, err := cmd.CombinedOutput()
	out := string(data)
	require.NoError(t, err, "%s", out)
	t.Logf("demo took %s:\n%s", time.Since(began).Round(time.Millisecond), out)

	require.Contains(t, out, "Your user manager answers at "+inst.Bus.Address)
	require.Contains(t, out, "demo-pong (listens on the intercom and answers every ask): ready in")
	require.Contains(t, out, "demo-ping (asks demo-pong 3 questions, then waits): ready in")
	require.Regexp(t, `demo-ping\s+running\s+role asker`, out, "list shows both workers")
	require.Regexp(t, `demo-pong\s+running\s+role responder`, out)
	require.Regexp(t, `demo-pong: running, unit active/running\n\s+cgroup /\S+agent-fleet-worker-demo-pong-[0-9a-f]{12}\.service\n\s+[1-9]\d* processes: `, out, "status shows unit, cgroup and processes")
	requireConversation(t, out, 3)
	require.Contains(t, out, "demo-ping: done: 3 of 3 asks answered")
	for _, id := range []string{demo.PongWorker, demo.PingWorker} {
		require.Regexp(t, `Stopped `+id+` in \d+ms: state stopped\.\n\s+cgroup /\S+: (0 processes — verified empty|nothing of the worker's — verified; systemd's exit-record process \(pid \d+\) is finishing)\.`, out)
	}
	require.Contains(t, out, "No unit of the run is left (3 checked by name).")
	require.Contains(t, out, "Demo complete: everything the demo started is gone.")
	requireDemoLeftNothing(t, inst, out)
}

// TestDemoWithoutUserManager: with no user manager reachable and booting
// one forbidden, the demo says what is missing and runs the intercom part.
func TestDemoWithoutUserManager(t *testing.T) {
	t.Parallel()
	cmd := agentFleet(t, shortDir(t), "demo", "--no-boot", "--pings", "2")
	cmd.Env = append(cmd.Env, "DBUS_SESSION_BUS_ADDRESS=", "XDG_RUNTIME_DIR=")
	data, err := cmd.CombinedOutput()
	out := string(data)
	require.NoError(t, err, "%s", out)
	t.Logf("%s", out)
	require.Contains(t, out, "None is available, so workers cannot be spawned here:")
	if units.CanBootPrivateManager() != units.ErrUnsupported {
		require.Contains(t, out, "DBUS_SESSION_BUS_ADDRESS and XDG_RUNTIME_DIR are both unset")
		require.Contains(t, out, "A private user manager was not booted: --no-boot forbids it")
	}
	require.Contains(t, out, "The demo runs only the intercom part")
	requireConversation(t, out, 2)
	require.Regexp(t, `Shut down the broker \(pid \d+\)\.`, out)
	require.Contains(t, out, "Demo complete: everything the demo started is gone.")
	require.NotContains(t, out, "Spawning")
	requireDemoDirGone(t, out)
}

// TestDemoBootsPrivateManager: as root on a machine whose PID 1 is not
// systemd, a demo that finds no user manager boots a private one for
// itself and stops it at the end.
func TestDemoBootsPrivateManager(t *testing.T) {
	t.Parallel()
	if err := units.CanBootPrivateManager(); err != nil {
		t.Skipf("this machine cannot boot a private user manager: %v", err)
	}
	cmd := agentFleet(t, shortDir(t), "demo", "--pings", "1")
	cmd.Env = append(cmd.Env, "DBUS_SESSION_BUS_ADDRESS=", "XDG_RUNTIME_DIR=")
	data, err := cmd.CombinedOutput()
	out := string(data)
	require.NoError(t, err, "%s", out)
	t.Logf("%s", out)
	m := regexp.MustCompile("booted a private\n\\s+`systemd --user` for itself: pid (\\d+), runtime directory (\\S+), ").FindStringSubmatch(out)
	require.NotNil(t, m, "the demo says it booted a manager")
	require.Contains(t, out, "No user manager is reachable: no user D-Bus bus: DBUS_SESSION_BUS_ADDRESS and XDG_RUNTIME_DIR are both unset.\n",
		"why, in one clause")
	require.NotContains(t, out, "dbus-user-session packages.", "no advice cut in half")
	pid, _ := strconv.Atoi(m[1])
	requireConversation(t, out, 1)
	require.Contains(t, out, "Stopped the private user manager (pid "+m[1]+")")
	require.Contains(t, out, "Demo complete")
	_, err = os.Stat("/proc/" + strconv.Itoa(pid))
	require.True(t, os.IsNotExist(err) || units.ProcessStartTime(pid) == "", "the private manager is gone")
	require.NoDirExists(t, m[2])
	requireDemoDirGone(t, out)
}

// TestDemoInterrupted: Ctrl-C in the middle of the demo still stops its
// workers and broker and removes its directory.
func TestDemoInterrupted(t *testing.T) {
	t.Parallel()
	inst := unitstest.Require(t)
	// 20 pings keep the conversation going long enough to interrupt it.
	cmd := agentFleet(t, shortDir(t), "demo", "--pings", "20")
	cmd.Env = append(cmd.Env, inst.Env()...)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var mu sync.Mutex
	var b strings.Builder
	spawned, read := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		once := sync.Once{}
		for sc.Scan() {
			mu.Lock()
			b.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.Contains(sc.Text(), "Waiting for the conversation") {
				once.Do(func() { close(spawned) })
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case <-spawned:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the demo never got to its conversation")
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	// Read to the end before Wait, which closes the pipe: on a busy
	// machine the reader can lag behind the demo's last lines.
	select {
	case <-read:
	case <-time.After(2 * time.Minute): // a hang guard
		_ = cmd.Process.Kill()
		t.Fatal("the interrupted demo did not end")
	}
	err = cmd.Wait()
	mu.Lock()
	out := b.String()
	mu.Unlock()
	t.Logf("%s\nstderr:\n%s", out, stderr)
	require.Error(t, err, "an interrupted demo does not exit 0")
	require.Contains(t, out, "Interrupted: cleaning up what the demo started.")
	require.Contains(t, out, "The demo was interrupted; everything it started is gone.")
	requireDemoLeftNothing(t, inst, out)
}
