package factory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/units"
)

// Sandbox is what the demo and the spawn benchmark run in: a fresh agent
// directory, set as PI_CODING_AGENT_DIR in this process so that the broker
// and the workers it starts inherit it, and a systemd user manager — the
// user's own, or a private one booted for the run — or none. Close undoes
// all of it, touching only what the run created. Not safe for concurrent
// use, except where a method says it is.
type Sandbox struct {
	Paths intercom.Paths
	// Private is the manager booted for this run (nil: the user's own, or
	// none).
	Private *units.PrivateManager
	// Probe describes the manager in use.
	Probe units.ProbeResult
	// OwnErr says why the user's own manager was not used.
	OwnErr error
	// Missing says why there is no manager at all (nil when there is one).
	Missing error
	// Fleet is the fleet of the run's caller, once OpenFleet ran.
	Fleet *FleetEnv
	// Workers were spawned here (Spawn, SpawnAs); Close stops those not
	// Stopped. Read them only while no spawn or stop runs.
	Workers []*fleet.Worker
	Stopped map[string]bool
	// CloseErr is what Close could not undo.
	CloseErr error
	// BrokerArgs are extra arguments of the `agent-fleet broker` the run
	// starts (a benchmark's --max-sessions); set before EnsureBroker.
	BrokerArgs []string

	f             *Factory
	mu            sync.Mutex      // guards Workers and Stopped
	units         *units.Systemd  // the sandbox's own connection (nil without a manager)
	bare          map[string]bool // transient units started here directly (name → stopped)
	brokerStarted bool
	restoreEnv    []func()
}

// CleanupTimeout bounds a Sandbox's Close after success, failure or
// Ctrl-C.
const CleanupTimeout = 45 * time.Second

// NewSandbox creates the agent directory (prefix names it) and points
// PI_CODING_AGENT_DIR at it. Socket paths must stay under 107 bytes, so a
// long TMPDIR falls back to /tmp.
func (f *Factory) NewSandbox(prefix string) (*Sandbox, error) {
	sb := &Sandbox{f: f, Stopped: map[string]bool{}, bare: map[string]bool{}}
	var dir string
	for _, parent := range []string{"", "/tmp"} {
		d, err := os.MkdirTemp(parent, prefix)
		if err != nil {
			return nil, err
		}
		if err := os.Chmod(d, 0o700); err != nil {
			os.RemoveAll(d)
			return nil, err
		}
		p := intercom.NewPaths(d)
		if intercom.CheckSocketPath(p.HolderSocket("demo-worker")) == nil && intercom.CheckSocketPath(p.LocalAPISocket()) == nil {
			dir = d
			break
		}
		os.RemoveAll(d)
	}
	if dir == "" {
		return nil, errors.New("no temporary directory short enough for intercom socket paths")
	}
	sb.Paths = intercom.NewPaths(dir)
	sb.setenv(intercom.AgentDirEnv, dir)
	return sb, nil
}

// setenv sets a variable of this process until Close.
func (sb *Sandbox) setenv(k, v string) {
	old, had := os.LookupEnv(k)
	_ = os.Setenv(k, v)
	sb.restoreEnv = append(sb.restoreEnv, func() {
		if had {
			_ = os.Setenv(k, old)
		} else {
			_ = os.Unsetenv(k)
		}
	})
}

