package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
	"github.com/agent-fleet/agent-fleet/units"
)

// SpawnRequest describes a worker to start.
type SpawnRequest struct {
	ID string
	// Kind is "exec" (the default: Command runs under the shim) or a
	// coding-agent kind (claude, codex, opencode, pi: the shim runs the
	// harness's turns for Task and for inbound messages; Command, if given,
	// names the harness executable and extra arguments).
	Kind string
	Role string
	Cwd  string // "" = the caller's working directory
	Task string
	// Env are extra "NAME=value" variables (the values are never recorded).
	Env                       []string
	Model, Effort, Permission string
	// Lease is the idle lease; 0 = the default for the caller (none for
	// an operator).
	Lease time.Duration
	// MaxRuntime stops the worker after this long; 0 = no limit.
	MaxRuntime time.Duration
	// TurnTimeout bounds one turn of a coding-agent worker; 0 is
	// harness.DefaultTurnTimeout.
	TurnTimeout time.Duration
	// PermissionWait is how long a coding-agent worker whose harness
	// relays permission prompts (harness.RelaysPermissions) waits for the
	// manager's answer before it denies; 0 is
	// harness.DefaultPermissionWait, at most harness.MaxPermissionWait.
	PermissionWait time.Duration
	// Budget bounds a coding-agent worker's spending (Budget); nil bounds
	// are none.
	Budget BudgetChange
	// Limits are the unit's memory, CPU and task limits (zero fields:
	// none). A limit the user manager cannot apply is refused
	// (ErrLimitUnsupported) before anything starts.
	Limits units.Limits
	// Command is the argv of an exec worker; argv[0] is resolved with the
	// caller's PATH.
	Command []string
	// Worktree gives the worker a git worktree of its own, made from the
	// HEAD of the repository Cwd is in, as its working directory; Branch
	// is its branch (created from HEAD when it does not exist; "" =
	// agent-fleet/<id>, which must not exist yet). A Branch implies
	// Worktree.
	Worktree bool
	Branch   string
	// Profile is the sandbox (ParseProfile); "" is DefaultProfile of the
	// kind and permission. AllowDegraded runs a named profile without what
	// the user manager cannot enforce (recorded as ProfileDegraded)
	// instead of failing with ErrProfileUnenforceable.
	Profile       string
	AllowDegraded bool
}

