package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/units"
)

// UnitPrefix starts the name of every worker unit.
const UnitPrefix = "agent-fleet-worker-"

// degradedPath marks a read-only fleet; it holds the reason.
func degradedPath(p intercom.Paths) string {
	return filepath.Join(p.OrchestratorDir(), "registry-degraded.json")
}

type degradedNote struct {
	Reason string   `json:"reason"`
	Units  []string `json:"units"`
	At     int64    `json:"at"`
}

// Degraded returns why the fleet is read-only, or "" if it is not.
func Degraded(p intercom.Paths) string {
	data, err := os.ReadFile(degradedPath(p))
	if err != nil {
		return ""
	}
	var n degradedNote
	if json.Unmarshal(data, &n) != nil {
		return "unreadable read-only marker " + degradedPath(p)
	}
	return n.Reason + ": " + strings.Join(n.Units, ", ")
}

func (f *Fleet) writable() error {
	if why := Degraded(f.cfg.Paths); why != "" {
		return fmt.Errorf("%w: %s", ErrReadOnly, why)
	}
	return nil
}

// ParseUnitName splits agent-fleet-worker-<id>-<run>.service.
func ParseUnitName(unit string) (id, run string, ok bool) {
	name, found := strings.CutPrefix(unit, UnitPrefix)
	if !found {
		return "", "", false
	}
	name, found = strings.CutSuffix(name, ".service")
	i := strings.LastIndexByte(name, '-')
	if !found || i <= 0 {
		return "", "", false
	}
	id, run = name[:i], name[i+1:]
	return id, run, ValidID(id) == nil && ValidRunID(run) == nil
}

// ReconcileReport says what Reconcile found and did.
type ReconcileReport struct {
	// Recovered are records rebuilt from live units the registry did not
	// know (a deleted or corrupt registry): manager from the ownership
	// journal, else the unit's first manager.
	Recovered []*Worker
	// Revived are records that had ended but whose unit runs, set running.
	Revived []string
	// Fenced are units of stopped records that were running again (a start
	// that materialised after the stop): stopped again.
	Fenced []string
	// Ambiguous are units that could not be attributed; the fleet is then
	// read-only until they are resolved.
	Ambiguous []string
}

// Reconcile makes the registry agree with the live worker units (state
// always comes from systemd plus the registry): unknown units are recovered
// from their identity environment, stopped records' units are stopped, and
// anything ambiguous leaves the fleet read-only with a diagnostic.
func (f *Fleet) Reconcile(ctx context.Context) (*ReconcileReport, error) {
	rep := &ReconcileReport{}
	listedAt := time.Now()
	list, err := f.cfg.Units.ListUnits(ctx, UnitPrefix+"*")
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	journal := readOwnership(f.cfg.Paths)
	// One query for the common case, a live unit of a live record; the
	// others are looked up one by one.
	live := map[string]bool{} // unit names of live records
	if ss, err := f.cfg.Registry.LiveSummaries(ctx); err == nil {
		for _, s := range ss {
			live[WorkerUnitName(s.ID, s.RunID)] = true
		}
	}
	claimed := map[string]string{} // worker id → the unit running it
	type orphan struct {
		unit, id, run string
		ended         bool // a record exists but says the worker ended
	}
	var orphans []orphan
	// Units with a live record first: they own their ids.
	for _, u := range list {
		switch u.ActiveState {
		case "active", "activating", "reloading", "deactivating":
		default:
			continue
		}
		id, run, ok := ParseUnitName(u.Name)
		if !ok {
			continue // not named as agent-fleet names workers: not ours
		}
		if live[u.Name] {
			claimed[id] = u.Name
			continue
		}
		w, err := f.cfg.Registry.GetRun(ctx, id, run)
		switch {
		case err == nil && w.State.Live():
			claimed[id] = u.Name
		case err == nil && !w.StopRequestedAt.IsZero() && u.ActiveState != "deactivating":
			// A start that materialised after its stop request (one that
			// is deactivating is ending: a stop that proved its cgroup
			// empty returns while the exit record is written).
			_ = f.cfg.Units.StopUnit(ctx, u.Name)
			_ = f.cfg.Units.ResetFailed(ctx, u.Name)
			rep.Fenced = append(rep.Fenced, u.Name)
		case u.ActiveState == "deactivating":
			// Ending (its stop or exit record is being written): an ended
			// record is right, and a missing one is not worth rebuilding.
		case err == nil && w.HasExit:
			// Its shim recorded how the command ended and is finishing (the
			// worktree's record, owed notices) before it exits: the unit is
			// still active, but the worker has ended.
		case err == nil:
			orphans = append(orphans, orphan{u.Name, id, run, true})
		case errors.Is(err, ErrNotFound):
			if mine, err := f.ownUnit(ctx, u.Name); err != nil || !mine {
				continue // another agent directory's worker (or gone meanwhile)
			}
			orphans = append(orphans, orphan{u.Name, id, run, false})
		default:
			return rep, fmt.Errorf("reconcile: %w", err)
		}
	}
	for _, o := range orphans {
		if other, dup := claimed[o.id]; dup {
			rep.Ambiguous = append(rep.Ambiguous, fmt.Sprintf("%s and %s both run worker %s", other, o.unit, o.id))
			continue
		}
		claimed[o.id] = o.unit
		if o.ended {
			if _, err := f.cfg.Registry.Update(ctx, o.id, o.run, func(r *Worker) error {
				r.State, r.StateReason, r.EndedAt = StateRunning, "unit-running", time.Time{}
				return nil
			}); err != nil {
				rep.Ambiguous = append(rep.Ambiguous, fmt.Sprintf("%s: %v", o.unit, err))
				continue
			}
			rep.Revived = append(rep.Revived, o.unit)
			continue
		}
		w, why := f.recoverUnit(ctx, o.unit, o.id, o.run, journal)
		if w == nil {
			rep.Ambiguous = append(rep.Ambiguous, o.unit+": "+why)
			continue
		}
		rep.Recovered = append(rep.Recovered, w)
	}
	if err := f.markDegraded(rep.Ambiguous); err != nil {
		return rep, err
	}
	f.keepListing(list, listedAt)
	return rep, nil
}

