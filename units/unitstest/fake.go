package unitstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agent-fleet/agent-fleet/units"
)

// FakeOutcome is what a fake service's main process does once started.
type FakeOutcome struct {
	// ExecFails: the command cannot be executed. With Type=exec or notify
	// the start job fails; with Type=simple the unit fails right after.
	// The unit ends with Result "exit-code" and ExecMainStatus 203, like
	// systemd's EXIT_EXEC.
	ExecFails bool
	// Exits: the main process exits at once with ExitStatus (after READY
	// for Type=notify, so the start job is "done").
	Exits      bool
	ExitStatus int
}

// CommandBehavior is the Fake's default idea of what a command does, close
// enough to systemd for tests: an Argv[0] that is not an executable file
// fails to execute; "/bin/true" exits 0 and "/bin/false" exits 1; a shell
// running just "exit N" (e.g. ["/bin/sh", "-c", "exit 3"]) exits N; anything
// else runs until stopped.
func CommandBehavior(spec units.ServiceSpec) FakeOutcome {
	if fi, err := os.Stat(spec.Argv[0]); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return FakeOutcome{ExecFails: true}
	}
	switch filepath.Base(spec.Argv[0]) {
	case "true":
		return FakeOutcome{Exits: true}
	case "false":
		return FakeOutcome{Exits: true, ExitStatus: 1}
	case "sh", "bash", "dash":
		if len(spec.Argv) == 3 && spec.Argv[1] == "-c" {
			if n, ok := strings.CutPrefix(strings.TrimSpace(spec.Argv[2]), "exit "); ok {
				if status, err := strconv.Atoi(n); err == nil {
					return FakeOutcome{Exits: true, ExitStatus: status}
				}
			}
		}
	}
	return FakeOutcome{}
}

// FakeOptions configure NewFake.
type FakeOptions struct {
	// Behavior decides what each started service does; default
	// CommandBehavior.
	Behavior func(units.ServiceSpec) FakeOutcome
	// Version is the reported systemd version; default "252.38-fake".
	Version string
	// FreezeUnsupported makes FreezeUnit and ThawUnit fail with
	// units.ErrFreezeUnsupported, as systemd does on hosts whose cgroup
	// hierarchies are not all unified.
	FreezeUnsupported bool
}

// Fake is an in-memory units.Manager for fast tests. No process runs:
// MainPID values are invented, ControlGroup is where systemd would put the
// unit below a manager at the cgroup root, and the Behavior decides whether
// the "main process" runs, exits or fails to execute. Units follow the state
// rules RunConformance checks against a real user manager
// (collection, reset of failed units, exit records, job results). Tests
// drive it further with Exit, SetUnreachable and SetWedged. Safe for
// concurrent use.
type Fake struct {
	opts FakeOptions

	mu          sync.Mutex
	units       map[string]*fakeUnit
	nextPID     int
	unreachable bool
	wedged      bool
	closed      bool
}

type fakeUnit struct {
	spec      units.ServiceSpec
	state     units.UnitState
	startedAt time.Time // the main process's start, in µs as systemd keeps it
}

var _ units.Manager = (*Fake)(nil)

// NewFake returns an empty fake manager.
func NewFake(opts FakeOptions) *Fake {
	if opts.Behavior == nil {
		opts.Behavior = CommandBehavior
	}
	if opts.Version == "" {
		opts.Version = "252.38-fake"
	}
	return &Fake{opts: opts, units: map[string]*fakeUnit{}, nextPID: 40000}
}

// SetUnreachable makes every call fail with units.ErrManagerUnreachable
// (true) or work again (false).
func (f *Fake) SetUnreachable(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unreachable = v
}

// SetWedged makes every call block until its ctx ends and then fail with
// units.ErrTimeout, like a SIGSTOPped manager (true), or answer again (false).
func (f *Fake) SetWedged(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wedged = v
}

// Exit makes a running unit's main process exit with status now.
// units.ErrUnitNotFound if the unit is not running.
func (f *Fake) Exit(name string, status int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.units[name]
	if u == nil || !u.state.Running() {
		return fmt.Errorf("exit unit %s: %w", name, units.ErrUnitNotFound)
	}
	f.end(u, units.CodeExited, status)
	return nil
}

