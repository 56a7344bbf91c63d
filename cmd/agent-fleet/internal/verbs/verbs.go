// Package verbs runs the fleet verbs — spawn, list, status, stop, wait, pause, resume,
// logs, usage, adopt, renew, forget, prune, cleanup, doctor, capabilities — for both of
// agent-fleet's surfaces: the CLI verb and the agent_fleet MCP tool fill
// the same Args, call the same Run, and print the same output.Report, so
// the two cannot drift. The arguments themselves are declared once (Params):
// they generate spawn's cobra flags and agent_fleet's JSON schema.
package verbs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// Actions are the fleet verbs, in the order agent_fleet's schema lists
// them.
var Actions = []string{"spawn", "list", "status", "stop", "wait", "pause", "resume", "logs", "usage", "adopt", "renew", "forget", "prune", "cleanup", "doctor", "capabilities"}

// DefaultLogLines is how many log lines logs prints by default.
const DefaultLogLines = 50

// ToolWaitTimeout is agent_fleet wait's timeout when the call names none:
// MCP clients give up on a tool call after about a minute (Codex: 60 s).
const ToolWaitTimeout = 45 * time.Second

// Args are one fleet verb's arguments, as either surface gives them.
type Args struct {
	Action string
	// ID is the worker (spawn, status, stop, logs, adopt, forget; renew:
	// "" renews all the caller's).
	ID string
	// IDs are the workers of a stop of several (stop reports each), or
	// the workers a wait waits for.
	IDs []string
	// Spawn is spawn's request (its ID is Args.ID, its budget Args.Budget).
	Spawn fleet.SpawnRequest
	// Budget is spawn's budget, and renew's change to one.
	Budget fleet.BudgetChange
	// Since and By are usage's: turns that ended at Since or later (zero:
	// all), grouped by worker, manager or kind ("": worker). Since is
	// also logs': lines written at Since or later.
	Since time.Time
	By    string
	// All: list every manager's workers; adopt every orphan; prune every
	// manager's records; stop every live worker of the caller; logs:
	// every line (the CLI's logs --all).
	All bool
	// Timestamps gives logs' lines the time each was written.
	Timestamps bool
	// Force adopts a worker whose manager is connected.
	Force bool
	// Acknowledge confirms that forget and prune delete history.
	Acknowledge bool
	// Execute makes cleanup act instead of previewing.
	Execute bool
	// Lines is how many log lines (0: DefaultLogLines).
	Lines int
	// OlderThan limits prune to workers that ended longer ago than this.
	OlderThan time.Duration
	// Timeout is a stop's grace between SIGTERM and SIGKILL (0: the
	// fleet's, fleet.DefaultStopTimeout), and how long a wait waits (0:
	// until the workers end); Kill sends SIGKILL at once.
	Timeout time.Duration
	Kill    bool
	// Any ends a wait once one of its workers has ended.
	Any bool
	// Pair, when not empty, makes doctor test these two sessions, A and B
	// (intercom.PairTest), waiting up to Timeout for B.
	Pair []string
	// Host runs the verb on that host of the cluster this host is joined
	// to (spawn, status, stop, logs, adopt, wait); "" is this host.
	Host string
	// StopProgress, when set, hears of each signal a stop sends (the CLI
	// shows them on a terminal; no agent_fleet argument sets it).
	StopProgress func(fleet.StopStep)
}

// NeedsFleet reports whether an action runs on the fleet (Run) rather than
// on the host alone (Host).
func NeedsFleet(action string) bool { return action != "doctor" && action != "capabilities" }

// ReadOnly reports whether an action only reads the fleet (list, status,
// logs, usage): it runs from the registry and the log files when no user
// manager answers (factory.ReadFleet), its report marking live states
// unknown.
func ReadOnly(action string) bool {
	return action == "list" || action == "status" || action == "logs" || action == "usage"
}

// OfflineWarning is what a read-only verb says beside its report when no
// user manager answered (factory.FleetEnv.Offline).
const OfflineWarning = "warning: no systemd user manager answers, so these are the registry's last known states: " +
	"whether live workers still run is unknown (agent-fleet doctor says why)"

// OfflineWarningOf is what action says beside its report when no user
// manager answered: OfflineWarning for a ReadOnly action whose report
// shows live states, "" for the others (usage sums records of turns).
func OfflineWarningOf(action string) string {
	if !ReadOnly(action) || action == "usage" {
		return ""
	}
	return OfflineWarning
}