// ownUnit reports whether a worker unit belongs to this fleet's agent
// directory: several agent directories may share one user manager.
func (f *Fleet) ownUnit(ctx context.Context, unit string) (bool, error) {
	return unitOfAgentDir(ctx, f.cfg.Units, unit, f.cfg.Paths.AgentDir)
}

// unitOfAgentDir reports whether a worker unit's environment names
// agentDir as its agent directory.
func unitOfAgentDir(ctx context.Context, m interface {
	ServiceEnvironment(context.Context, string) ([]string, error)
}, unit, agentDir string) (bool, error) {
	env, err := m.ServiceEnvironment(ctx, unit)
	if err != nil {
		return false, err
	}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, EnvAgentDir+"="); ok {
			return v == agentDir, nil
		}
	}
	return false, nil
}

// recoverUnit rebuilds the record of a live unit from its environment.
func (f *Fleet) recoverUnit(ctx context.Context, unit, id, run string, journal map[string][]string) (*Worker, string) {
	env, err := f.cfg.Units.ServiceEnvironment(ctx, unit)
	if err != nil {
		return nil, "cannot read its environment: " + err.Error()
	}
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	if vars[EnvWorkerID] != id || vars[EnvRunID] != run || vars[EnvManagerID] == "" {
		return nil, "its environment does not carry a matching worker identity"
	}
	st, err := f.cfg.Units.Unit(ctx, unit)
	if err != nil {
		return nil, "cannot read its state: " + err.Error()
	}
	manager := vars[EnvManagerID]
	adoptions := journal[id+"/"+run]
	if len(adoptions) > 0 {
		manager = adoptions[len(adoptions)-1] // adopted after spawn: the journal knows the current one
	}
	// What the unit runs and since when: the shim's argv ends in "--" and
	// the worker's command, and its start is the worker's.
	cmd, err := f.cfg.Units.ServiceCommand(ctx, unit)
	if err != nil {
		return nil, "cannot read its command: " + err.Error()
	}
	argv := workerArgv(cmd.Argv)
	if own := workerArgv(procArgv(int(st.MainPID))); own != nil {
		// The shim's argv as it was run: after a daemon-reload systemd
		// (252) shows each ";" of ExecStart as "\;".
		argv = own
	}
	w := &Worker{
		ID: id, RunID: run, Kind: "exec", Role: vars[EnvRole], Unit: unit, Command: argv, Cwd: cmd.WorkingDirectory,
		MainPID: int(st.MainPID), ControlGroup: st.ControlGroup, InvocationID: st.InvocationID,
		State: StateRunning, StateReason: "recovered", Manager: manager, FirstManager: vars[EnvManagerID],
		CreatedAt: cmd.StartedAt, ReadyAt: cmd.StartedAt,
	}
	if w.ReadyAt.IsZero() {
		w.ReadyAt = f.cfg.Now() // not reported: at least it is ready now
	}
	if unitFrozen(f.cfg.Cgroups, st) {
		// Paused: when is lost with the registry, and its lease is held
		// from now on (a resume moves the deadline on by the pause).
		w.FrozenAt = f.cfg.Now()
	}
	if spec, err := harness.ReadSpec(WorkerDir(f.cfg.Paths, id, run)); err == nil {
		// A coding agent: its spec says what it is.
		w.Kind, w.Command, w.Task, w.Cwd = spec.Kind, spec.Command, spec.Task, spec.Cwd
		w.Model, w.Effort, w.Permission = spec.Model, spec.Effort, spec.Permission
	}
	if log := filepath.Join(LogDir(f.cfg.Paths), id+"-"+run+".log"); !f.cfg.Journal {
		if _, err := os.Stat(log); err == nil {
			w.LogPath = log
		}
	}
	w.LeaseDuration = f.recoveredLease(vars, adoptions)
	if w.LeaseDuration > 0 {
		w.LeaseDeadline = recoveredDeadline(cmd.StartedAt, w.LeaseDuration, f.cfg.Now())
	}
	if err := f.cfg.Registry.Insert(ctx, w); err != nil {
		return nil, "cannot record it: " + err.Error()
	}
	// The caller reports it (ReconcileReport.Recovered): logged at Info, so
	// that a command's warning level does not print it a second time.
	f.log.Info("rebuilt a worker record from its unit", "id", id, "run", run, "manager", manager)
	return w, ""
}