// enter checks the fault switches; it returns with f.mu held on success.
func (f *Fake) enter(ctx context.Context, what string) error {
	ctx, cancel := withDefaultDeadline(ctx, defaultTimeout)
	defer cancel()
	started := time.Now()
	for {
		f.mu.Lock()
		switch {
		case f.closed:
			f.mu.Unlock()
			return fmt.Errorf("%s: %w: connection closed by Close", what, units.ErrManagerUnreachable)
		case f.unreachable:
			f.mu.Unlock()
			return fmt.Errorf("%s: %w: fake manager set unreachable", what, units.ErrManagerUnreachable)
		case !f.wedged:
			return nil
		}
		f.mu.Unlock()
		if err := sleepFor(ctx, 5*time.Millisecond); err != nil {
			return timeoutError(ctx, what, started)
		}
	}
}

// StartService implements units.Manager.
func (f *Fake) StartService(ctx context.Context, spec units.ServiceSpec) (units.UnitState, error) {
	spec, err := spec.WithDefaults()
	if err != nil {
		return units.UnitState{}, err
	}
	what := "start unit " + spec.Name
	if err := f.enter(ctx, what); err != nil {
		return units.UnitState{}, err
	}
	defer f.mu.Unlock()
	if u := f.units[spec.Name]; u != nil {
		if u.state.ActiveState != "failed" {
			return u.state, fmt.Errorf("%s: %w: Unit %s was already loaded or has a fragment file.", what, units.ErrUnitExists, spec.Name)
		}
		delete(f.units, spec.Name) // reset-failed, as Systemd does
	}
	f.nextPID++
	u := &fakeUnit{spec: spec, state: units.UnitState{
		Name: spec.Name, LoadState: "loaded", ActiveState: "active", SubState: "running", Result: "success",
		MainPID: f.nextPID, ControlGroup: slicePath(spec.Slice) + "/" + spec.Name,
		InvocationID: randomHex(16), Description: spec.Description, FreezerState: "running",
	}, startedAt: time.Now().Truncate(time.Microsecond)}
	f.units[spec.Name] = u
	for _, out := range []string{string(spec.Stdout), string(spec.Stderr)} {
		// systemd opens append: files as it starts the main process.
		if path, ok := strings.CutPrefix(out, "append:"); ok {
			if fh, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
				fh.Close()
			}
		}
	}
	switch out := f.opts.Behavior(spec); {
	case out.ExecFails:
		f.end(u, units.CodeExited, 203)
		if spec.Type != units.ServiceSimple {
			return f.stateLocked(spec.Name), &units.JobError{Unit: spec.Name, Job: "start", Result: "failed", State: f.stateLocked(spec.Name)}
		}
	case out.Exits:
		f.end(u, units.CodeExited, out.ExitStatus)
	}
	return f.stateLocked(spec.Name), nil
}

// end records the main process's end and applies systemd's result and
// collection rules. Called with f.mu held.
func (f *Fake) end(u *fakeUnit, code, status int) {
	st := &u.state
	st.MainPID, st.ControlGroup, st.FreezerState = 0, "", "running"
	st.ExecMainCode, st.ExecMainStatus = code, status
	clean := (code == units.CodeExited && status == 0) ||
		(code == units.CodeKilled && slices.Contains([]int{int(syscall.SIGHUP), int(syscall.SIGINT), int(syscall.SIGTERM), int(syscall.SIGPIPE)}, status))
	switch {
	case clean:
		st.Result, st.ActiveState, st.SubState = "success", "inactive", "dead"
	case code == units.CodeExited:
		st.Result, st.ActiveState, st.SubState = "exit-code", "failed", "failed"
	default:
		st.Result, st.ActiveState, st.SubState = "signal", "failed", "failed"
	}
	if u.spec.ExitRecord != "" {
		exitCode, exitStatus := "exited", strconv.Itoa(status)
		if code != units.CodeExited {
			exitCode, exitStatus = "killed", signalName(status)
		}
		rec := fmt.Sprintf("SERVICE_RESULT=%s\nEXIT_CODE=%s\nEXIT_STATUS=%s\nINVOCATION_ID=%s\n", st.Result, exitCode, exitStatus, st.InvocationID)
		_ = os.WriteFile(u.spec.ExitRecord, []byte(rec), 0o600)
	}
	if st.ActiveState == "inactive" || u.spec.Collect == units.CollectInactiveOrFailed {
		delete(f.units, u.spec.Name)
	}
}