// Spawn starts a worker and returns once its shim signalled READY: the
// worker's intercom session is registered, and an exec worker's command
// was executed and has run for Config.ReadyGrace or ended within it (then
// its exit is recorded with READY). A worker that does not get there, or
// whose command ended non-zero within the grace, is a *SpawnError
// (ErrSpawnFailed, exit 1) with the record kept: failed, or exited with
// its status ("started; it has already exited (exit 1)"). A clean exit
// within the grace is a worker that exited, not an error; one that fails
// after the grace is a worker that exited later. Either returns once its
// shim has exited.
//
// The id is the worker's session id: the caller's own is ErrInvalidRequest,
// and one that a session connected to the broker holds (other than a
// worker of that id) is ErrConflict, both before any record or unit
// (refuseConnectedSession), as is an id whose unit still runs.
//
// With Worktree, the worktree is made first (planWorktree's refusals:
// ErrNotRepository, ErrBranchCheckedOut, ErrWorktreeConflict,
// ErrInvalidRequest for a bad branch name) and discarded again when the
// spawn is refused before its record exists; once reserved it is the
// record's, and stays with a failed spawn's record.
func (f *Fleet) Spawn(ctx context.Context, req SpawnRequest) (*Worker, error) {
	if err := ValidID(req.ID); err != nil {
		return nil, err
	}
	if req.ID == f.cfg.Caller {
		return nil, fmt.Errorf("spawn %s: %w: a worker's id is its intercom session id, and %q is yours: choose another id", req.ID, ErrInvalidRequest, req.ID)
	}
	if err := socketPathsFit(f.cfg.Paths, req.ID); err != nil {
		return nil, fmt.Errorf("spawn %s: %w", req.ID, err)
	}
	if err := f.writable(); err != nil {
		return nil, err
	}
	kind := req.Kind
	switch {
	case kind == "" || kind == "exec":
		kind = "exec"
		if len(req.Command) == 0 {
			return nil, fmt.Errorf("spawn %s: %w: an exec worker needs a command to run", req.ID, ErrInvalidRequest)
		}
		// A permission that would not be applied must not look applied.
		for _, o := range []struct{ name, v string }{{"model", req.Model}, {"effort", req.Effort}, {"permission", req.Permission}} {
			if o.v != "" {
				return nil, fmt.Errorf("spawn %s: %w: %s is for the coding-agent kinds (claude, codex, opencode, pi); an exec worker runs its command as given", req.ID, ErrInvalidRequest, o.name)
			}
		}
		if req.TurnTimeout != 0 {
			return nil, fmt.Errorf("spawn %s: %w: turn timeout is for the coding-agent kinds; use max runtime for an exec worker", req.ID, ErrInvalidRequest)
		}
		if req.PermissionWait != 0 {
			return nil, fmt.Errorf("spawn %s: %w: permission wait is for the coding-agent kinds; an exec worker asks nobody for permission", req.ID, ErrInvalidRequest)
		}
	case harness.IsKind(kind):
	default:
		return nil, fmt.Errorf("spawn %s: %w %q (want exec, claude, codex, opencode or pi)", req.ID, ErrUnsupportedKind, req.Kind)
	}
	if err := req.Budget.check(kind); err != nil {
		return nil, fmt.Errorf("spawn %s: %w", req.ID, err)
	}
	if err := f.checkLimits(ctx, req.Limits); err != nil {
		return nil, fmt.Errorf("spawn %s: %w", req.ID, err)
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = f.cfg.CallerCwd
	}
	if !filepath.IsAbs(cwd) {
		cwd = filepath.Join(f.cfg.CallerCwd, cwd)
	}
	if fi, err := os.Stat(cwd); err != nil {
		return nil, fmt.Errorf("spawn %s: %w: working directory %s does not exist", req.ID, ErrInvalidRequest, cwd)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("spawn %s: %w: working directory %s is not a directory", req.ID, ErrInvalidRequest, cwd)
	}
	var wt *Worktree
	reserved := false
	if req.Worktree || req.Branch != "" {
		// A live worker of the id is the conflict to name, not its
		// worktree, which the new one would otherwise collide with.
		if err := f.refuseRunningUnit(ctx, req.ID); err != nil {
			return nil, err
		}
		var err error
		if wt, cwd, err = f.createWorktree(ctx, req.ID, cwd, req.Branch); err != nil {
			return nil, fmt.Errorf("spawn %s: %w", req.ID, err)
		}
		defer func() {
			if reserved {
				return // the worktree is the record's
			}
			if derr := discardFreshWorktree(context.WithoutCancel(ctx), wt); derr != nil {
				f.log.Warn("could not remove the worktree of a refused spawn", "path", wt.Path, "err", derr)
			}
		}()
	}
	var argv []string
	var hspec *harness.Spec
	if kind == "exec" {
		argv0, err := f.resolveCommand(req.Command[0], cwd)
		if err != nil {
			return nil, fmt.Errorf("spawn %s: %w", req.ID, err)
		}
		argv = append([]string{argv0}, req.Command[1:]...)
	} else {
		var err error
		if hspec, err = f.harnessSpec(req, cwd); err != nil {
			return nil, fmt.Errorf("spawn %s: %w", req.ID, err)
		}
		argv = hspec.Command
	}
	extra, err := ParseEnv(req.Env)
	if err == nil {
		err = checkExecSizes(argv, extra)
	}
	if err != nil {
		return nil, fmt.Errorf("spawn %s: %w", req.ID, err)
	}
	scope := f.cfg.CallerEnv(EnvScope)
	if err := wire.ValidateScope(scope); err != nil {
		return nil, fmt.Errorf("spawn %s: %w", req.ID, err)
	}
	profile, err := ParseProfile(req.Profile)
	if err != nil {
		return nil, fmt.Errorf("spawn %s: %w", req.ID, err)
	}
	if profile == "" {
		profile = DefaultProfile(kind, req.Permission)
	} else if req.AllowDegraded && profile == ProfileTrusted {
		return nil, fmt.Errorf("spawn %s: %w: --allow-degraded is for a confining profile; trusted confines nothing", req.ID, ErrInvalidRequest)
	}
	sandbox, degraded, err := f.workerSandbox(ctx, req, kind, profile, cwd, argv, extra)
	if err != nil {
		return nil, fmt.Errorf("spawn %s: %w", req.ID, err)
	}

	w := &Worker{
		ID: req.ID, Kind: kind, Role: req.Role, Task: req.Task, Cwd: cwd, Command: argv,
		Model: req.Model, Effort: req.Effort, Permission: req.Permission,
		Manager: f.cfg.Caller, FirstManager: f.cfg.Caller, LeaseDuration: f.leaseFor(req.Lease),
		Budget: req.Budget.apply(Budget{}), Limits: req.Limits, Profile: profile, ProfileDegraded: degraded, PermissionWait: req.PermissionWait,
		StopTimeout: f.cfg.StopTimeout,
	}
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		w.EnvKeys = append(w.EnvKeys, k)
	}
	// The running-unit check is asked of systemd while the registry
	// reserves; a refusal then takes the reservation back.
	refused := make(chan error, 1)
	go func() {
		err := f.refuseRunningUnit(ctx, req.ID)
		if err == nil {
			err = f.refuseConnectedSession(ctx, req.ID)
		}
		refused <- err
	}()
	if err := f.cfg.Registry.Reserve(ctx, w); err != nil {
		if rerr := <-refused; errors.Is(rerr, ErrConflict) {
			return nil, rerr // the unit, not a record, is the reason to give
		}
		return nil, fmt.Errorf("spawn %s: %w", req.ID, err)
	}
	if err := <-refused; err != nil {
		if uerr := f.cfg.Registry.Unreserve(context.WithoutCancel(ctx), w.ID, w.RunID); uerr != nil {
			f.log.Warn("could not take back a refused reservation", "id", w.ID, "run", w.RunID, "err", uerr)
		}
		return nil, err
	}
	if wt != nil {
		wt.RunID = w.RunID
		if err := f.cfg.Registry.PutWorktree(ctx, wt); err != nil {
			if uerr := f.cfg.Registry.Unreserve(context.WithoutCancel(ctx), w.ID, w.RunID); uerr != nil {
				f.log.Warn("could not take back a reservation", "id", w.ID, "run", w.RunID, "err", uerr)
			}
			return nil, fmt.Errorf("spawn %s: %w", req.ID, err)
		}
		w.Worktree = wt
	}
	reserved = true
	if !f.cfg.Journal {
		w.LogPath = LogFile(f.cfg.Paths, w.ID, w.RunID)
	}
	for _, dir := range []string{LogDir(f.cfg.Paths), exitDir(f.cfg.Paths)} {
		if err := intercom.EnsureDir(dir); err != nil {
			return nil, f.abandon(ctx, w, err)
		}
	}
	if w.LogPath != "" {
		if err := createLog(w.LogPath); err != nil {
			return nil, f.abandon(ctx, w, err)
		}
	}
	shimArgs := []string{"--id", w.ID, "--run", w.RunID}
	if hspec == nil {
		shimArgs = append(shimArgs, "--ready-grace", f.cfg.ReadyGrace.String())
	}
	if hspec != nil {
		if err := harness.WriteSpec(WorkerDir(f.cfg.Paths, w.ID, w.RunID), hspec); err != nil {
			return nil, f.abandon(ctx, w, err)
		}
		shimArgs = append(shimArgs, "--kind", kind)
	}

	identity := map[string]string{
		EnvWorkerID: w.ID, EnvRunID: w.RunID, EnvUnit: w.Unit,
		EnvManagerID: w.Manager, EnvManagerTarget: w.Manager, EnvOwned: "1",
		EnvSessionID: w.ID, EnvSessionName: w.ID,
	}
	if w.Role != "" {
		identity[EnvRole] = w.Role
	}
	if hspec != nil {
		identity[intercom.ModelEnv] = kind // the model label other sessions see
	}
	if scope != "" {
		identity[EnvScope] = scope
	}
	env := workerEnv(f.cfg.CallerEnv, f.cfg.Paths.AgentDir, extra, identity)
	env = append(env, f.cfg.ShimEnv...)
	env = append(env, EnvShimKeep+"="+shimKeep(env), EnvLease+"="+w.LeaseDuration.String())
	if req.MaxRuntime > 0 {
		env = append(env, EnvMaxRuntime+"="+req.MaxRuntime.String())
	}

	spec := units.ServiceSpec{
		Name:             w.Unit,
		Description:      describe(w),
		Argv:             append(append(append(append([]string(nil), f.cfg.Shim...), shimArgs...), "--"), argv...),
		WorkingDirectory: cwd,
		Env:              env,
		Type:             units.ServiceNotify,
		StartTimeout:     f.cfg.StartTimeout,
		StopTimeout:      w.StopTimeout,
		MaxRuntime:       req.MaxRuntime,
		LogFile:          w.LogPath,
		ExitRecord:       f.exitRecordPath(w),
		Limits:           w.Limits,
		Sandbox:          sandbox,
	}
	// LogPath is recorded with the outcome below (one write fewer on the
	// way to READY); it follows from id and run in the meantime.
	sctx, cancel := context.WithTimeout(ctx, f.cfg.StartTimeout+10*time.Second)
	st, err := f.cfg.Units.StartService(sctx, spec)
	cancel()
	if err != nil {
		return nil, f.spawnFailed(ctx, w, startFailure(err), errors.Is(err, units.ErrTimeout))
	}
	now := f.cfg.Now()
	updated, err := f.cfg.Registry.Update(context.WithoutCancel(ctx), w.ID, w.RunID, func(r *Worker) error {
		if st.MainPID != 0 {
			r.MainPID = int(st.MainPID) // else the shim's, if it recorded its end already
		}
		r.ControlGroup, r.InvocationID, r.LogPath = st.ControlGroup, st.InvocationID, w.LogPath
		// A worker whose shim recorded its end before this update was never
		// reported ready to anyone ("started; it has already exited"): it
		// gets no readyAt, which would otherwise come after its endedAt.
		if !r.HasExit && r.EndedAt.IsZero() {
			r.ReadyAt = now
		}
		renewed(r, now)
		if r.State == StateProvisioning {
			r.State = StateRunning
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// A command that ended at once ended before anyone could use it: a
	// non-zero end is a failed spawn, a clean one a worker that finished.
	// (The shim may have recorded the exit before the update read the record.)
	if updated.HasExit && st.Running() && st.MainPID != 0 {
		// Its shim recorded the end before READY and is exiting: what the
		// spawn returns has ended, so the unit must not run on either (a
		// spawn of the id, list and stop right after would find it active).
		wctx, cancel := context.WithTimeout(ctx, f.cfg.StopTimeout)
		if err := f.waitMainExit(wctx, updated, st.ControlGroup); err != nil {
			f.log.Warn("the shim of a command that ended at once did not exit", "id", w.ID, "run", w.RunID, "err", err)
		}
		cancel()
	}
	if !st.Running() || st.MainPID == 0 || updated.HasExit {
		updated, _ = f.settle(ctx, updated)
	}
	updated.Worktree = wt
	if updated.State == StateFailed || (updated.HasExit && updated.ExitStatus != 0) {
		return updated, f.spawnError(ctx, w, startedButEnded(updated))
	}
	f.log.Info("worker spawned", "id", w.ID, "run", w.RunID, "unit", w.Unit, "pid", st.MainPID)
	return updated, nil
}

// workerSandbox compiles a worker's profile (sandboxFor) from the
// environment the worker will have, creates the harness directories it
// may write and, for a worker that cannot reach the user bus, makes sure
// the broker runs: a broker the worker started itself would live in the
// worker's cgroup (docs/architecture.md "Broker placement").
func (f *Fleet) workerSandbox(ctx context.Context, req SpawnRequest, kind string, profile Profile, cwd string, argv, extra []string) (units.Sandbox, string, error) {
	if profile == ProfileTrusted {
		return units.Sandbox{}, "", nil
	}
	env := envLookup(workerEnv(f.cfg.CallerEnv, f.cfg.Paths.AgentDir, extra, nil))
	executables := []string{}
	if len(f.cfg.Shim) > 0 {
		executables = append(executables, f.cfg.Shim[0])
	}
	switch dir := filepath.Dir(argv[0]); {
	case kind == "exec", dir == "/tmp", dir == "/var/tmp":
		executables = append(executables, argv[0])
	default:
		executables = append(executables, dir) // a harness may run what lies beside it
	}
	// A path an --env entry names (a harness's configuration file) stays
	// visible, read-only, also below /tmp.
	for _, kv := range extra {
		if _, v, _ := strings.Cut(kv, "="); filepath.IsAbs(v) && inTmp(v) {
			if _, err := os.Stat(v); err == nil {
				executables = append(executables, filepath.Clean(v))
			}
		}
	}
	in := sandboxInput{profile: profile, kind: kind, cwd: cwd, env: env, callerEnv: f.cfg.CallerEnv,
		agentDir: f.cfg.Paths.AgentDir, intercomDir: f.cfg.Paths.Dir, executables: executables}
	sb, degraded, err := f.sandboxFor(ctx, req, in, req.Profile != "")
	if err != nil {
		return sb, "", err
	}
	if err := prepareSandboxDirs(kind, env("HOME"), env, f.cfg.Paths.AgentDir); err != nil {
		return sb, "", err
	}
	if f.cfg.EnsureBroker != nil {
		if err := f.cfg.EnsureBroker(ctx); err != nil {
			return sb, "", fmt.Errorf("%w: start the broker before a confined worker: %w", ErrSpawnFailed, err)
		}
	}
	return sb, degraded, nil
}

// envLookup looks a name up in KEY=value entries (the last one wins).
func envLookup(env []string) func(string) string {
	return func(name string) string {
		v := ""
		for _, kv := range env {
			if k, val, _ := strings.Cut(kv, "="); k == name {
				v = val
			}
		}
		return v
	}
}

// socketPathsFit refuses, before anything is reserved or started, an agent
// directory whose sockets a worker needs — the broker's, the local API's
// and the worker's own holder socket — cannot be bound (intercom.
// CheckSocketPath, exit 2): its unit would only fail once the shim tried.
func socketPathsFit(p intercom.Paths, id string) error {
	for _, sock := range []string{p.BrokerSocket(), p.LocalAPISocket(), p.HolderSocket(id)} {
		if err := intercom.CheckSocketPath(sock); err != nil {
			return err
		}
	}
	return nil
}

// createLog creates a worker's log file 0600 before its unit starts:
// systemd's StandardOutput=append: would otherwise create it with the user
// manager's umask (0644 as a rule), readable by every user, while
// everything below the agent directory is 0600 (README "Security model").
// append: opens an existing file as it is, so the mode stays.
func createLog(path string) error {
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, intercom.FileMode)
	if err != nil {
		return fmt.Errorf("create the worker log: %w", err)
	}
	defer fh.Close()
	return fh.Chmod(intercom.FileMode) // an existing file keeps no looser mode
}

func describe(w *Worker) string {
	d := "agent-fleet worker " + w.ID
	if w.Role != "" {
		d += " (" + w.Role + ")"
	}
	return d
}

// resolveCommand makes argv[0] absolute with the caller's PATH (the user
// manager's PATH is not the caller's), relative paths against cwd.
func (f *Fleet) resolveCommand(name, cwd string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		if isExecutable(p) {
			return p, nil
		}
		return "", fmt.Errorf("%w: %s is not an executable file", ErrCommandNotFound, p)
	}
	for _, dir := range filepath.SplitList(f.cfg.CallerEnv("PATH")) {
		if dir == "" {
			dir = "."
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(cwd, dir)
		}
		p := filepath.Join(dir, name)
		if isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %q is not on the caller's PATH", ErrCommandNotFound, name)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

func startFailure(err error) string {
	var je *units.JobError
	switch {
	case errors.As(err, &je):
		return "the worker did not become ready (start job " + je.Result + ")"
	case errors.Is(err, units.ErrTimeout):
		return "the user manager did not answer in time: " + err.Error()
	}
	return err.Error()
}

// spawnFailed records a spawn that did not reach READY and returns its
// error, with the exit status and the last log lines. With an unanswering
// manager (unanswered) nothing more is asked of it: the record's stop fence
// makes a later reconcile stop a unit that starts after all.
func (f *Fleet) spawnFailed(ctx context.Context, w *Worker, reason string, unanswered bool) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.StopTimeout+10*time.Second)
	defer cancel()
	if !unanswered {
		// Make sure nothing of it runs on, then read how it ended.
		_ = f.cfg.Units.StopUnit(sctx, w.Unit)
		_ = f.cfg.Units.ResetFailed(sctx, w.Unit)
	}
	rec, recErr := units.ReadExitRecord(f.exitRecordPath(w))
	stopped := false // a stop fenced it: the stop records its end
	updated, err := f.cfg.Registry.Update(sctx, w.ID, w.RunID, func(r *Worker) error {
		stopped = r.State == StateStopping || r.State == StateStopped
		r.StopRequestedAt, r.LogPath = f.cfg.Now(), w.LogPath
		if recErr == nil && !r.HasExit {
			applyExitRecord(r, rec) // the shim's record of its command comes first
		}
		if r.State.Live() && !stopped {
			r.State = StateFailed
		}
		r.StateReason = "spawn-failed"
		r.LastError = reason
		r.EndedAt = f.cfg.Now()
		return nil
	})
	if err == nil {
		f.deliverEnded(sctx, updated)
	}
	switch {
	case err == nil && stopped:
		reason = "stopped before it was ready"
	case err == nil && updated.State == StateExited:
		reason = startedButEnded(updated) // its shim recorded the command's end
	case err == nil && updated.HasExit:
		reason = exitReason(updated) + " before it was ready"
	}
	return f.spawnError(sctx, w, reason)
}