// FindManager uses the user's own manager when it answers; otherwise, when
// allowed and possible (root, PID 1 not systemd), boots a private one named
// label. With neither, Missing says what is missing and nil is returned; a
// boot that was possible but failed is an error.
func (sb *Sandbox) FindManager(ctx context.Context, allowBoot bool, label string) error {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	probe, err := units.Probe(pctx, units.Options{})
	cancel()
	if err == nil {
		sb.Probe = probe
		return sb.connect(ctx)
	}
	sb.OwnErr = err
	switch {
	case errors.Is(err, units.ErrUnsupported):
		sb.Missing = err
		return nil
	case !allowBoot:
		sb.Missing = fmt.Errorf("%w\nA private user manager was not booted: --no-boot forbids it", err)
		return nil
	}
	if bootErr := units.CanBootPrivateManager(); bootErr != nil {
		sb.Missing = fmt.Errorf("%w\nA private user manager cannot be booted either: %v", err, bootErr)
		return nil
	}
	pm, err := units.BootPrivateManager(ctx, units.BootOptions{Name: label})
	if err != nil {
		return err
	}
	sb.Private = pm
	for _, kv := range pm.Env() {
		k, v, _ := strings.Cut(kv, "=")
		sb.setenv(k, v)
	}
	pctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if sb.Probe, err = units.Probe(pctx, units.Options{Bus: pm.Bus}); err != nil {
		return err
	}
	return sb.connect(ctx)
}

// Unavailable is Missing as a command's error: units.ErrUnsupported off
// Linux, else ErrNoSystemd (exit 6); nil when a manager is in use.
func (sb *Sandbox) Unavailable() error {
	switch {
	case sb.Missing == nil:
		return nil
	case errors.Is(sb.Missing, units.ErrUnsupported):
		return sb.Missing
	default:
		return fmt.Errorf("%w: %v", ErrNoSystemd, sb.Missing)
	}
}

// connect opens the sandbox's own connection to the manager in use.
func (sb *Sandbox) connect(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := units.Connect(cctx, units.Options{Bus: sb.Probe.Bus, DefaultTimeout: 30 * time.Second})
	if err != nil {
		return err
	}
	sb.units = m
	return nil
}

// EnsureBroker starts the run's broker (Close stops it).
func (sb *Sandbox) EnsureBroker(ctx context.Context) error {
	sb.brokerStarted = true
	return intercom.EnsureBroker(ctx, sb.Paths, sb.f.brokerStarter(sb.BrokerArgs))
}

// OpenSession registers a session of this process with the run's broker,
// starting one when none answers (Close stops it).
func (sb *Sandbox) OpenSession(ctx context.Context, id intercom.Identity) (*intercom.Session, error) {
	sb.brokerStarted = true
	return intercom.OpenSession(ctx, intercom.SessionConfig{Paths: sb.Paths, Identity: id, Start: sb.f.brokerStarter(sb.BrokerArgs)})
}

// OpenFleet opens the fleet of the run's caller.
func (sb *Sandbox) OpenFleet(ctx context.Context) (*FleetEnv, error) {
	fe, err := sb.f.Fleet(ctx)
	if err != nil {
		return nil, err
	}
	sb.Fleet = fe
	return fe, nil
}

// Spawn spawns a worker of the run's caller and records it for Close.
func (sb *Sandbox) Spawn(ctx context.Context, req fleet.SpawnRequest) (*fleet.Worker, error) {
	w, err := sb.Fleet.Fleet.Spawn(ctx, req)
	sb.track(w)
	return w, err
}

// SpawnAs spawns a worker as another manager the way a CLI verb does it:
// open that manager's fleet in the run's agent directory, spawn, close.
// It records the worker for Close. Safe for concurrent use.
func (sb *Sandbox) SpawnAs(ctx context.Context, manager string, req fleet.SpawnRequest) (*fleet.Worker, error) {
	fe, err := sb.f.FleetAs(ctx, sb.Paths, manager)
	if err != nil {
		return nil, err
	}
	defer fe.Close()
	w, err := fe.Fleet.Spawn(ctx, req)
	sb.track(w)
	return w, err
}

