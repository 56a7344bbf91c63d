package units

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
func CommandBehavior(spec ServiceSpec) FakeOutcome {
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
	Behavior func(ServiceSpec) FakeOutcome
	// Version is the reported systemd version; default "252.38-fake".
	Version string
}

// Fake is an in-memory Manager for fast tests. No process runs: MainPID
// values are invented, ControlGroup is where systemd would put the unit
// below a manager at the cgroup root, and the Behavior decides whether the
// "main process" runs, exits or fails to execute. Units follow the state
// rules unitstest.RunConformance checks against a real user manager
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
	spec  ServiceSpec
	state UnitState
}

var _ Manager = (*Fake)(nil)

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

// SetUnreachable makes every call fail with ErrManagerUnreachable (true)
// or work again (false).
func (f *Fake) SetUnreachable(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unreachable = v
}

// SetWedged makes every call block until its ctx ends and then fail with
// ErrTimeout, like a SIGSTOPped manager (true), or answer again (false).
func (f *Fake) SetWedged(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wedged = v
}

// Exit makes a running unit's main process exit with status now.
// ErrUnitNotFound if the unit is not running.
func (f *Fake) Exit(name string, status int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.units[name]
	if u == nil || !u.state.Running() {
		return fmt.Errorf("exit unit %s: %w", name, ErrUnitNotFound)
	}
	f.end(u, CodeExited, status)
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
			return fmt.Errorf("%s: %w: connection closed by Close", what, ErrManagerUnreachable)
		case f.unreachable:
			f.mu.Unlock()
			return fmt.Errorf("%s: %w: fake manager set unreachable", what, ErrManagerUnreachable)
		case !f.wedged:
			return nil
		}
		f.mu.Unlock()
		if err := sleepFor(ctx, 5*time.Millisecond); err != nil {
			return timeoutError(ctx, what, started)
		}
	}
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

// StartService implements Manager.
func (f *Fake) StartService(ctx context.Context, spec ServiceSpec) (UnitState, error) {
	spec, err := spec.withDefaults()
	if err != nil {
		return UnitState{}, err
	}
	what := "start unit " + spec.Name
	if err := f.enter(ctx, what); err != nil {
		return UnitState{}, err
	}
	defer f.mu.Unlock()
	if u := f.units[spec.Name]; u != nil {
		if u.state.ActiveState != "failed" {
			return u.state, fmt.Errorf("%s: %w: Unit %s was already loaded or has a fragment file.", what, ErrUnitExists, spec.Name)
		}
		delete(f.units, spec.Name) // reset-failed, as Systemd does
	}
	f.nextPID++
	u := &fakeUnit{spec: spec, state: UnitState{
		Name: spec.Name, LoadState: "loaded", ActiveState: "active", SubState: "running", Result: "success",
		MainPID: f.nextPID, ControlGroup: slicePath(spec.Slice) + "/" + spec.Name,
		InvocationID: randomHex(16), Description: spec.Description,
	}}
	f.units[spec.Name] = u
	switch out := f.opts.Behavior(spec); {
	case out.ExecFails:
		f.end(u, CodeExited, 203)
		if spec.Type != ServiceSimple {
			return f.stateLocked(spec.Name), &JobError{Unit: spec.Name, Job: "start", Result: "failed", State: f.stateLocked(spec.Name)}
		}
	case out.Exits:
		f.end(u, CodeExited, out.ExitStatus)
	}
	return f.stateLocked(spec.Name), nil
}