// TasksPerWorker is about how many tasks (threads, what TasksMax= counts)
// an exec worker takes: its shim's threads and its command's.
const TasksPerWorker = 10

// spawnError is a failed spawn's error. When the user manager is at its
// task limit — a thread or process the worker needed was refused, which
// shows only as a crash or an exit in its log — the reason says so and
// what to do.
func (f *Fleet) spawnError(ctx context.Context, w *Worker, reason string) *SpawnError {
	if lim, ok := f.taskLimit(ctx); ok && lim.Room() < 3*TasksPerWorker {
		reason += fmt.Sprintf("; the user manager is at its task limit: %s, and a worker needs about %d. "+
			"Stop workers, or raise the limit (TasksMax= of the slice or unit named, logind's UserTasksMax=, kernel.pid_max)", lim, TasksPerWorker)
	}
	return &SpawnError{ID: w.ID, RunID: w.RunID, Reason: reason, LogTail: tailLines(w.LogPath, 10)}
}

// taskLimit is the user manager's tightest task limit, when its manager
// can tell (units.Systemd can; fakes cannot).
func (f *Fleet) taskLimit(ctx context.Context) (units.TaskLimit, bool) {
	tl, ok := f.cfg.Units.(interface {
		TaskLimit(context.Context) (units.TaskLimit, error)
	})
	if !ok {
		return units.TaskLimit{}, false
	}
	lim, err := tl.TaskLimit(ctx)
	return lim, err == nil && lim.Where != ""
}