// signalName is the name systemd puts in $EXIT_STATUS for a signal.
func signalName(sig int) string {
	names := map[int]string{1: "HUP", 2: "INT", 3: "QUIT", 6: "ABRT", 9: "KILL", 10: "USR1", 12: "USR2", 13: "PIPE", 15: "TERM"}
	if n, ok := names[sig]; ok {
		return n
	}
	return strconv.Itoa(sig)
}

// stateLocked is Unit without the locking and fault switches.
func (f *Fake) stateLocked(name string) units.UnitState {
	if u := f.units[name]; u != nil {
		return u.state
	}
	return units.UnitState{Name: name, LoadState: "not-found", ActiveState: "inactive", SubState: "dead", Description: name}
}

// StopUnit implements units.Manager.
func (f *Fake) StopUnit(ctx context.Context, name string) error {
	what := "stop unit " + name
	if err := f.enter(ctx, what); err != nil {
		return err
	}
	defer f.mu.Unlock()
	u := f.units[name]
	if u == nil {
		return fmt.Errorf("%s: %w: Unit %s not loaded.", what, units.ErrUnitNotFound, name)
	}
	units.JobQueued(ctx)
	if u.state.Running() {
		f.end(u, units.CodeKilled, int(syscall.SIGTERM))
	}
	return nil
}

// StopTimeout implements units.Manager: the spec's, else (and for a unit
// that is not loaded) systemd's default of 90 s.
func (f *Fake) StopTimeout(ctx context.Context, name string) (time.Duration, error) {
	if err := f.enter(ctx, "read the stop timeout of "+name); err != nil {
		return 0, err
	}
	defer f.mu.Unlock()
	if u := f.units[name]; u != nil && u.spec.StopTimeout > 0 {
		return u.spec.StopTimeout, nil
	}
	return 90 * time.Second, nil
}

// ControlPID implements units.Manager: 0, for the fake runs no control
// process (its stop ends a unit at once, ExecStopPost included).
func (f *Fake) ControlPID(ctx context.Context, name string) (int, error) {
	if err := f.enter(ctx, "read the control process of "+name); err != nil {
		return 0, err
	}
	f.mu.Unlock()
	return 0, nil
}

// ResetFailed implements units.Manager.
func (f *Fake) ResetFailed(ctx context.Context, name string) error {
	if err := f.enter(ctx, "reset failed unit "+name); err != nil {
		return err
	}
	defer f.mu.Unlock()
	if u := f.units[name]; u != nil && u.state.ActiveState == "failed" {
		delete(f.units, name)
	}
	return nil
}

// KillUnit implements units.Manager: the "main process" dies of sig unless sig
// is 0.
func (f *Fake) KillUnit(ctx context.Context, name string, sig syscall.Signal) error {
	what := fmt.Sprintf("kill unit %s with signal %d", name, int(sig))
	if err := f.enter(ctx, what); err != nil {
		return err
	}
	defer f.mu.Unlock()
	u := f.units[name]
	if u == nil {
		return fmt.Errorf("%s: %w: Unit %s not loaded.", what, units.ErrUnitNotFound, name)
	}
	if u.state.Running() && sig != 0 {
		f.end(u, units.CodeKilled, int(sig))
	}
	return nil
}

// FreezeUnit implements units.Manager: the unit's FreezerState becomes
// "frozen" (its "processes" are invented, so nothing else changes).
func (f *Fake) FreezeUnit(ctx context.Context, name string) error {
	return f.setFreezer(ctx, "freeze", name, "frozen")
}

// ThawUnit implements units.Manager.
func (f *Fake) ThawUnit(ctx context.Context, name string) error {
	return f.setFreezer(ctx, "thaw", name, "running")
}

func (f *Fake) setFreezer(ctx context.Context, what, name, state string) error {
	what += " unit " + name
	if err := f.enter(ctx, what); err != nil {
		return err
	}
	defer f.mu.Unlock()
	u := f.units[name]
	switch {
	case u == nil:
		return fmt.Errorf("%s: %w: Unit %s not loaded.", what, units.ErrUnitNotFound, name)
	case f.opts.FreezeUnsupported:
		return fmt.Errorf("%s: %w: Unit '%s' does not support freezing.", what, units.ErrFreezeUnsupported, name)
	case u.state.Running():
		u.state.FreezerState = state
	}
	return nil
}