// takesID are the actions that name a worker; adopt needs none with All,
// renew none at all.
var takesID = []string{"spawn", "status", "stop", "wait", "pause", "resume", "logs", "adopt", "renew", "forget"}

// Check refuses arguments that cannot work, before anything is opened:
// an unknown action, a missing worker id, a negative count, a
// deletion without acknowledgement. Errors are usage errors (exit 2).
func (a *Args) Check() error {
	if !slices.Contains(Actions, a.Action) {
		return factory.Usagef("unknown fleet action %q (one of %v)", a.Action, Actions)
	}
	several := (a.Action == "stop" || a.Action == "wait") && (a.All || len(a.IDs) > 0)
	needID := slices.Contains(takesID, a.Action) && a.Action != "renew" && !(a.Action == "adopt" && a.All) && !several
	if needID && a.ID == "" {
		return factory.Usagef("%s needs a worker id", a.Action)
	}
	if a.Action == "stop" {
		switch {
		case a.All && (a.ID != "" || len(a.IDs) > 0):
			return factory.Usagef("stop takes worker ids or all of yours, not both")
		case a.ID != "" && len(a.IDs) > 0:
			return factory.Usagef("stop takes one id or a list of ids, not both (agent_fleet: id or ids)")
		case a.Kill && a.Timeout > 0:
			return factory.Usagef("stop --kill sends SIGKILL at once: it has no timeout")
		}
	}
	if a.Action == "wait" {
		switch {
		case a.ID == "" && len(a.IDs) == 0:
			return factory.Usagef("wait needs the ids of the workers to wait for (agent_fleet: id or ids)")
		case a.ID != "" && len(a.IDs) > 0:
			return factory.Usagef("wait takes one id or a list of ids, not both (agent_fleet: id or ids)")
		}
	}
	if a.Action == "adopt" && a.All && a.ID != "" {
		return factory.Usagef("adopt takes a worker id or every orphan, not both")
	}
	if a.Action == "renew" && a.ID == "" && !a.Budget.IsZero() {
		return factory.Usagef("renew sets a budget for one worker: name its id (agent_fleet: id)")
	}
	if a.Lines < 0 {
		return factory.Usagef("lines must be at least 1, not %d", a.Lines)
	}
	if a.OlderThan < 0 {
		return factory.Usagef("older than must not be negative")
	}
	if a.Timeout < 0 {
		return errNegativeTimeout
	}
	if err := a.checkHost(); err != nil {
		return err
	}
	if (a.Action == "forget" || a.Action == "prune") && !a.Acknowledge {
		return factory.Usagef("%s deletes history: confirm with --acknowledge (agent_fleet: acknowledge: true)", a.Action)
	}
	return nil
}

