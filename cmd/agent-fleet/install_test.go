//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	contribsystemd "github.com/agent-fleet/agent-fleet/contrib/systemd"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// installWorld is a private user manager that reads unit files from a
// temporary XDG_CONFIG_HOME, a temporary HOME, and an agent directory: what
// install writes never reaches the real user's configuration.
type installWorld struct {
	t          *testing.T
	b          *unitstest.Booted
	m          *units.Systemd
	configHome string
	home       string
	dir        string // agent directory
	paths      intercom.Paths
	bin        string // an agent-fleet executable (this test binary, wrapped)
	unitDir    string
}

func newInstallWorld(t *testing.T, agentDir string) *installWorld {
	t.Helper()
	if err := unitstest.Bootable(); err != nil {
		unitstest.Unavailable(t, err)
	}
	w := &installWorld{t: t, configHome: shortDir(t), home: shortDir(t), dir: agentDir}
	w.paths = intercom.NewPaths(agentDir)
	w.unitDir = filepath.Join(w.configHome, "systemd", "user")
	b, err := unitstest.Boot(unitstest.BootOptions{ConfigHome: w.configHome})
	require.NoError(t, err)
	w.b = b
	t.Cleanup(func() { _ = b.Stop() })
	t.Cleanup(func() { stopBroker(t, agentDir) })
	w.m, err = units.Connect(context.Background(), units.Options{Bus: b.Bus})
	require.NoError(t, err)
	t.Cleanup(func() { w.m.Close() })
	w.bin = filepath.Join(binDir(t), "agent-fleet")
	return w
}

// cmd runs agent-fleet as a user of that manager would.
func (w *installWorld) cmd(args ...string) *exec.Cmd {
	cmd := agentFleet(w.t, w.dir, args...)
	cmd.Env = append(cmd.Env, w.b.Env()...)
	cmd.Env = append(cmd.Env, "XDG_CONFIG_HOME="+w.configHome, "HOME="+w.home)
	return cmd
}

func (w *installWorld) run(args ...string) (string, error) {
	out, err := w.cmd(args...).CombinedOutput()
	return string(out), err
}

func (w *installWorld) unit(name string) units.UnitState {
	w.t.Helper()
	st, err := w.m.Unit(context.Background(), name)
	require.NoError(w.t, err)
	return st
}

func (w *installWorld) brokerPIDFile() int {
	data, err := os.ReadFile(w.paths.PIDFile())
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(string(data))
	return pid
}

// requireActivatedBroker waits until the broker runs as the socket's
// service: its pid is the service's main pid, and no transient broker unit
// exists.
func (w *installWorld) requireActivatedBroker() int {
	w.t.Helper()
	var st units.UnitState
	require.Eventually(w.t, func() bool {
		st = w.unit(contribsystemd.BrokerService)
		return st.ActiveState == "active" && st.MainPID > 0 && w.brokerPIDFile() == st.MainPID
	}, 10*time.Second, 20*time.Millisecond, "the broker runs as %s: %+v, broker.pid %d", contribsystemd.BrokerService, st, w.brokerPIDFile())
	require.True(w.t, w.unit(factory.BrokerUnitName(w.dir)).Gone(), "no transient broker unit was started")
	return st.MainPID
}

// doctorUnits is doctor's "systemd units" finding as "status: detail".
func (w *installWorld) doctorUnits(env ...string) string {
	w.t.Helper()
	cmd := w.cmd("doctor", "--json")
	cmd.Env = append(cmd.Env, env...)
	out, _ := cmd.Output() // other checks may fail here
	var res struct {
		Checks []fleet.Check `json:"checks"`
	}
	require.NoError(w.t, json.Unmarshal(out, &res), "%s", out)
	for _, c := range res.Checks {
		if c.Name == "systemd units" {
			return string(c.Status) + ": " + c.Detail
		}
	}
	w.t.Fatalf("doctor has no systemd units check: %s", out)
	return ""
}