// refuseRunningUnit refuses an id whose worker unit still runs, whatever
// the registry says (a lost or rebuilt registry must never lead to a second
// copy of a running worker).
func (f *Fleet) refuseRunningUnit(ctx context.Context, id string) error {
	list, err := f.cfg.Units.ListUnits(ctx, UnitPrefix+id+"-*")
	if err != nil {
		return fmt.Errorf("spawn %s: %w: %s: %w", id, ErrSpawnFailed, startFailure(err), err)
	}
	for _, u := range list {
		uid, _, ok := ParseUnitName(u.Name)
		if !ok || uid != id {
			continue
		}
		switch u.ActiveState {
		case "active", "activating", "reloading", "deactivating":
			if mine, err := f.ownUnit(ctx, u.Name); err == nil && !mine {
				continue // the same id in another agent directory
			}
			if u.ActiveState == "deactivating" && f.unitEnding(ctx, u.Name) {
				continue // stopped: its exit record is being written
			}
			return fmt.Errorf("spawn %s: %w: its unit %s is %s; stop it first (agent-fleet list --all shows its manager)", id, ErrConflict, u.Name, u.ActiveState)
		}
	}
	return nil
}

// refuseConnectedSession refuses an id that a session other than a worker
// of that id holds on the broker: a worker's id is its session id, and its
// shim could not register it (the spawn would fail with SESSION_ID_IN_USE
// once its unit ran). A session whose process is gone (a shim killed a
// moment ago, whose close the broker has not handled yet) does not count,
// nor one whose process runs in a worker unit of this id. Without an
// answer (no broker, a foreign one) nothing is refused.
func (f *Fleet) refuseConnectedSession(ctx context.Context, id string) error {
	p := f.peer(ctx, id)
	if p == nil || !p.Connected || p.PID <= 0 {
		return nil
	}
	m, err := f.cfg.Cgroups.Membership(p.PID)
	if errors.Is(err, units.ErrProcessGone) {
		return nil
	}
	if uid, _, ok := ParseUnitName(m.Unit); err == nil && ok && uid == id {
		return nil
	}
	return fmt.Errorf("spawn %s: %w: session %q is connected to the broker (pid %d), and a worker's id is its session id: choose another id, or end that session first",
		id, ErrConflict, id, p.PID)
}