// Run performs a fleet action on fe for its caller. A non-nil report may
// come with an error (a failed spawn's record, a stop whose cleanup could
// not be verified): surfaces show both.
//
// A fleet opened without a user manager (fe.Offline) runs only the
// ReadOnly actions; the others fail with fe.Offline.
func Run(ctx context.Context, fe *factory.FleetEnv, a Args) (output.Report, error) {
	fl := fe.Fleet
	if fe.Offline != nil && !ReadOnly(a.Action) {
		return nil, fe.Offline
	}
	unknown := fe.Offline != nil
	switch a.Action {
	case "spawn":
		req := a.Spawn
		req.ID, req.Budget = a.ID, a.Budget
		w, err := fl.Spawn(ctx, req)
		if w == nil {
			return nil, err
		}
		return output.SpawnReport{W: w}, err
	case "list":
		ws, err := fl.List(ctx, a.All)
		if err != nil {
			return nil, err
		}
		rep := output.WorkersReport{Verb: "list", WS: ws, LiveUnknown: unknown}
		if len(ws) == 0 && !a.All {
			rep.Others = othersRecords(ctx, fe)
		}
		return rep, nil
	case "status":
		st, err := fl.Status(ctx, a.ID)
		if err != nil {
			return nil, err
		}
		return output.StatusReport{St: st, LiveUnknown: unknown}, nil
	case "stop":
		opts := fleet.StopOptions{Grace: a.Timeout, Kill: a.Kill, Progress: a.StopProgress}
		if a.ID == "" {
			return stopSeveral(ctx, fl, a, opts)
		}
		res, err := fl.StopWith(ctx, a.ID, opts)
		if res == nil {
			return nil, err
		}
		return output.StopReport{Res: res}, err
	case "wait":
		ids := a.IDs
		if a.ID != "" {
			ids = []string{a.ID}
		}
		wctx := ctx
		if a.Timeout > 0 {
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeout(ctx, a.Timeout)
			defer cancel()
		}
		ws, err := fl.Wait(wctx, ids, a.Any)
		if ws == nil {
			return nil, err
		}
		return output.WaitReport{WS: ws, Timeout: a.Timeout, TimedOut: errors.Is(err, fleet.ErrWaitTimeout)}, err
	case "pause", "resume":
		op := fl.Pause
		if a.Action == "resume" {
			op = fl.Resume
		}
		w, err := op(ctx, a.ID)
		if err != nil {
			return nil, err
		}
		return output.WorkersReport{Verb: a.Action, WS: []*fleet.Worker{w}}, nil
	case "logs":
		lines, err := fl.ReadLog(ctx, a.ID, a.LogQuery())
		if err != nil {
			return nil, err
		}
		return output.LogsReport{ID: a.ID, Lines: lines, Timestamps: a.Timestamps, LiveUnknown: unknown}, nil
	case "usage":
		rep, err := fl.Usage(ctx, a.Since, a.By)
		if err != nil {
			return nil, err
		}
		return output.UsageReport{Rep: rep}, nil
	case "adopt":
		var ws []*fleet.Worker
		var err error
		if a.All {
			ws, err = fl.AdoptOrphans(ctx)
		} else {
			var w *fleet.Worker
			if w, err = fl.Adopt(ctx, a.ID, a.Force); err == nil {
				ws = append(ws, w)
			}
		}
		if err != nil {
			return nil, err
		}
		return output.WorkersReport{Verb: "adopt", WS: ws}, nil
	case "renew":
		var ws []*fleet.Worker
		var err error
		if a.ID != "" {
			var w *fleet.Worker
			if w, err = fl.RenewWith(ctx, a.ID, a.Budget); err == nil {
				ws = append(ws, w)
			}
		} else {
			ws, err = fl.RenewAll(ctx)
		}
		if err != nil {
			return nil, err
		}
		return output.WorkersReport{Verb: "renew", WS: ws}, nil
	case "forget":
		n, wts, err := fl.Forget(ctx, a.ID, a.Acknowledge)
		if err != nil {
			return nil, err
		}
		return output.DeletedReport{ID: a.ID, Deleted: n, Worktrees: wts}, nil
	case "prune":
		n, wts, err := fl.Prune(ctx, time.Now().Add(-a.OlderThan), a.All, a.Acknowledge)
		if err != nil {
			return nil, err
		}
		return output.DeletedReport{Deleted: n, Worktrees: wts}, nil
	case "cleanup":
		rep, err := fl.Cleanup(ctx, fleet.CleanupOptions{Execute: a.Execute})
		if errors.Is(err, fleet.ErrCleanupInProgress) {
			return output.CleanupReport{Skipped: true}, nil
		}
		if err != nil {
			return nil, err
		}
		return output.CleanupReport{Rep: rep}, nil
	}
	return nil, factory.Usagef("%s does not run on the fleet", a.Action)
}

// LogQuery is the lines logs reads: the last Lines (DefaultLogLines when
// 0), every one with All, those since Since.
func (a *Args) LogQuery() fleet.LogQuery {
	q := fleet.LogQuery{Lines: a.Lines, Since: a.Since}
	switch {
	case a.All:
		q.Lines = 0
	case q.Lines == 0:
		q.Lines = DefaultLogLines
	}
	return q
}

// StopsInFlight is how many workers a stop of several stops at once. Each
// stop mostly waits on systemd (signals, jobs, the unit going inactive),
// so a few overlap well; all of 500 at once would have every stop polling
// its unit together and run each past its time budget.
const StopsInFlight = 16