// end records the main process's end and applies systemd's result and
// collection rules. Called with f.mu held.
func (f *Fake) end(u *fakeUnit, code, status int) {
	st := &u.state
	st.MainPID, st.ControlGroup = 0, ""
	st.ExecMainCode, st.ExecMainStatus = code, status
	clean := (code == CodeExited && status == 0) ||
		(code == CodeKilled && slices.Contains([]int{int(syscall.SIGHUP), int(syscall.SIGINT), int(syscall.SIGTERM), int(syscall.SIGPIPE)}, status))
	switch {
	case clean:
		st.Result, st.ActiveState, st.SubState = "success", "inactive", "dead"
	case code == CodeExited:
		st.Result, st.ActiveState, st.SubState = "exit-code", "failed", "failed"
	default:
		st.Result, st.ActiveState, st.SubState = "signal", "failed", "failed"
	}
	if u.spec.ExitRecord != "" {
		exitCode, exitStatus := "exited", strconv.Itoa(status)
		if code != CodeExited {
			exitCode, exitStatus = "killed", signalName(status)
		}
		rec := fmt.Sprintf("SERVICE_RESULT=%s\nEXIT_CODE=%s\nEXIT_STATUS=%s\nINVOCATION_ID=%s\n", st.Result, exitCode, exitStatus, st.InvocationID)
		_ = os.WriteFile(u.spec.ExitRecord, []byte(rec), 0o600)
	}
	if st.ActiveState == "inactive" || u.spec.Collect == CollectInactiveOrFailed {
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
func (f *Fake) stateLocked(name string) UnitState {
	if u := f.units[name]; u != nil {
		return u.state
	}
	return UnitState{Name: name, LoadState: "not-found", ActiveState: "inactive", SubState: "dead", Description: name}
}

// StopUnit implements Manager.
func (f *Fake) StopUnit(ctx context.Context, name string) error {
	what := "stop unit " + name
	if err := f.enter(ctx, what); err != nil {
		return err
	}
	defer f.mu.Unlock()
	u := f.units[name]
	if u == nil {
		return fmt.Errorf("%s: %w: Unit %s not loaded.", what, ErrUnitNotFound, name)
	}
	if u.state.Running() {
		f.end(u, CodeKilled, int(syscall.SIGTERM))
	}
	return nil
}

// ResetFailed implements Manager.
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

// KillUnit implements Manager: the "main process" dies of sig unless sig
// is 0.
func (f *Fake) KillUnit(ctx context.Context, name string, sig syscall.Signal) error {
	what := fmt.Sprintf("kill unit %s with signal %d", name, int(sig))
	if err := f.enter(ctx, what); err != nil {
		return err
	}
	defer f.mu.Unlock()
	u := f.units[name]
	if u == nil {
		return fmt.Errorf("%s: %w: Unit %s not loaded.", what, ErrUnitNotFound, name)
	}
	if u.state.Running() && sig != 0 {
		f.end(u, CodeKilled, int(sig))
	}
	return nil
}

// Unit implements Manager.
func (f *Fake) Unit(ctx context.Context, name string) (UnitState, error) {
	if err := f.enter(ctx, "read unit "+name); err != nil {
		return UnitState{Name: name}, err
	}
	defer f.mu.Unlock()
	return f.stateLocked(name), nil
}

// ServiceEnvironment implements Manager.
func (f *Fake) ServiceEnvironment(ctx context.Context, name string) ([]string, error) {
	if err := f.enter(ctx, "read the environment of "+name); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	u, ok := f.units[name]
	if !ok || f.stateLocked(name).Gone() {
		return nil, fmt.Errorf("read the environment of %s: %w", name, ErrUnitNotFound)
	}
	return slices.Clone(u.spec.Env), nil
}

// ListUnits implements Manager (patterns are path.Match globs).
func (f *Fake) ListUnits(ctx context.Context, patterns ...string) ([]UnitSummary, error) {
	if err := f.enter(ctx, "list units"); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	var out []UnitSummary
	for name, u := range f.units {
		match := len(patterns) == 0
		for _, p := range patterns {
			if ok, _ := path.Match(p, name); ok {
				match = true
			}
		}
		if match {
			out = append(out, UnitSummary{Name: name, Description: u.state.Description,
				LoadState: u.state.LoadState, ActiveState: u.state.ActiveState, SubState: u.state.SubState})
		}
	}
	slices.SortFunc(out, func(a, b UnitSummary) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Version implements Manager.
func (f *Fake) Version(ctx context.Context) (Version, error) {
	if err := f.enter(ctx, "read manager property Version"); err != nil {
		return Version{}, err
	}
	defer f.mu.Unlock()
	return ParseVersion(f.opts.Version), nil
}

// Ping implements Manager.
func (f *Fake) Ping(ctx context.Context) error {
	if err := f.enter(ctx, "ping the user manager"); err != nil {
		return err
	}
	f.mu.Unlock()
	return nil
}

// Close implements Manager; later calls fail with ErrManagerUnreachable.
func (f *Fake) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}
