package factory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	contribsystemd "github.com/agent-fleet/agent-fleet/contrib/systemd"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/federation"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
	"github.com/agent-fleet/agent-fleet/units"
)

// Install and Uninstall put agent-fleet's systemd user units (contrib/
// systemd) in place and take them away again: the broker's socket
// activation (or with Node the node service) and the janitor's timer.

// InstallOptions configure Install and Uninstall.
type InstallOptions struct {
	// DryRun shows what would be written and done and changes nothing.
	DryRun bool
	// Binary is the executable the units run; default this one.
	Binary string
	// Out receives the lines for people as they happen; nil: none (--json
	// prints the report instead).
	Out io.Writer
	// Node installs agent-fleet-node.service (`agent-fleet node run`, the
	// broker joined to other hosts) in place of the broker's socket
	// activation. An installed node service keeps this on.
	Node bool
}

// InstallReport is what Install or Uninstall did, or with --dry-run would
// do, as --json prints it.
type InstallReport struct {
	DryRun  bool   `json:"dryRun"`
	UnitDir string `json:"unitDir"`
	// Files are the unit files: change is create, update, unchanged or
	// remove.
	Files []UnitFileChange `json:"files"`
	// Units are the units started or stopped: state is listening (the
	// broker socket), waiting (enabled; another broker serves the socket
	// until it exits), active (the timer) or stopped.
	Units []UnitOutcome `json:"units"`
}

// UnitFileChange is one unit file and what happened to it.
type UnitFileChange struct {
	Path   string `json:"path"`
	Change string `json:"change"`
}

// UnitOutcome is one unit and the state it was left in.
type UnitOutcome struct {
	Name   string `json:"name"`
	State  string `json:"state"`
	Detail string `json:"detail,omitempty"`
}

// installOutput prints the lines for people and collects the report.
type installOutput struct {
	out io.Writer
	rep InstallReport
}

func newInstallOutput(opts InstallOptions, dir string) *installOutput {
	return &installOutput{out: opts.Out, rep: InstallReport{DryRun: opts.DryRun, UnitDir: dir,
		Files: []UnitFileChange{}, Units: []UnitOutcome{}}}
}

// say prints a line for people (nothing without Out).
func (o *installOutput) say(format string, args ...any) {
	if o.out != nil {
		fmt.Fprintf(o.out, format, args...)
	}
}

func (o *installOutput) file(path, change string) {
	o.rep.Files = append(o.rep.Files, UnitFileChange{Path: path, Change: change})
}

func (o *installOutput) unit(name, state, detail string) {
	o.rep.Units = append(o.rep.Units, UnitOutcome{Name: name, State: state, Detail: detail})
}

// errNeedsLinux: the units are systemd user units.
var errNeedsLinux = errors.New("agent-fleet's units are systemd user units: install needs Linux with systemd")

// installBinary is the executable the units run: --binary, else this one,
// refusing a throwaway build (go run, go test), and a --binary that is not
// an agent-fleet speaking this intercom protocol (isAgentFleet).
func installBinary(ctx context.Context, flag string) (string, error) {
	bin := flag
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", err
		}
		bin = exe
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		return "", err
	}
	if resolved, err := filepath.EvalSymlinks(bin); err == nil {
		bin = resolved
	}
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", Usage(fmt.Errorf("%s is not an executable", bin))
	}
	if flag == "" && strings.Contains(bin, "/go-build") { // go run, go test
		return "", Usage(fmt.Errorf("this agent-fleet is a temporary build (%s): install it first (go install ./cmd/agent-fleet), or pass --binary PATH", bin))
	}
	if flag != "" {
		if err := isAgentFleet(ctx, bin); err != nil {
			return "", Usage(err)
		}
	}
	return bin, nil
}

// isAgentFleet runs `bin version --json` (10 s at most) and checks that it
// reports this intercom protocol: the units would otherwise run a program
// that is not agent-fleet, or one the broker's clients cannot talk to.
func isAgentFleet(ctx context.Context, bin string) error {
	want := wire.ProtocolLabel()
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(vctx, bin, "version", "--json").Output()
	var v struct {
		Protocol string `json:"protocol"`
	}
	switch {
	case err != nil || json.Unmarshal(out, &v) != nil || v.Protocol == "":
		return fmt.Errorf("%s is not agent-fleet: `%s version --json` did not report its protocol", bin, filepath.Base(bin))
	case v.Protocol != want:
		return fmt.Errorf("%s speaks %s, this agent-fleet %s: install a matching build", bin, v.Protocol, want)
	}
	return nil
}