// stopSeveral stops a.IDs, or with a.All every live worker of the caller,
// StopsInFlight at a time, and reports each; the error, when some failed,
// is a *StopsError.
func stopSeveral(ctx context.Context, fl *fleet.Fleet, a Args, opts fleet.StopOptions) (output.Report, error) {
	var ids []string
	if a.All {
		ws, err := fl.List(ctx, false)
		if err != nil {
			return nil, err
		}
		for _, w := range ws {
			if w.State.Live() && !slices.Contains(ids, w.ID) {
				ids = append(ids, w.ID)
			}
		}
	} else {
		for _, id := range a.IDs {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	rep := output.StopsReport{Stops: make([]output.StopItem, len(ids))}
	slots := make(chan struct{}, StopsInFlight)
	var wg sync.WaitGroup
	for i, id := range ids {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			res, err := fl.StopWith(ctx, id, opts)
			rep.Stops[i] = output.StopItem{ID: id, Res: res, Err: err}
		})
	}
	wg.Wait()
	var failed []error
	for _, it := range rep.Stops {
		if it.Err != nil {
			failed = append(failed, it.Err)
		}
	}
	if len(failed) > 0 {
		return rep, &StopsError{Total: len(ids), Errs: failed}
	}
	return rep, nil
}

// StopsError is a stop of several workers of which some failed: each
// failure is kept, and the CLI's exit status is the most serious of
// theirs. Its message only counts them ("1 of 2 workers not stopped"), as
// systemctl and docker do: the report beside it says which failed and why,
// a line per worker, so the reasons are not printed twice.
type StopsError struct {
	Total int
	Errs  []error
}

func (e *StopsError) Error() string {
	return fmt.Sprintf("%d of %s not stopped", len(e.Errs), output.Plural(e.Total, "worker"))
}

// Unwrap gives the failures.
func (e *StopsError) Unwrap() []error { return e.Errs }

// othersRecords is how many worker records other managers than fe's
// caller have: what list leaves out without all (0 when the registry
// cannot say).
func othersRecords(ctx context.Context, fe *factory.FleetEnv) int {
	if fe.Registry == nil {
		return 0
	}
	ws, err := fe.Registry.List(ctx, fleet.Filter{})
	if err != nil {
		return 0
	}
	n := 0
	for _, w := range ws {
		if w.Manager != fe.Caller {
			n++
		}
	}
	return n
}

// CheckPairArgs checks doctor's arguments: two session ids with pair,
// none without.
func CheckPairArgs(pair bool, args []string) error {
	switch {
	case pair && len(args) != 2:
		return factory.Usagef("doctor --pair needs two session ids, A and B (usage: agent-fleet doctor --pair A B), not %d", len(args))
	case !pair && len(args) > 0:
		return factory.Usagef("doctor takes no arguments; to test two sessions: agent-fleet doctor --pair A B")
	}
	return nil
}

// errNegativeTimeout refuses a negative timeout (wait's, doctor --pair's).
var errNegativeTimeout = factory.Usagef("the timeout must not be negative (agent_fleet: timeout; CLI: --timeout)")

// CheckSpawnID checks spawn's --id before anything is opened, so that a
// bad id is the answer whatever the host has: given says the flag was.
func CheckSpawnID(given bool, id string) error {
	switch {
	case !given:
		return factory.Usagef(`required flag(s) "id" not set`)
	case id == "":
		return factory.Usagef("--id is empty: give the worker an id (letters, digits, _ and -)")
	}
	return fleet.ValidID(id)
}

// Host performs the host actions, doctor and capabilities, which work on
// every platform and need no user manager.
func Host(ctx context.Context, f *factory.Factory, a Args) (output.Report, error) {
	switch a.Action {
	case "doctor":
		p, err := f.Paths()
		if err != nil {
			return nil, err
		}
		if len(a.Pair) > 0 {
			if err := CheckPairArgs(true, a.Pair); err != nil {
				return nil, err
			}
			if a.Timeout < 0 {
				return nil, errNegativeTimeout
			}
			if factory.LiveExecWorker(ctx, p, a.Pair[1]) {
				// Its holder admits only its own processes, so B would
				// have to answer itself, and a command has no turns.
				return nil, factory.Usagef("%q is a worker that runs a command: only its own processes may act for it, and it has no turns in which to answer an ask; "+
					"pair a session held by agent-fleet mcp or intercom listen, or a coding-agent worker", a.Pair[1])
			}
			res, err := intercom.PairTest(ctx, intercom.PairConfig{Paths: p, A: a.Pair[0], B: a.Pair[1], Wait: a.Timeout})
			if err != nil {
				return nil, err
			}
			return output.PairReport{R: res}, nil
		}
		return output.DoctorReport{Checks: f.DoctorChecks(ctx, fleet.DoctorConfig{Paths: p})}, nil
	case "capabilities":
		return output.CapabilitiesReport{C: f.Capabilities(ctx)}, nil
	}
	return nil, factory.Usagef("%s is not a host action", a.Action)
}
