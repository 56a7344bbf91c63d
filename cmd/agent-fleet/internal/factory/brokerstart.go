package factory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	contribsystemd "github.com/agent-fleet/agent-fleet/contrib/systemd"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/units"
)

// BrokerStarter starts a broker that does not live in the caller's process
// tree or cgroup (docs/architecture.md "Broker placement"): through the installed
// socket unit (socket activation) when there is one for this agent
// directory, else as its own transient unit when a user manager is
// reachable, else with a double fork and setsid. Its output goes to the
// bounded broker.log in every case.
func (f *Factory) BrokerStarter() intercom.BrokerStarter { return f.brokerStarter(nil) }

// brokerStarter is BrokerStarter for `agent-fleet broker` with extra
// arguments (a sandbox's --max-sessions); an installed socket unit's
// broker takes none.
func (f *Factory) brokerStarter(args []string) intercom.BrokerStarter {
	return func(ctx context.Context, p intercom.Paths) error {
		err := f.startBrokerUnit(ctx, p, args)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errNoUserManager) {
			return err
		}
		return f.detachBroker(ctx, p, args)
	}
}

// errNoUserManager: no user manager to place the broker in; fall back.
var errNoUserManager = errors.New("no reachable systemd user manager")

// BrokerUnitName is the broker's unit for an agent directory:
// agent-fleet-broker-<first 12 hex of sha256(agentDir)>.service.
func BrokerUnitName(agentDir string) string {
	sum := sha256.Sum256([]byte(agentDir))
	return "agent-fleet-broker-" + hex.EncodeToString(sum[:])[:12] + ".service"
}

// startBrokerUnit runs the broker as a transient service of the user
// manager, collected when it ends (a failed one is reset before a start).
func (f *Factory) startBrokerUnit(ctx context.Context, p intercom.Paths, args []string) error {
	if !hasUserBus(f.Env) {
		return errNoUserManager
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	m, err := units.Connect(ctx, units.Options{DefaultTimeout: 3 * time.Second, Getenv: f.Env})
	if err != nil {
		return fmt.Errorf("%w: %v", errNoUserManager, err)
	}
	defer m.Close()
	if err := m.Ping(ctx); err != nil {
		return fmt.Errorf("%w: %v", errNoUserManager, err)
	}
	if installed, err := startBrokerSocket(ctx, m, p); installed || err != nil {
		return err
	}
	exe, err := f.Exe()
	if err != nil {
		return err
	}
	logf, err := intercom.PrepareBrokerLog(p) // trims an overgrown log
	if err != nil {
		return err
	}
	logf.Close()
	env := append([]string{intercom.AgentDirEnv + "=" + p.AgentDir}, f.ChildEnv...)
	for _, k := range []string{"PATH", "HOME", "LANG", "TZ", AskTimeoutEnv} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	_, err = m.StartService(ctx, units.ServiceSpec{
		Name:             BrokerUnitName(p.AgentDir),
		Description:      "agent-fleet intercom broker for " + p.AgentDir,
		Argv:             append([]string{exe, "broker"}, args...),
		WorkingDirectory: "/",
		Env:              env,
		// The broker must not inherit identities or scopes from the user
		// manager's environment; it has none of its own.
		UnsetEnv:    []string{"AGENT_INTERCOM_SESSION_ID", "AGENT_INTERCOM_SCOPE_ID", "AGENT_INTERCOM_SESSION_NAME"},
		Type:        units.ServiceExec,
		LogFile:     p.BrokerLog(),
		StopTimeout: 10 * time.Second,
	})
	if errors.Is(err, units.ErrUnitExists) {
		return nil // already running: EnsureBroker waits for it to answer
	}
	return err
}

// startBrokerSocket starts the broker's socket unit when `agent-fleet
// install` put one in place for this agent directory: the connection that
// follows starts the broker by socket activation. installed is false when no
// socket unit listens on p's broker socket. With the socket unit present
// nothing else may bind that path (it would replace systemd's socket), so a
// socket that listens while no broker answers is only reset and waited for.
func startBrokerSocket(ctx context.Context, m *units.Systemd, p intercom.Paths) (installed bool, err error) {
	sock, svc := contribsystemd.BrokerSocket, contribsystemd.BrokerService
	st, err := m.Unit(ctx, sock)
	if err != nil || st.LoadState != "loaded" {
		return false, nil
	}
	listen, err := m.SocketListen(ctx, sock)
	if err != nil || !slices.Contains(listen, p.BrokerSocket()) {
		return false, nil
	}
	_ = m.ResetFailed(ctx, svc) // a failed broker must not block the next activation
	if st.Running() {
		return true, nil
	}
	_ = m.ResetFailed(ctx, sock)
	if err := m.StartUnit(ctx, sock); err != nil {
		return true, fmt.Errorf("start %s: %w", sock, err)
	}
	return true, nil
}

// hasUserBus is the quick test before any D-Bus dial: a bus address in
// the environment or the bus socket in XDG_RUNTIME_DIR.
func hasUserBus(getenv func(string) string) bool {
	if strings.TrimSpace(getenv("DBUS_SESSION_BUS_ADDRESS")) != "" {
		return true
	}
	if dir := getenv("XDG_RUNTIME_DIR"); dir != "" {
		if fi, err := os.Stat(dir + "/bus"); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return true
		}
	}
	return false
}

// detachBroker runs `agent-fleet broker --detach`, which starts the real
// broker in a new session and exits at once, so the broker is reparented
// away from the caller and never becomes the caller's zombie.
func (f *Factory) detachBroker(ctx context.Context, p intercom.Paths, args []string) error {
	exe, err := f.Exe()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, exe, append([]string{"broker", "--detach"}, args...)...)
	cmd.Env = append(append(os.Environ(), f.ChildEnv...), intercom.AgentDirEnv+"="+p.AgentDir)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// LaunchDetachedBroker is the middle of the double fork (`agent-fleet
// broker --detach`): start the broker with args in its own session, stdin
// from /dev/null and output to broker.log, and return.
func (f *Factory) LaunchDetachedBroker(p intercom.Paths, args []string) error {
	if err := intercom.EnsureDir(p.Dir); err != nil {
		return err
	}
	logf, err := intercom.PrepareBrokerLog(p)
	if err != nil {
		return err
	}
	defer logf.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	exe, err := f.Exe()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, append([]string{"broker"}, args...)...)
	cmd.Env = append(os.Environ(), intercom.AgentDirEnv+"="+p.AgentDir)
	cmd.Dir = "/"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
	cmd.SysProcAttr = detachAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start broker: %w", err)
	}
	return cmd.Process.Release()
}