// unitEnding: the deactivating unit holds no process but systemd's own
// control process (a stop proved its cgroup empty and returned while the
// ExecStopPost writes the exit record), or has ended since it was listed.
// The control process may end between the reads of the cgroup and of the
// manager's ControlPID: the unit is read once more, and is ended by then.
func (f *Fleet) unitEnding(ctx context.Context, unit string) bool {
	for range 2 {
		st, err := f.cfg.Units.Unit(ctx, unit)
		switch {
		case errors.Is(err, units.ErrUnitNotFound):
			return true // collected meanwhile
		case err != nil:
			return false
		case st.Gone() || !st.Running() && st.ActiveState != "deactivating":
			return true // ended meanwhile
		}
		if _, ok := f.onlyControl(ctx, unit, st.ControlGroup); ok {
			return true
		}
	}
	return false
}

// abandon marks a reserved record failed when the spawn could not even be
// attempted.
func (f *Fleet) abandon(ctx context.Context, w *Worker, cause error) error {
	_, _ = f.cfg.Registry.Update(context.WithoutCancel(ctx), w.ID, w.RunID, func(r *Worker) error {
		r.State, r.StateReason, r.LastError, r.EndedAt = StateFailed, "spawn-failed", cause.Error(), f.cfg.Now()
		return nil
	})
	return fmt.Errorf("spawn %s: %w", w.ID, cause)
}