// Unit implements units.Manager.
func (f *Fake) Unit(ctx context.Context, name string) (units.UnitState, error) {
	if err := f.enter(ctx, "read unit "+name); err != nil {
		return units.UnitState{Name: name}, err
	}
	defer f.mu.Unlock()
	return f.stateLocked(name), nil
}

// ServiceEnvironment implements units.Manager.
func (f *Fake) ServiceEnvironment(ctx context.Context, name string) ([]string, error) {
	if err := f.enter(ctx, "read the environment of "+name); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	u, ok := f.units[name]
	if !ok || f.stateLocked(name).Gone() {
		return nil, fmt.Errorf("read the environment of %s: %w", name, units.ErrUnitNotFound)
	}
	return slices.Clone(u.spec.Env), nil
}

// ServiceCommand implements units.Manager: the spec's argv and working
// directory, and when the unit started.
func (f *Fake) ServiceCommand(ctx context.Context, name string) (units.ServiceCommand, error) {
	if err := f.enter(ctx, "read the command of "+name); err != nil {
		return units.ServiceCommand{}, err
	}
	defer f.mu.Unlock()
	u, ok := f.units[name]
	if !ok || f.stateLocked(name).Gone() {
		return units.ServiceCommand{}, fmt.Errorf("read the command of %s: %w", name, units.ErrUnitNotFound)
	}
	return units.ServiceCommand{Argv: slices.Clone(u.spec.Argv), WorkingDirectory: u.spec.WorkingDirectory, StartedAt: u.startedAt}, nil
}