func (sb *Sandbox) track(w *fleet.Worker) {
	if w == nil {
		return
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.Workers = append(sb.Workers, w)
}

// Stop stops a worker of the run as its manager — through the run's
// fleet, or one opened for the stop like SpawnAs's — and records that it
// was stopped. Safe for concurrent use.
func (sb *Sandbox) Stop(ctx context.Context, id string) (*fleet.StopResult, error) {
	fe := sb.Fleet
	sb.mu.Lock()
	manager := fe.Caller
	for _, w := range sb.Workers {
		if w.ID == id {
			manager = w.Manager
		}
	}
	sb.mu.Unlock()
	if manager != fe.Caller {
		var err error
		if fe, err = sb.f.FleetAs(ctx, sb.Paths, manager); err != nil {
			return nil, err
		}
		defer fe.Close()
	}
	res, err := fe.Fleet.Stop(ctx, id)
	if err == nil {
		sb.mu.Lock()
		sb.Stopped[id] = true
		sb.mu.Unlock()
	}
	return res, err
}

// CountUnits is how many loaded units match the glob patterns: one
// ListUnits call on the sandbox's own connection.
func (sb *Sandbox) CountUnits(ctx context.Context, patterns ...string) (int, error) {
	if sb.units == nil {
		return 0, sb.Unavailable()
	}
	list, err := sb.units.ListUnits(ctx, patterns...)
	return len(list), err
}

// unitsEndWithin bounds the wait for stopped units to be collected: a
// stop returns while systemd still writes a worker's exit record (its
// ExecStopPost), and only then unloads the unit.
const unitsEndWithin = 15 * time.Second

// UnitsLeft is how many loaded units match the glob patterns once those
// still ending have had unitsEndWithin to be collected: ListUnits calls on
// the sandbox's own connection, every 20 ms while any is left.
func (sb *Sandbox) UnitsLeft(ctx context.Context, patterns ...string) (n int, err error) {
	untilCollected(ctx, time.Now().Add(unitsEndWithin), func() bool {
		n, err = sb.CountUnits(ctx, patterns...)
		return err != nil || n == 0
	})
	if err == nil && n > 0 {
		err = ctx.Err()
	}
	return n, err
}

// untilCollected calls done every 20 ms until it says true, the deadline
// has passed or ctx ends.
func untilCollected(ctx context.Context, deadline time.Time, done func() bool) {
	for !done() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ManagerPID is the pid of the user manager in use (0 when unknown).
func (sb *Sandbox) ManagerPID(ctx context.Context) int {
	if sb.Private != nil {
		return sb.Private.PID
	}
	if sb.units == nil {
		return 0
	}
	pid, _ := sb.units.ManagerPID(ctx)
	return pid
}

// CgroupProcs lists the processes of a cgroup (a unit's ControlGroup).
func (sb *Sandbox) CgroupProcs(cgroup string) ([]int, error) {
	cg, err := units.OpenCgroups("")
	if err != nil {
		return nil, err
	}
	return cg.Procs(cgroup)
}

// BrokerUnitRunning is the run's broker unit when it runs as one.
func (sb *Sandbox) BrokerUnitRunning(ctx context.Context) (string, bool) {
	if sb.units == nil {
		return "", false
	}
	st, err := sb.units.Unit(ctx, BrokerUnitName(sb.Paths.AgentDir))
	return st.Name, err == nil && st.Running()
}

// BareUnit is a transient service started directly, outside the fleet.
type BareUnit struct {
	Name, Description string
	Argv, Env         []string
	Dir               string
	// Notify makes it Type=notify (else Type=exec).
	Notify     bool
	MaxRuntime time.Duration
	LogFile    string
	// ExitRecord, when set, gives it a worker's exit record (its
	// ExecStopPost).
	ExitRecord string
}

// StartBareUnit starts u and waits for its start job; Close stops it if
// StopBareUnit did not.
func (sb *Sandbox) StartBareUnit(ctx context.Context, u BareUnit) error {
	typ := units.ServiceExec
	if u.Notify {
		typ = units.ServiceNotify
	}
	sb.bare[u.Name] = false
	_, err := sb.units.StartService(ctx, units.ServiceSpec{Name: u.Name, Description: u.Description, Argv: u.Argv, Env: u.Env,
		WorkingDirectory: u.Dir, Type: typ, MaxRuntime: u.MaxRuntime, LogFile: u.LogFile, ExitRecord: u.ExitRecord})
	return err
}

// StopBareUnit stops a unit StartBareUnit started and waits for its job.
func (sb *Sandbox) StopBareUnit(ctx context.Context, name string) error {
	if err := sb.units.StopUnit(ctx, name); err != nil {
		return err
	}
	sb.bare[name] = true
	return nil
}

// StopWorkers stops every worker spawned here and proves its cgroup empty,
// telling say what it did.
func (sb *Sandbox) StopWorkers(ctx context.Context, say func(format string, args ...any)) error {
	cg, err := units.OpenCgroups("")
	if err != nil {
		return err
	}
	var errs []error
	sb.mu.Lock()
	var pending []*fleet.Worker
	for _, w := range sb.Workers {
		if !sb.Stopped[w.ID] {
			pending = append(pending, w)
		}
	}
	sb.mu.Unlock()
	for _, w := range pending {
		began := time.Now()
		res, err := sb.Stop(ctx, w.ID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		took := time.Since(began).Round(time.Millisecond)
		if res.AlreadyEnded {
			say("%s had already ended (%s).", w.ID, res.Worker.State)
		}
		cgroup := res.Worker.ControlGroup
		if cgroup == "" {
			cgroup = w.ControlGroup
		}
		pids, control, perr := sb.leftovers(ctx, cg, w.Unit, cgroup, res.Control)
		onlyControl := control != 0
		switch {
		case perr != nil:
			errs = append(errs, fmt.Errorf("read the cgroup of %s: %w", w.ID, perr))
		case len(pids) > 0 && !onlyControl:
			errs = append(errs, fmt.Errorf("%s: processes are still in %s: %v", w.ID, cgroup, pids))
		case !res.AlreadyEnded:
			killed := ""
			if len(res.Killed) > 0 {
				killed = fmt.Sprintf("; processes %v outlived the unit's stop and were killed through the cgroup", res.Killed)
			}
			say("Stopped %s in %s: state %s%s.", w.ID, took, res.Worker.State, killed)
			if onlyControl {
				say("  cgroup %s: nothing of the worker's — verified; systemd's exit-record process (pid %d) is finishing.", cgroup, control)
			} else {
				say("  cgroup %s: 0 processes — verified empty.", cgroup)
			}
		}
	}
	return errors.Join(errs...)
}

// leftovers reads a stopped unit's cgroup. A stop may return while
// systemd's own control process (the exit record's ExecStopPost) runs
// there (fleet.StopResult.Control), or before systemd forked it: control
// is that process when it is all the cgroup holds (0 otherwise), as the
// stop named it or the manager names it now. The cgroup is read again
// when the manager names none, for the control process may have ended
// between the two reads.
func (sb *Sandbox) leftovers(ctx context.Context, cg *units.Cgroups, unit, cgroup string, known int) (pids []int, control int, err error) {
	for range 2 {
		if pids, err = cg.Procs(cgroup); err != nil || len(pids) != 1 {
			return pids, 0, err
		}
		if pids[0] == known {
			return pids, known, nil
		}
		if sb.units == nil {
			return pids, 0, nil
		}
		pid, err := sb.units.ControlPID(ctx, unit)
		if err != nil {
			return pids, 0, nil
		}
		if pid == pids[0] {
			return pids, pid, nil
		}
	}
	return pids, 0, nil
}

// Close stops what the run started — its workers, its bare units, its
// broker, its private manager — checks that none of their units is left,
// removes the agent directory and restores the environment. It returns
// what it did, for narration; failures are in CloseErr.
func (sb *Sandbox) Close(ctx context.Context) []string {
	var said []string
	var errs []error
	if sb.Fleet != nil {
		var pending []string
		for _, w := range sb.Workers {
			if !sb.Stopped[w.ID] {
				pending = append(pending, w.ID)
			}
		}
		if len(pending) > 0 {
			if err := sb.StopWorkers(ctx, func(string, ...any) {}); err != nil {
				errs = append(errs, err)
			} else {
				said = append(said, fmt.Sprintf("Stopped what was still running (%s), with verified cleanup.", listShort(pending, 10)))
			}
		}
		sb.Fleet.Close()
	}
	if sb.units != nil {
		for name, stopped := range sb.bare {
			if stopped {
				continue
			}
			if err := sb.units.StopUnit(ctx, name); err != nil && !errors.Is(err, units.ErrUnitNotFound) {
				errs = append(errs, err)
			}
			_ = sb.units.ResetFailed(ctx, name)
		}
	}
	if sb.brokerStarted {
		line, err := sb.stopBroker(ctx)
		if err != nil {
			errs = append(errs, err)
		} else if line != "" {
			said = append(said, line)
		}
	}
	if sb.units != nil {
		var left []string
		names := []string{BrokerUnitName(sb.Paths.AgentDir)}
		for _, w := range sb.Workers {
			names = append(names, w.Unit)
		}
		for name := range sb.bare {
			names = append(names, name)
		}
		// A unit stopped just now may still be writing its exit record,
		// or be about to be unloaded.
		deadline := time.Now().Add(unitsEndWithin)
		for _, name := range names {
			var st units.UnitState
			var err error
			untilCollected(ctx, deadline, func() bool {
				st, err = sb.units.Unit(ctx, name)
				return err != nil || st.Gone()
			})
			switch {
			case err != nil:
				errs = append(errs, err)
			case !st.Gone():
				left = append(left, name+" ("+st.ActiveState+")")
			}
		}
		if len(left) > 0 {
			errs = append(errs, fmt.Errorf("units left behind: %s", strings.Join(left, ", ")))
		} else {
			said = append(said, fmt.Sprintf("No unit of the run is left (%d checked by name).", len(names)))
		}
		_ = sb.units.Close()
	}
	if sb.Private != nil {
		pid := sb.Private.PID
		if err := sb.Private.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop the private user manager: %w", err))
		} else {
			said = append(said, fmt.Sprintf("Stopped the private user manager (pid %d) and removed its runtime directory and cgroup.", pid))
		}
	}
	if err := os.RemoveAll(sb.Paths.AgentDir); err != nil {
		errs = append(errs, err)
	} else {
		said = append(said, "Removed "+sb.Paths.AgentDir+".")
	}
	for i := len(sb.restoreEnv) - 1; i >= 0; i-- {
		sb.restoreEnv[i]()
	}
	sb.restoreEnv = nil
	sb.CloseErr = errors.Join(errs...)
	return said
}

// listShort joins names, the first n of them and how many more.
func listShort(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// stopBroker stops the broker of the run's agent directory: its unit when
// it runs as one, else through its local API; then waits until nothing
// answers on its socket.
func (sb *Sandbox) stopBroker(ctx context.Context) (string, error) {
	unit := BrokerUnitName(sb.Paths.AgentDir)
	if sb.units != nil {
		if st, err := sb.units.Unit(ctx, unit); err == nil && !st.Gone() {
			if err := sb.units.StopUnit(ctx, unit); err != nil && !errors.Is(err, units.ErrUnitNotFound) {
				return "", fmt.Errorf("stop the broker unit %s: %w", unit, err)
			}
			_ = sb.units.ResetFailed(ctx, unit)
			return "Stopped the broker unit " + unit + ".", nil
		}
	}
	pid, _ := os.ReadFile(sb.Paths.PIDFile())
	api := &intercom.LocalAPIClient{Path: sb.Paths.LocalAPISocket()}
	if err := api.Shutdown(ctx); err != nil {
		if errors.Is(err, intercom.ErrNoLocalAPI) {
			return "", nil // it had already gone (idle exit)
		}
		return "", fmt.Errorf("shut down the broker: %w", err)
	}
	for {
		h, _ := intercom.ProbeBroker(ctx, sb.Paths)
		_, err := os.Stat(sb.Paths.PIDFile())
		if h == intercom.Unreachable && errors.Is(err, os.ErrNotExist) {
			return fmt.Sprintf("Shut down the broker (pid %s).", strings.TrimSpace(string(pid))), nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("the broker (pid %s) did not exit: %w", strings.TrimSpace(string(pid)), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