// unitFrozen reports whether a unit's processes are frozen: by systemd
// (FreezerState), or through its cgroup where systemd cannot freeze units
// (Fleet.freeze's fallback).
func unitFrozen(cg *units.Cgroups, st units.UnitState) bool {
	if st.FreezerState == "frozen" || st.FreezerState == "freezing" {
		return true
	}
	if cg == nil || st.ControlGroup == "" {
		return false
	}
	u, err := cg.Usage(st.ControlGroup)
	return err == nil && u.Frozen != nil && *u.Frozen
}

// recoveredLease is the idle lease of a worker rebuilt from its unit: the
// one its unit says it was spawned with (EnvLease), changed by each of its
// adoptions as Adopt changes it. A unit that does not say (started by an
// older agent-fleet) gets what a spawn by its first manager gets without
// --lease.
func (f *Fleet) recoveredLease(vars map[string]string, adoptions []string) time.Duration {
	lease, err := time.ParseDuration(vars[EnvLease])
	if err != nil || lease < 0 {
		lease = f.cfg.Leases.Default
		if IsOperator(vars[EnvManagerID]) {
			lease = 0
		}
	}
	r := &Worker{LeaseDuration: lease}
	for _, m := range adoptions {
		adoptedLease(r, m, f.cfg.Leases.Default)
	}
	return r.LeaseDuration
}

// recoveredDeadline is the idle deadline of a worker rebuilt from its
// unit: the one it provably had, its start plus the lease, since renewals
// after that are lost with the registry. Recovery never extends a lease —
// deleting the registry must not keep workers alive — so a worker whose
// spawn-time lease is over is due at once (the janitor's checkpoints and
// grace still give its activity time to renew it). An unknown start is
// due at once too.
func recoveredDeadline(started time.Time, lease time.Duration, now time.Time) time.Time {
	if started.IsZero() {
		return now
	}
	if started.After(now) {
		started = now // a manager clock ahead of ours
	}
	return started.Add(lease)
}

// procArgv is the argv process pid runs with (nil when it cannot be read).
func procArgv(pid int) []string {
	if pid <= 0 {
		return nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// workerArgv is a worker's command in its unit's ExecStart: what follows
// the shim's "--" (nil when there is none).
func workerArgv(execStart []string) []string {
	for i, a := range execStart {
		if a == "--" {
			return append([]string(nil), execStart[i+1:]...)
		}
	}
	return nil
}

// markDegraded writes or clears the read-only marker.
func (f *Fleet) markDegraded(ambiguous []string) error {
	path := degradedPath(f.cfg.Paths)
	if len(ambiguous) == 0 {
		if err := os.Remove(path); err == nil {
			f.log.Info("the fleet is writable again")
		}
		return nil
	}
	data, _ := json.Marshal(degradedNote{Reason: "live worker units the registry cannot attribute", Units: ambiguous, At: f.cfg.Now().UnixMilli()})
	if err := intercom.WriteFileAtomic(path, data); err != nil {
		return err
	}
	f.log.Error("the fleet is read-only until these units are resolved", "units", ambiguous)
	return nil
}

// OpenRegistryOrRecover opens the registry at path; a corrupt file is kept
// aside as <file>.corrupt-<ms> (never silently emptied) and a fresh one
// opened in its place, for Reconcile to rebuild from the live units. note
// says what happened to a corrupt file, "" otherwise.
func OpenRegistryOrRecover(ctx context.Context, path string, opts RegistryOptions) (reg *Registry, note string, err error) {
	reg, err = OpenRegistryWithOptions(ctx, path, opts)
	if !errors.Is(err, ErrCorrupt) {
		return reg, "", err
	}
	aside := path + ".corrupt-" + strconv.FormatInt(time.Now().UnixMilli(), 10)
	if rerr := os.Rename(path, aside); rerr != nil {
		return nil, "", fmt.Errorf("%w (and it could not be kept aside: %v)", err, rerr)
	}
	for _, sfx := range []string{"-wal", "-shm"} {
		_ = os.Rename(path+sfx, aside+sfx)
	}
	reg, err = OpenRegistryWithOptions(ctx, path, opts)
	if err != nil {
		return nil, "", err
	}
	return reg, fmt.Sprintf("the registry was corrupt: kept aside as %s; records of live workers are rebuilt from their units", aside), nil
}