// requireUninstalled: every file install added is gone, and so is every
// enablement link and the socket.
func (w *installWorld) requireUninstalled() {
	w.t.Helper()
	for _, name := range contribsystemd.Names {
		require.NoFileExists(w.t, filepath.Join(w.unitDir, name))
	}
	var left []string
	_ = filepath.Walk(w.configHome, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			left = append(left, path)
		}
		return nil
	})
	require.Empty(w.t, left, "uninstall leaves no file in XDG_CONFIG_HOME")
	require.NoFileExists(w.t, w.paths.BrokerSocket(), "the socket unit's socket is removed")
	for _, name := range contribsystemd.Names {
		st := w.unit(name)
		require.False(w.t, st.Running(), "%s stopped: %+v", name, st)
		require.NotEqual(w.t, "failed", st.ActiveState, name)
		require.NotEqual(w.t, "enabled", st.UnitFileState, name)
	}
}

func TestInstallSocketActivationAndJanitor(t *testing.T) {
	t.Parallel()
	w := newInstallWorld(t, shortDir(t))
	sock, svc := contribsystemd.BrokerSocket, contribsystemd.BrokerService
	timer := filepath.Join(w.unitDir, contribsystemd.CleanupTimer)

	out, err := w.run("install", "--dry-run", "--binary", w.bin)
	require.NoError(t, err, out)
	for _, name := range contribsystemd.Names {
		require.Contains(t, out, filepath.Join(w.unitDir, name)+": would create")
	}
	require.Contains(t, out, "ExecStart="+w.bin+" cleanup --execute")
	require.Contains(t, out, "ExecStart="+w.bin+" broker --log-to-file")
	require.Contains(t, out, "ListenStream="+w.paths.BrokerSocket())
	require.NoDirExists(t, w.unitDir, "a dry run changes nothing")

	_, err = w.run("install")
	requireExit(t, err, exitUsage) // a test binary is a temporary build

	// A shell whose XDG_CONFIG_HOME is not the manager's: install says which
	// one to use and writes nothing.
	other := shortDir(t)
	cmd := w.cmd("install", "--binary", w.bin)
	cmd.Env = append(cmd.Env, "XDG_CONFIG_HOME="+other)
	res, err := cmd.CombinedOutput()
	requireExit(t, err, exitUsage)
	require.Contains(t, string(res), "does not load unit files from this directory: "+filepath.Join(other, "systemd", "user"))
	require.Contains(t, string(res), "run install with XDG_CONFIG_HOME="+w.configHome)
	require.NoDirExists(t, filepath.Join(other, "systemd"))

	out, err = w.run("install", "--binary", w.bin)
	require.NoError(t, err, out)
	require.Contains(t, out, sock+": enabled and listening on "+w.paths.BrokerSocket())
	// From that other shell, uninstall does not call them uninstalled: it
	// says where the manager reads them.
	cmd = w.cmd("uninstall")
	cmd.Env = append(cmd.Env, "XDG_CONFIG_HOME="+other)
	res, err = cmd.CombinedOutput()
	requireExit(t, err, exitUsage)
	require.Contains(t, string(res), "run uninstall with XDG_CONFIG_HOME="+w.configHome)
	require.NotContains(t, string(res), "not installed")
	data, err := os.ReadFile(filepath.Join(w.unitDir, svc))
	require.NoError(t, err)
	require.Contains(t, string(data), `Environment="PI_CODING_AGENT_DIR=`+w.dir+`"`)
	for _, name := range contribsystemd.Enabled {
		st := w.unit(name)
		require.Equal(t, "active", st.ActiveState, name)
		require.Equal(t, "enabled", st.UnitFileState, name)
	}
	require.Equal(t, "inactive", w.unit(svc).ActiveState, "nothing connected yet")

	// systemd made the socket as the unit says: 0600 in a 0700 directory.
	fi, err := os.Stat(w.paths.BrokerSocket())
	require.NoError(t, err)
	require.Equal(t, os.ModeSocket, fi.Mode().Type())
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	di, err := os.Stat(w.paths.Dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), di.Mode().Perm())

	// doctor's broker probe is a connection too: it wakes the broker.
	require.Contains(t, w.doctorUnits(), "ok: "+sock+" listening on "+w.paths.BrokerSocket()+" (broker pid ")

	// Two sessions talk; the first connection started the broker by
	// activation, not as a transient unit.
	bob := startListener(t, w.dir, "bob")
	pid := w.requireActivatedBroker()
	out2, err := as(t, w.dir, "alice", "intercom", "send", "bob", "hello through the socket").CombinedOutput()
	require.NoError(t, err, "%s", out2)
	require.Eventually(t, func() bool {
		for _, m := range bob.messages() {
			if m.Text == "hello through the socket" {
				return true
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond)
	log, err := os.ReadFile(w.paths.BrokerLog())
	require.NoError(t, err)
	require.Contains(t, string(log), "socketActivated=true", "the service logs to the bounded broker.log")

	// Installing again changes nothing and keeps the broker.
	out, err = w.run("install", "--binary", w.bin)
	require.NoError(t, err, out)
	require.Contains(t, out, timer+": unchanged")
	require.NotContains(t, out, "create")
	require.NotContains(t, out, "update")
	require.Equal(t, pid, w.unit(svc).MainPID)

	// The last session leaves: the broker exits on its own, the socket stays
	// with systemd (same file), and the next client starts a new broker.
	before, err := os.Stat(w.paths.BrokerSocket())
	require.NoError(t, err)
	require.NoError(t, bob.cmd.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool { return w.unit(svc).ActiveState == "inactive" }, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, "success", w.unit(svc).Result)
	require.Equal(t, "active", w.unit(sock).ActiveState)
	after, err := os.Stat(w.paths.BrokerSocket())
	require.NoError(t, err)
	require.True(t, os.SameFile(before, after), "the broker left the socket to systemd")
	require.NoFileExists(t, w.paths.PIDFile())
	h, detail := intercom.ProbeBroker(context.Background(), w.paths)
	require.Equal(t, intercom.Compatible, h, detail)
	require.NotEqual(t, pid, w.requireActivatedBroker())

	// What the timer runs works: the janitor as a oneshot service.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, w.m.StartUnit(ctx, contribsystemd.CleanupService))
	require.Equal(t, "success", w.unit(contribsystemd.CleanupService).Result)

	// The activated broker may idle out at any moment: any pid (0 once
	// it left) is its report.
	require.Regexp(t, `\(broker pid \d+\); `+regexp.QuoteMeta(contribsystemd.CleanupTimer)+` active`, w.doctorUnits())
	require.Contains(t, w.doctorUnits("XDG_CONFIG_HOME="+other), "listening on", "doctor finds the units through the manager")

	out, err = w.run("uninstall", "--dry-run")
	require.NoError(t, err, out)
	require.Contains(t, out, timer)
	require.FileExists(t, timer)
	out, err = w.run("uninstall")
	require.NoError(t, err, out)
	w.requireUninstalled()
	require.Eventually(t, func() bool { return w.brokerPIDFile() == 0 }, 10*time.Second, 20*time.Millisecond, "the broker stopped")
	out, err = w.run("uninstall")
	require.NoError(t, err, out)
	require.Contains(t, out, "not installed")
	require.Contains(t, w.doctorUnits(), "ok: not installed: brokers start on demand")

	// Back to brokers on demand, as before install.
	out2, err = w.cmd("intercom", "list").CombinedOutput()
	require.NoError(t, err, "%s", out2)
	require.True(t, w.unit(factory.BrokerUnitName(w.dir)).Running(), "a transient broker unit again")
}

// A broker started on demand keeps its sessions through install; the
// socket takes over when it has exited, through the client's broker start.
// The agent directory's path has a space and a '%', which the units quote.
func TestInstallBesideARunningBroker(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(shortDir(t), "a b%c")
	require.NoError(t, os.Mkdir(dir, 0o700))
	w := newInstallWorld(t, dir)
	sock, svc := contribsystemd.BrokerSocket, contribsystemd.BrokerService

	old := startBrokerProcess(t, dir, "--no-idle-exit")
	out, err := w.run("install", "--binary", w.bin)
	require.NoError(t, err, out)
	require.Contains(t, w.doctorUnits(), "warn: "+sock+" is inactive (enabled): a broker started on demand serves the socket until it exits")
	require.Contains(t, out, sock+": enabled; not started yet because agent-fleet's broker (pid "+strconv.Itoa(old.Process.Pid))
	require.Equal(t, "enabled", w.unit(sock).UnitFileState)
	require.False(t, w.unit(sock).Running())
	h, detail := intercom.ProbeBroker(context.Background(), w.paths)
	require.Equal(t, intercom.Compatible, h, detail)
	require.Equal(t, old.Process.Pid, w.brokerPIDFile(), "the running broker is untouched")

	require.NoError(t, old.Process.Signal(syscall.SIGTERM))
	require.NoError(t, old.wait(t))
	// A one-shot finds no broker and starts one: through the socket.
	out2, err := w.cmd("intercom", "list").CombinedOutput()
	require.NoError(t, err, "%s", out2)
	require.True(t, w.unit(sock).Running())
	pid := w.requireActivatedBroker()
	listen, err := w.m.SocketListen(context.Background(), sock)
	require.NoError(t, err)
	require.Equal(t, []string{w.paths.BrokerSocket()}, listen)
	env, err := w.m.ServiceEnvironment(context.Background(), svc)
	require.NoError(t, err)
	require.Contains(t, env, "PI_CODING_AGENT_DIR="+dir)

	// The executable the units run goes away: doctor says what to do.
	moved := w.bin + ".moved"
	require.NoError(t, os.Rename(w.bin, moved))
	require.Contains(t, w.doctorUnits(), "fail: the installed units run "+w.bin+", which does not exist")
	require.NoError(t, os.Rename(moved, w.bin))

	out, err = w.run("uninstall")
	require.NoError(t, err, out)
	w.requireUninstalled()
	require.Eventually(t, func() bool { return syscall.Kill(pid, 0) != nil }, 10*time.Second, 20*time.Millisecond)
}

func TestRenderedUnitsQuotePaths(t *testing.T) {
	t.Parallel()
	p := contribsystemd.Params{Binary: "/opt/my tools/agent-fleet", AgentDir: "/home/a b/100%/.pi", BrokerSocket: "/home/a b/100%/.pi/intercom/broker.sock"}
	require.NoError(t, p.Check())
	files := contribsystemd.Render(p)
	svc := string(files[contribsystemd.CleanupService])
	require.Contains(t, svc, `ExecStart="/opt/my tools/agent-fleet" cleanup --execute`)
	require.Contains(t, svc, `Environment="PI_CODING_AGENT_DIR=/home/a b/100%%/.pi"`)
	broker := string(files[contribsystemd.BrokerService])
	require.Contains(t, broker, `ExecStart="/opt/my tools/agent-fleet" broker --log-to-file`)
	socket := string(files[contribsystemd.BrokerSocket])
	require.Contains(t, socket, "ListenStream=/home/a b/100%%/.pi/intercom/broker.sock\n")
	for _, line := range []string{"SocketMode=0600", "DirectoryMode=0700", "RemoveOnStop=yes", "WantedBy=sockets.target"} {
		require.Contains(t, socket, line+"\n")
	}
	for name, data := range files {
		require.NotRegexp(t, `@[A-Z_]+@`, string(data), name)
	}

	bad := p
	bad.AgentDir = "/home/x\ny"
	require.Error(t, bad.Check(), "a newline would end the setting")
	bad = p
	bad.Binary = "agent-fleet"
	require.Error(t, bad.Check(), "relative binary")
}

// install --node runs the node as a user service in place of the broker's
// socket; it stays in node mode until uninstall removes it too.
func TestInstallNode(t *testing.T) {
	t.Parallel()
	w := newInstallWorld(t, shortDir(t))
	node := contribsystemd.NodeService
	out, err := w.run("install", "--node", "--binary", w.bin)
	requireExit(t, err, exitUsage)
	require.Contains(t, out, "no node configuration at "+filepath.Join(w.paths.Dir, "node.toml")+" (run agent-fleet node init first)")
	require.NoDirExists(t, w.unitDir)

	out, err = w.run("node", "init", "--embedded", "--name", "unit-host", "--listen", "127.0.0.1:0")
	require.NoError(t, err, out)
	out, err = w.run("install", "--node", "--binary", w.bin)
	require.NoError(t, err, out)
	require.Contains(t, out, node+": enabled and active")
	data, err := os.ReadFile(filepath.Join(w.unitDir, node))
	require.NoError(t, err)
	require.Contains(t, string(data), "ExecStart="+w.bin+" node run --log-to-file")
	require.Contains(t, string(data), "Restart=on-failure")
	require.Contains(t, string(data), `Environment="PI_CODING_AGENT_DIR=`+w.dir+`"`)
	require.Equal(t, "enabled", w.unit(node).UnitFileState)
	require.NotEqual(t, "enabled", w.unit(contribsystemd.BrokerSocket).UnitFileState, "the node serves the socket")
	require.False(t, w.unit(contribsystemd.BrokerSocket).Running())

	// The node runs as the service: its pid is the unit's main pid.
	var st struct {
		On  bool `json:"on"`
		PID int  `json:"pid"`
	}
	require.Eventually(t, func() bool {
		res, err := w.cmd("node", "status", "--json").Output()
		return err == nil && json.Unmarshal(res, &st) == nil && st.On
	}, time.Minute, 100*time.Millisecond)
	require.Equal(t, w.unit(node).MainPID, st.PID)
	require.Contains(t, w.doctorUnits(), fmt.Sprintf("ok: %s active (node pid %d) serving %s", node, st.PID, w.paths.BrokerSocket()))
	res, err := w.cmd("intercom", "status").CombinedOutput()
	require.NoError(t, err, "%s", res)
	require.Contains(t, string(res), "Multi-node routing: on (nats, prefix agent-fleet), 0 other hosts live")

	// install without --node keeps the node.
	out, err = w.run("install", "--binary", w.bin)
	require.NoError(t, err, out)
	require.Contains(t, out, filepath.Join(w.unitDir, node)+": unchanged")
	require.Equal(t, st.PID, w.unit(node).MainPID)

	out, err = w.run("uninstall")
	require.NoError(t, err, out)
	require.Contains(t, out, "stopped "+node)
	require.NoFileExists(t, filepath.Join(w.unitDir, node))
	w.requireUninstalled()
	require.False(t, w.unit(node).Running())
	require.Eventually(t, func() bool { return syscall.Kill(st.PID, 0) != nil }, 10*time.Second, 20*time.Millisecond)
}

// install --binary runs the program it is given only once it proved to be
// an agent-fleet of this protocol: /bin/true, or one that speaks another
// protocol version, is a usage error before anything is written.
func TestInstallRefusesABinaryThatIsNotAgentFleet(t *testing.T) {
	t.Parallel()
	other := filepath.Join(shortDir(t), "agent-fleet")
	require.NoError(t, os.WriteFile(other, []byte("#!/bin/sh\necho '{\"protocol\":\"pi-intercom v3\"}'\n"), 0o755))
	for bin, says := range map[string]string{"/bin/true": "is not agent-fleet", other: "speaks pi-intercom v3"} {
		_, err := runCLI(t, "install", "--dry-run", "--binary", bin)
		require.Equal(t, exitUsage, exitCode(err), "%s: %v", bin, err)
		require.Contains(t, err.Error(), says)
	}
}