// applyExitRecord copies how a unit ended into the record.
func applyExitRecord(r *Worker, rec units.ExitRecord) {
	if rec.Result == "oom-kill" {
		r.StateReason = ReasonOOMKilled
	}
	if rec.Code == "" {
		return
	}
	r.HasExit, r.ExitCode = true, rec.Code
	if n, ok := rec.ExitStatus(); ok {
		r.ExitStatus = n
	} else {
		r.ExitStatus = signalNumber(rec.Status)
	}
}

// startedButEnded says how a worker that got ready ended at once: its
// command ran, and ended within the readiness grace (or before the spawn
// read its state).
func startedButEnded(w *Worker) string {
	if !w.HasExit {
		return "started, but " + exitReason(w)
	}
	switch w.ExitCode {
	case "exited":
		return fmt.Sprintf("started; it has already exited (exit %d)", w.ExitStatus)
	case "killed", "dumped":
		return fmt.Sprintf("started; it was already %s by signal %d", w.ExitCode, w.ExitStatus)
	}
	return "started; it has already ended (" + exitReason(w) + ")"
}

// exitReason says how a worker ended, in words.
func exitReason(w *Worker) string {
	if !w.HasExit {
		if w.LastError != "" {
			return w.LastError
		}
		return "ended without an exit status"
	}
	switch w.ExitCode {
	case "exited":
		if w.ExitStatus == 127 && w.StateReason == "spawn-failed" {
			return "its command could not be executed (status 127)"
		}
		return fmt.Sprintf("exited with status %d", w.ExitStatus)
	case "killed", "dumped":
		if w.StateReason == ReasonOOMKilled {
			return fmt.Sprintf("was killed by the OOM killer (signal %d): it went past its memory limit", w.ExitStatus)
		}
		return fmt.Sprintf("was %s by signal %d", w.ExitCode, w.ExitStatus)
	}
	return fmt.Sprintf("%s %d", w.ExitCode, w.ExitStatus)
}