// ListUnits implements units.Manager (patterns are path.Match globs).
func (f *Fake) ListUnits(ctx context.Context, patterns ...string) ([]units.UnitSummary, error) {
	if err := f.enter(ctx, "list units"); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	var out []units.UnitSummary
	for name, u := range f.units {
		match := len(patterns) == 0
		for _, p := range patterns {
			if ok, _ := path.Match(p, name); ok {
				match = true
			}
		}
		if match {
			out = append(out, units.UnitSummary{Name: name, Description: u.state.Description,
				LoadState: u.state.LoadState, ActiveState: u.state.ActiveState, SubState: u.state.SubState})
		}
	}
	slices.SortFunc(out, func(a, b units.UnitSummary) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Version implements units.Manager.
func (f *Fake) Version(ctx context.Context) (units.Version, error) {
	if err := f.enter(ctx, "read manager property Version"); err != nil {
		return units.Version{}, err
	}
	defer f.mu.Unlock()
	return units.ParseVersion(f.opts.Version), nil
}

// Ping implements units.Manager.
func (f *Fake) Ping(ctx context.Context) error {
	if err := f.enter(ctx, "ping the user manager"); err != nil {
		return err
	}
	f.mu.Unlock()
	return nil
}

// Close implements units.Manager; later calls fail with
// units.ErrManagerUnreachable.
func (f *Fake) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// The helpers below are the fake's own small copies of units' unexported
// ones, so that units exports nothing for its fake but
// ServiceSpec.WithDefaults.

// defaultTimeout bounds a call whose ctx has no deadline, as
// units.Options.DefaultTimeout's default does.
const defaultTimeout = 30 * time.Second

// withDefaultDeadline gives ctx a deadline of d if it has none.
func withDefaultDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// timeoutError reports that ctx ended while waiting for what, worded as
// units.Systemd words it.
func timeoutError(ctx context.Context, what string, started time.Time) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
	return fmt.Errorf("%s: %w: no answer within %s; the user manager may be stopped or overloaded, and the outcome is unknown (%w)",
		what, units.ErrTimeout, time.Since(started).Round(time.Millisecond), ctx.Err())
}

func sleepFor(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// slicePath is the cgroup path of a slice below the manager's root: systemd
// nests slices by the dashes in their names, so "agent-fleet.slice" lives at
// "/agent.slice/agent-fleet.slice" ("-.slice" is the root itself).
func slicePath(slice string) string {
	name := strings.TrimSuffix(slice, ".slice")
	if name == "" || name == "-" {
		return ""
	}
	var path strings.Builder
	parts := strings.Split(name, "-")
	for i := range parts {
		path.WriteString("/" + strings.Join(parts[:i+1], "-") + ".slice")
	}
	return path.String()
}

// Connect is a connection to the fake's user manager: it acts on the same
// units, and its Close ends only itself, as a D-Bus connection to a real
// manager does. Code that connects per command (the CLI's factory) gets one
// per command.
func (f *Fake) Connect() units.Manager { return &fakeConn{Fake: f} }

// fakeConn is a Fake behind a connection of its own.
type fakeConn struct {
	*Fake
	mu     sync.Mutex
	closed bool
}

func (c *fakeConn) check(what string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("%s: %w: connection closed by Close", what, units.ErrManagerUnreachable)
	}
	return nil
}

// Close implements units.Manager for the connection alone. Safe twice.
func (c *fakeConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}

// StartService implements units.Manager.
func (c *fakeConn) StartService(ctx context.Context, spec units.ServiceSpec) (units.UnitState, error) {
	if err := c.check("start unit " + spec.Name); err != nil {
		return units.UnitState{}, err
	}
	return c.Fake.StartService(ctx, spec)
}

// StopUnit implements units.Manager.
func (c *fakeConn) StopUnit(ctx context.Context, name string) error {
	if err := c.check("stop unit " + name); err != nil {
		return err
	}
	return c.Fake.StopUnit(ctx, name)
}

// StopTimeout implements units.Manager.
func (c *fakeConn) StopTimeout(ctx context.Context, name string) (time.Duration, error) {
	if err := c.check("read the stop timeout of " + name); err != nil {
		return 0, err
	}
	return c.Fake.StopTimeout(ctx, name)
}

// ControlPID implements units.Manager.
func (c *fakeConn) ControlPID(ctx context.Context, name string) (int, error) {
	if err := c.check("read the control process of " + name); err != nil {
		return 0, err
	}
	return c.Fake.ControlPID(ctx, name)
}

// ResetFailed implements units.Manager.
func (c *fakeConn) ResetFailed(ctx context.Context, name string) error {
	if err := c.check("reset unit " + name); err != nil {
		return err
	}
	return c.Fake.ResetFailed(ctx, name)
}

// KillUnit implements units.Manager.
func (c *fakeConn) KillUnit(ctx context.Context, name string, sig syscall.Signal) error {
	if err := c.check("kill unit " + name); err != nil {
		return err
	}
	return c.Fake.KillUnit(ctx, name, sig)
}

// FreezeUnit implements units.Manager.
func (c *fakeConn) FreezeUnit(ctx context.Context, name string) error {
	if err := c.check("freeze unit " + name); err != nil {
		return err
	}
	return c.Fake.FreezeUnit(ctx, name)
}

// ThawUnit implements units.Manager.
func (c *fakeConn) ThawUnit(ctx context.Context, name string) error {
	if err := c.check("thaw unit " + name); err != nil {
		return err
	}
	return c.Fake.ThawUnit(ctx, name)
}

// Unit implements units.Manager.
func (c *fakeConn) Unit(ctx context.Context, name string) (units.UnitState, error) {
	if err := c.check("read unit " + name); err != nil {
		return units.UnitState{}, err
	}
	return c.Fake.Unit(ctx, name)
}

// ListUnits implements units.Manager.
func (c *fakeConn) ListUnits(ctx context.Context, patterns ...string) ([]units.UnitSummary, error) {
	if err := c.check("list units"); err != nil {
		return nil, err
	}
	return c.Fake.ListUnits(ctx, patterns...)
}

// ServiceEnvironment implements units.Manager.
func (c *fakeConn) ServiceEnvironment(ctx context.Context, name string) ([]string, error) {
	if err := c.check("read the environment of " + name); err != nil {
		return nil, err
	}
	return c.Fake.ServiceEnvironment(ctx, name)
}

// ServiceCommand implements units.Manager.
func (c *fakeConn) ServiceCommand(ctx context.Context, name string) (units.ServiceCommand, error) {
	if err := c.check("read the command of " + name); err != nil {
		return units.ServiceCommand{}, err
	}
	return c.Fake.ServiceCommand(ctx, name)
}

// Version implements units.Manager.
func (c *fakeConn) Version(ctx context.Context) (units.Version, error) {
	if err := c.check("read the systemd version"); err != nil {
		return units.Version{}, err
	}
	return c.Fake.Version(ctx)
}

// Ping implements units.Manager.
func (c *fakeConn) Ping(ctx context.Context) error {
	if err := c.check("ping the user manager"); err != nil {
		return err
	}
	return c.Fake.Ping(ctx)
}