// Install writes the unit files to the user unit directory, reloads the
// user manager, and enables and starts the broker socket and the cleanup
// timer (with DryRun: says what it would do). A broker already serving the
// socket is not disturbed: the socket then waits for it to exit. Errors:
// units.ErrUnsupported off Linux, ErrNoSystemd without a user manager,
// a usage error for a bad binary, socket path or unit directory.
func (f *Factory) Install(ctx context.Context, opts InstallOptions) (*InstallReport, error) {
	if f.GOOS != "linux" {
		return nil, fmt.Errorf("%w (%s)", units.ErrUnsupported, errNeedsLinux)
	}
	bin, err := installBinary(ctx, opts.Binary)
	if err != nil {
		return nil, err
	}
	p, err := f.Paths()
	if err != nil {
		return nil, err
	}
	if err := intercom.CheckSocketPath(p.BrokerSocket()); err != nil {
		return nil, Usage(err)
	}
	params := contribsystemd.Params{Binary: bin, AgentDir: p.AgentDir, BrokerSocket: p.BrokerSocket()}
	if err := params.Check(); err != nil {
		return nil, Usage(err)
	}
	dir, err := units.UserUnitDir(f.Env)
	if err != nil {
		return nil, err
	}
	var m *units.Systemd
	if opts.DryRun {
		// Say now what install would refuse; without a manager, show the plan.
		if dm, err := connectManager(ctx); err == nil {
			err = checkUnitPath(ctx, dm, dir, "install")
			dm.Close()
			if err != nil {
				return nil, err
			}
		}
	} else {
		// Before writing anything: the units must land where this user
		// manager looks, or enabling them fails with files left behind.
		if m, err = connectManager(ctx); err != nil {
			return nil, err
		}
		defer m.Close()
		if err := checkUnitPath(ctx, m, dir, "install"); err != nil {
			return nil, err
		}
	}
	names, node := contribsystemd.Names, opts.Node
	if _, err := os.Stat(filepath.Join(dir, contribsystemd.NodeService)); err == nil {
		node = true // installed with --node: stays so until uninstall
	}
	if node {
		names = contribsystemd.NodeNames
		if _, err := os.Stat(federation.ConfigPath(p)); err != nil {
			return nil, Usage(fmt.Errorf("%w at %s (run agent-fleet node init first)", ErrNoNodeConfig, federation.ConfigPath(p)))
		}
	}
	o := newInstallOutput(opts, dir)
	files := contribsystemd.Render(params)
	verb := map[bool]string{true: "would ", false: ""}[opts.DryRun]
	changed := map[string]bool{}
	for _, name := range names {
		path := filepath.Join(dir, name)
		old, err := os.ReadFile(path)
		switch {
		case err == nil && bytes.Equal(old, files[name]):
			o.say("%s: unchanged\n", path)
			o.file(path, "unchanged")
			continue
		case err == nil:
			o.say("%s: %supdate\n", path, verb)
			o.file(path, "update")
		default:
			o.say("%s: %screate\n", path, verb)
			o.file(path, "create")
		}
		changed[name] = true
		if opts.DryRun {
			o.say("---\n%s---\n", files[name])
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := writeUnitFile(path, files[name]); err != nil {
			return nil, err
		}
	}
	switch {
	case opts.DryRun && node:
		o.say("Would reload the user manager, stop and disable %s, enable and start %s (runs %s node run on %s) and %s (runs %s cleanup --execute on %s every 5 min).\n",
			contribsystemd.BrokerSocket, contribsystemd.NodeService, bin, p.AgentDir, contribsystemd.CleanupTimer, bin, p.AgentDir)
		o.unit(contribsystemd.NodeService, "active", p.BrokerSocket())
	case opts.DryRun:
		o.say("Would reload the user manager, enable and start %s (listening on %s) and %s (runs %s cleanup --execute on %s every 5 min).\n",
			contribsystemd.BrokerSocket, p.BrokerSocket(), contribsystemd.CleanupTimer, bin, p.AgentDir)
		o.unit(contribsystemd.BrokerSocket, "listening", p.BrokerSocket())
	}
	if opts.DryRun {
		o.unit(contribsystemd.CleanupTimer, "active", "every 5 min")
		return &o.rep, nil
	}
	if err := m.Reload(ctx); err != nil {
		return nil, err
	}
	if node {
		if err := installNode(ctx, o, m, p, changed); err != nil {
			return nil, err
		}
	} else {
		if err := m.EnableUnitFiles(ctx, contribsystemd.Enabled...); err != nil {
			return nil, err
		}
		if err := installBrokerSocket(ctx, o, m, p, changed); err != nil {
			return nil, err
		}
	}
	if changed[contribsystemd.CleanupTimer] || changed[contribsystemd.CleanupService] {
		// A running timer keeps its old schedule until restarted.
		_ = m.StopUnit(ctx, contribsystemd.CleanupTimer)
	}
	if err := m.StartUnit(ctx, contribsystemd.CleanupTimer); err != nil {
		return nil, err
	}
	o.say("%s: enabled and active (runs %s cleanup --execute on %s every 5 min)\n",
		contribsystemd.CleanupTimer, bin, p.AgentDir)
	o.unit(contribsystemd.CleanupTimer, "active", "every 5 min")
	return &o.rep, nil
}

// errUnitPath: the user manager does not read the unit directory install
// writes to (exit 2: set XDG_CONFIG_HOME to the manager's).
var errUnitPath = errors.New("the user manager does not load unit files from this directory")

// checkUnitPath refuses a unit directory the manager does not search: a
// manager reads the configuration directory of the XDG_CONFIG_HOME it
// started with, which a shell may not share (sudo, su, a private manager).
func checkUnitPath(ctx context.Context, m *units.Systemd, dir, verb string) error {
	path, err := m.UnitPath(ctx)
	if err != nil {
		return err
	}
	for _, d := range path {
		if filepath.Clean(d) == filepath.Clean(dir) {
			return nil
		}
		a, err1 := os.Stat(d)
		b, err2 := os.Stat(dir)
		if err1 == nil && err2 == nil && os.SameFile(a, b) {
			return nil
		}
	}
	var user []string
	for _, d := range path {
		if strings.HasSuffix(filepath.Clean(d), "/systemd/user") && !strings.HasPrefix(d, "/etc/") && !strings.HasPrefix(d, "/usr/") && !strings.HasPrefix(d, "/run/systemd/") && !strings.HasPrefix(d, "/lib/") {
			user = append(user, d)
		}
	}
	hint := ""
	if len(user) > 0 {
		hint = fmt.Sprintf("; it reads %s: run %s with XDG_CONFIG_HOME=%s", strings.Join(user, ", "), verb, strings.TrimSuffix(filepath.Clean(user[0]), "/systemd/user"))
	}
	return Usage(fmt.Errorf("%w: %s%s", errUnitPath, dir, hint))
}

// installBrokerSocket starts the broker's socket unit, or says why it waits.
// A running socket whose unit changed is restarted (with the broker it
// started: its sessions reconnect); a broker that serves the socket without
// it (started on demand, or a TypeScript one) is never disturbed: the
// enabled socket takes over once it exits, through the factory's broker starter.
func installBrokerSocket(ctx context.Context, o *installOutput, m *units.Systemd, p intercom.Paths, changed map[string]bool) error {
	sock, svc := contribsystemd.BrokerSocket, contribsystemd.BrokerService
	st, err := m.Unit(ctx, sock)
	if err != nil {
		return err
	}
	if st.Running() {
		svcState, _ := m.Unit(ctx, svc)
		switch {
		case changed[sock]:
			// A new address needs a new socket; the broker serving the old one
			// goes with it.
			if err := m.StopUnit(ctx, sock); err != nil {
				return err
			}
			if err := m.StopUnit(ctx, svc); err != nil && !errors.Is(err, units.ErrUnitNotFound) {
				return err
			}
		case changed[svc] && svcState.Running():
			o.say("%s: the running broker (pid %d) keeps its old settings until it exits; the next activation uses the new ones\n",
				svc, svcState.MainPID)
		}
	}
	if st, err = m.Unit(ctx, sock); err != nil {
		return err
	}
	if !st.Running() {
		if h, detail := intercom.ProbeBroker(ctx, p); h != intercom.Unreachable {
			who := "an incompatible broker (" + detail + ")"
			if h == intercom.Compatible {
				if stats, err := (&intercom.LocalAPIClient{Path: p.LocalAPISocket()}).Stats(ctx); err == nil {
					who = fmt.Sprintf("agent-fleet's broker (pid %d, %s)", stats.PID, fleet.Plural(stats.Sessions, "session"))
				} else {
					who = "a compatible broker without agent-fleet's local API (a TypeScript adapter's)"
				}
			}
			o.say("%s: enabled; not started yet because %s serves %s: the socket takes over when it exits (5 s after its last session leaves), when the next client starts a broker\n",
				sock, who, p.BrokerSocket())
			o.unit(sock, "waiting", who+" serves "+p.BrokerSocket())
			return nil
		}
		_ = m.ResetFailed(ctx, svc)
		_ = m.ResetFailed(ctx, sock)
		if err := m.StartUnit(ctx, sock); err != nil {
			return fmt.Errorf("start %s: %w", sock, err)
		}
	}
	o.say("%s: enabled and listening on %s (the broker starts on the first connection)\n", sock, p.BrokerSocket())
	o.unit(sock, "listening", p.BrokerSocket())
	return nil
}

// ErrNoNodeConfig: install --node needs the node configuration that
// `agent-fleet node init` writes.
var ErrNoNodeConfig = errors.New("no node configuration")

// installNode enables and starts the node service in place of the broker's
// socket, which it stops and disables (the node serves broker.sock itself).
// A node service whose unit changed is restarted; a broker started on
// demand that serves the socket is taken over by the node, its sessions
// reconnecting.
func installNode(ctx context.Context, o *installOutput, m *units.Systemd, p intercom.Paths, changed map[string]bool) error {
	sock, node := contribsystemd.BrokerSocket, contribsystemd.NodeService
	if st, err := m.Unit(ctx, sock); err == nil && (st.Running() || st.UnitFileState == "enabled") {
		if err := m.StopUnit(ctx, sock); err != nil && !errors.Is(err, units.ErrUnitNotFound) {
			return err
		}
		if err := m.DisableUnitFiles(ctx, sock); err != nil && !errors.Is(err, units.ErrUnitNotFound) {
			return err
		}
		o.say("%s: stopped and disabled (the node serves %s)\n", sock, p.BrokerSocket())
		o.unit(sock, "stopped", "the node serves "+p.BrokerSocket())
	}
	if err := m.EnableUnitFiles(ctx, contribsystemd.NodeEnabled...); err != nil {
		return err
	}
	if st, err := m.Unit(ctx, node); err == nil && st.Running() && changed[node] {
		if err := m.StopUnit(ctx, node); err != nil {
			return err
		}
	}
	_ = m.ResetFailed(ctx, node)
	if err := m.StartUnit(ctx, node); err != nil {
		return fmt.Errorf("start %s: %w", node, err)
	}
	o.say("%s: enabled and active (agent-fleet node run on %s; agent-fleet node status shows whether it joined)\n", node, p.AgentDir)
	o.unit(node, "active", p.BrokerSocket())
	return nil
}

// Uninstall stops, disables and removes what Install added, and reloads
// the user manager (with DryRun: says what it would do).
func (f *Factory) Uninstall(ctx context.Context, opts InstallOptions) (*InstallReport, error) {
	if f.GOOS != "linux" {
		return nil, fmt.Errorf("%w (%s)", units.ErrUnsupported, errNeedsLinux)
	}
	dir, err := units.UserUnitDir(f.Env)
	if err != nil {
		return nil, err
	}
	o := newInstallOutput(opts, dir)
	var present []string
	for _, name := range contribsystemd.NodeNames {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			present = append(present, filepath.Join(dir, name))
		}
	}
	if len(present) == 0 {
		// Not here; but the user manager may read another directory, where
		// an install with its XDG_CONFIG_HOME put them: say which.
		if dm, err := connectManager(ctx); err == nil {
			err = checkUnitPath(ctx, dm, dir, "uninstall")
			dm.Close()
			if err != nil {
				return nil, err
			}
		}
		o.say("agent-fleet's units are not installed in %s.\n", dir)
		return &o.rep, nil
	}
	// Socket before service: a connection in between would start the
	// broker again. Timer before the janitor it runs.
	stopOrder := []string{contribsystemd.BrokerSocket, contribsystemd.BrokerService, contribsystemd.CleanupTimer, contribsystemd.CleanupService}
	enabled := contribsystemd.Enabled
	if _, err := os.Lstat(filepath.Join(dir, contribsystemd.NodeService)); err == nil {
		stopOrder = append([]string{contribsystemd.NodeService}, stopOrder...)
		enabled = append([]string{contribsystemd.NodeService}, enabled...)
	}
	if opts.DryRun {
		o.say("Would stop %s, disable %s, remove:\n  %s\nand reload the user manager.\n",
			strings.Join(stopOrder, ", "), strings.Join(enabled, " and "), strings.Join(present, "\n  "))
		for _, name := range stopOrder {
			o.unit(name, "stopped", "")
		}
		for _, path := range present {
			o.file(path, "remove")
		}
		return &o.rep, nil
	}
	m, err := connectManager(ctx)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	for _, name := range stopOrder {
		if err := m.StopUnit(ctx, name); err != nil && !errors.Is(err, units.ErrUnitNotFound) {
			return nil, err
		}
		o.say("stopped %s\n", name)
		o.unit(name, "stopped", "")
	}
	if err := m.DisableUnitFiles(ctx, enabled...); err != nil && !errors.Is(err, units.ErrUnitNotFound) {
		return nil, err
	}
	for _, path := range present {
		if err := os.Remove(path); err != nil {
			return nil, err
		}
		o.say("removed %s\n", path)
		o.file(path, "remove")
	}
	if err := m.Reload(ctx); err != nil {
		return nil, err
	}
	for _, name := range stopOrder {
		_ = m.ResetFailed(ctx, name) // leave no failed unit behind
	}
	return &o.rep, nil
}

// writeUnitFile writes a unit file atomically, 0644 as systemctl does.
func writeUnitFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// connectManager reaches the caller's user manager (exit 6 without one).
func connectManager(ctx context.Context) (*units.Systemd, error) {
	m, err := units.Connect(ctx, units.Options{})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoSystemd, err)
	}
	return m, nil
}
