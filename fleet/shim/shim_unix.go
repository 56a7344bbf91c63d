//go:build !windows

package shim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/units"
)

// Run is a worker unit's main process: it holds the worker's intercom
// session (id = worker id) and serves it to the worker's own processes
// only, starts the workload, tells systemd READY once the workload runs
// (the command was executed, or a coding agent's first turn started), and
// when the workload ends records how in the registry and returns the
// status for the shim to exit with: the command's (128+signal for a
// signal), 0 for a coding agent stopped in order, ExitNoSession or
// ExitExec when the workload never ran. Signals the workload acts on
// (stops, and for a command every signal systemd relays) are caught until
// Run returns. The registry is closed by then, its workers.json view
// written: the caller may os.Exit at once.
func Run(ctx context.Context, cfg Config) int {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	fail := func(code int, err error) int {
		fmt.Fprintf(cfg.Stderr, "agent-fleet worker shim: %v\n", err)
		return code
	}
	for _, k := range inheritedStripped(os.Environ()) {
		os.Unsetenv(k)
	}
	s, err := hold(ctx, cfg, log)
	if err != nil {
		return fail(ExitNoSession, err)
	}
	defer s.close()
	defer indexLogTimes(ctx, cfg, log)()
	// What was kept for the worker before it registered, before its
	// workload runs; then again after every later registration.
	takeKept(ctx, s.Session, s.regs, cfg.WorkerID, cfg.RunID, s.kept, log)
	kctx, stopKept := context.WithCancel(ctx)
	keeping := make(chan struct{})
	go func() {
		defer close(keeping)
		for {
			select {
			case <-kctx.Done():
				return
			case <-s.registered:
				takeKept(kctx, s.Session, s.regs, cfg.WorkerID, cfg.RunID, s.kept, log)
			}
		}
	}()
	defer func() { stopKept(); <-keeping }()
	var w workload = &execWorkload{argv: cfg.Command, stdout: cfg.Stdout, stderr: cfg.Stderr}
	if !harness.IsKind(cfg.Kind) {
		// A command works until it ends; what it says of itself
		// (set-summary) is the note beside it.
		s.presence.SetState(ctx, stateWorking)
	}
	if harness.IsKind(cfg.Kind) {
		if w, err = newWakeWorkload(cfg, s, log); err != nil {
			return fail(ExitExec, err)
		}
	}

	caught := make(chan os.Signal, 4)
	signal.Notify(caught, w.signals()...)
	defer signal.Stop(caught)
	// A SIGTERM without a stop fence after the maximum runtime is
	// systemd's stop at the limit.
	stops := &endCause{started: time.Now(), maxRuntime: maxRuntime()}
	// A stop writes its fence before its first signal: read it as the
	// SIGTERM comes, while the workload ends.
	fence := &fenceRead{read: func() bool { return stopFenced(ctx, s.regs, cfg.WorkerID, cfg.RunID) }}
	stops.onTerm = fence.start
	sig := stops.watch(caught)
	defer stops.close()
	recorded := false
	// What runs once the shim is ready ends before the end is told and the
	// session closed: it delivers owed notices too, and a send cut off by
	// the close, or by the exit, would leave one claimed or unknown, for
	// the janitor to retry minutes later.
	var settling sync.WaitGroup
	switch err := w.start(ctx, sig); {
	case err == nil:
		if ew, ok := w.(*execWorkload); ok && ew.endedWithin(readyGrace(cfg.ReadyGrace)) {
			// It ended at once: recorded before READY, the spawn that
			// READY releases reads how.
			recordExit(ctx, s.regs, cfg.WorkerID, cfg.RunID, w.wait(), stops, false, log)
			recorded = true
		}
		if err := notifyReady(); err != nil {
			log.Warn("sd_notify READY failed", "err", err)
		}
		// The exit is recorded on a stop's path: open the registry and
		// parse that write now, off the way to READY, so that recording
		// it is one write (parsing its 37-column UPDATE took longer).
		settling.Go(func() {
			if reg, err := s.regs.Get(context.WithoutCancel(ctx)); err == nil && reg != nil {
				_, _ = reg.GetRun(context.WithoutCancel(ctx), cfg.WorkerID, cfg.RunID)
				_ = reg.PrepareUpdate(context.WithoutCancel(ctx))
			}
			// What earlier runs of this id left owed: their sender,
			// a short registration of this id, cannot while we hold it.
			deliverOwn(ctx, s, cfg.WorkerID, log)
			if cfg.Settled != nil {
				cfg.Settled()
			}
		})
	case !errors.Is(err, errStopped):
		fmt.Fprintf(cfg.Stderr, "agent-fleet worker shim: %v\n", err)
	}
	end := w.wait()
	settling.Wait()
	// Not fenced at the SIGTERM (or none came): a stop may have begun
	// since.
	stopping := fence.fenced() || stopFenced(ctx, s.regs, cfg.WorkerID, cfg.RunID)
	if stopping {
		// A stop's end is recorded, and told, by the stop: the session has
		// nothing left to say, and its close (a round trip to the broker)
		// overlaps recording the exit. s.close waits for it.
		stopKept()
		<-keeping
		go s.Held.Close()
	}
	if !recorded {
		recordExit(ctx, s.regs, cfg.WorkerID, cfg.RunID, end, stops, stopping, log)
	}
	if !stopping {
		// An end the shim recorded itself is told from the worker's
		// session while the shim still holds it.
		deliverOwn(ctx, s, cfg.WorkerID, log)
	}
	return end.code
}

// stopFenced reports whether the worker's record has a stop's fence (the
// stop writes it before its first signal).
func stopFenced(ctx context.Context, regs *fleet.RegistryHandle, id, run string) bool {
	reg, err := regs.Get(context.WithoutCancel(ctx))
	if err != nil || reg == nil {
		return false
	}
	w, err := reg.GetRun(context.WithoutCancel(ctx), id, run)
	return err == nil && w.State == fleet.StateStopping
}

// fenceRead reads the stop fence once, on a goroutine of its own, when
// start is called (the first SIGTERM) before fenced is.
type fenceRead struct {
	read func() bool

	mu     sync.Mutex
	over   bool          // fenced was called: a later start reads nothing
	done   chan struct{} // non-nil once a read started; closed when it ended
	result bool
}

func (f *fenceRead) start() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done != nil || f.over {
		return
	}
	f.done = make(chan struct{})
	go func() {
		defer close(f.done)
		f.result = f.read()
	}()
}

// fenced is what the read started found, waiting for it; false when
// none was started.
func (f *fenceRead) fenced() bool {
	f.mu.Lock()
	f.over = true
	done := f.done
	f.mu.Unlock()
	if done == nil {
		return false
	}
	<-done
	return f.result
}

// indexLogTimes keeps the time index of the worker's log file, when it
// logs to one, until the returned function is called (which waits for the
// last mark).
func indexLogTimes(ctx context.Context, cfg Config, log *slog.Logger) (stop func()) {
	path := fleet.LogFile(cfg.Paths, cfg.WorkerID, cfg.RunID)
	if _, err := os.Stat(path); err != nil {
		return func() {} // the journal keeps its own times
	}
	ictx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := fleet.IndexLogTimes(ictx, path); err != nil {
			log.Warn("no time index for the log", "err", err)
		}
	}()
	return func() { cancel(); <-done }
}

// deliverOwn sends the worker-ended notices owed for this worker id
// through the shim's own session (docs/architecture.md "Worker-ended
// notices"); a manager that is not connected gets them later, from
// another process.
func deliverOwn(ctx context.Context, s *held, id string, log *slog.Logger) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	reg, err := s.regs.Get(dctx)
	if err != nil || reg == nil {
		return
	}
	if _, err := fleet.DeliverEnded(dctx, reg, fleet.NoticeFilter{ID: id}, fleet.SessionSender(s.Session)); err != nil {
		log.Debug("ended notice not delivered yet", "err", err)
	}
}

// maxRuntime is the worker's maximum runtime from its unit (0: none).
func maxRuntime() time.Duration {
	d, _ := time.ParseDuration(os.Getenv(fleet.EnvMaxRuntime))
	return d
}

// endCause notes what the shim needs to say why its workload ended: a
// SIGTERM, and how long after the shim started it came.
type endCause struct {
	started    time.Time
	maxRuntime time.Duration
	// onTerm, when set, is called at the first SIGTERM, before the
	// signal is passed on.
	onTerm func()
	termed atomic.Bool
	done   chan struct{}
}

// watch passes caught's signals on, noting a SIGTERM.
func (c *endCause) watch(caught <-chan os.Signal) <-chan os.Signal {
	out := make(chan os.Signal, 4)
	c.done = make(chan struct{})
	go func() {
		for {
			select {
			case s := <-caught:
				if s == syscall.SIGTERM && !c.termed.Swap(true) && c.onTerm != nil {
					c.onTerm()
				}
				select {
				case out <- s:
				case <-c.done:
					return
				}
			case <-c.done:
				return
			}
		}
	}()
	return out
}

func (c *endCause) close() { close(c.done) }

// atMaxRuntime: the workload got a SIGTERM once its maximum runtime had
// passed — systemd's RuntimeMaxSec counts from the unit's activation,
// which is after the shim started, so a stop at the limit always is.
// systemd signals the unit's whole cgroup at once, so a workload that
// died of that SIGTERM (end) may be reaped before the shim's own signal
// has reached its watcher: either tells.
func (c *endCause) atMaxRuntime(end ending) bool {
	if c == nil || c.maxRuntime <= 0 || time.Since(c.started) < c.maxRuntime {
		return false
	}
	return c.termed.Load() || end.exitCode == "killed" && end.status == int(syscall.SIGTERM)
}

func readyGrace(d time.Duration) time.Duration {
	if d <= 0 {
		return fleet.DefaultReadyGrace
	}
	return d
}

// held is what the shim holds for its workload: the registry (opened right
// after READY, or when first needed before) and the worker's session, held
// with its holder socket serving the worker's own processes.
type held struct {
	regs *fleet.RegistryHandle
	*intercom.Held
	// tracker is the holder's Ops for a coding agent (nil for a command):
	// the session's, noting whom each turn messaged.
	tracker *turnTracker
	// presence owns the session's presence status: the wake loop sets the
	// worker's state, the worker's own set_summary its note, and holder
	// operations may set an overlay (Presence.SetOverlay).
	presence *Presence
	// joined receives the ids of sessions that join, for the wake loop:
	// a manager may have connected.
	joined chan string
	// permission relays a coding agent's permission prompts to its
	// manager (nil: none are relayed).
	permission atomic.Pointer[permissionRelay]
	// registered is told of every registration: what was kept for the
	// worker meanwhile is taken then (deferred.go).
	registered chan struct{}
	// kept names the kept messages taken whose turn has not run.
	kept *keptSet
}

// hold registers the worker's session and serves its holder, to the
// processes of the worker's cgroup only (intercom.Hold).
func hold(ctx context.Context, cfg Config, log *slog.Logger) (*held, error) {
	id, err := intercom.ResolveIdentity(intercom.IdentityOptions{Kind: intercom.Worker, WorkerID: cfg.WorkerID})
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	s := &held{regs: fleet.NewRegistryHandle(fleet.RegistryPath(cfg.Paths), true), joined: make(chan string, 1),
		registered: make(chan struct{}, 1), kept: &keptSet{}}
	cg, _ := units.OpenCgroups("/")
	s.Held, err = intercom.Hold(ctx, intercom.HoldConfig{
		Session: intercom.SessionConfig{Paths: cfg.Paths, Identity: id, Start: cfg.Start, Logger: log,
			OnSessionJoined: func(id string) {
				select {
				case s.joined <- id:
				default:
				}
			},
			OnRegistered: func() {
				select {
				case s.registered <- struct{}{}:
				default:
				}
			},
			Deferral: fleet.Deferral{Registry: s.regs}, History: cfg.History, Share: cfg.Share},
		Wrap: func(sess *intercom.Session) (intercom.Ops, intercom.HolderExtra) {
			s.presence = newPresence(sess, log)
			ops := presenceOps{Ops: sess, p: s.presence}
			if !harness.IsKind(cfg.Kind) {
				return ops, shimOps(s.regs, cfg.WorkerID, cfg.RunID)
			}
			s.tracker = &turnTracker{Ops: ops}
			return s.tracker, s.withPermission(shimOps(s.regs, cfg.WorkerID, cfg.RunID))
		},
		AllowPeer:     sameCgroup(cg),
		RequireHolder: true,
	})
	if err != nil {
		s.regs.Close()
		if errors.Is(err, intercom.ErrHolderNotServed) {
			return nil, err
		}
		return nil, fmt.Errorf("cannot register intercom session %q: %w", id.SessionID, err)
	}
	return s, nil
}

// close stops the holder, closes the session (or waits for a close begun
// already: Held.Close runs once) and then the registry, which waits for
// its workers.json view.
func (s *held) close() {
	s.Held.Close()
	s.regs.Close()
}

// recordExit records a workload's end in the registry; an end without an
// exitCode (a command that never ran) is left to systemd's record. A stop
// cancels ctx; the exit is recorded all the same. What the worker's
// worktree holds is recorded too, except on a stop (stopping: its fence
// was read): the stop records that once the cgroup is proven empty, or the
// fleet does when it finds the stopping worker's unit ended, and the shim's
// exit, which the stop waits for, does not wait for git.
func recordExit(ctx context.Context, regs *fleet.RegistryHandle, id, run string, end ending, cause *endCause, stopping bool, log *slog.Logger) {
	if end.exitCode == "" {
		return
	}
	reg, err := regs.Get(context.WithoutCancel(ctx))
	if err != nil || reg == nil {
		log.Warn("registry unavailable; the exit status is left to systemd", "err", err)
		return
	}
	_, err = reg.Update(context.WithoutCancel(ctx), id, run, func(r *fleet.Worker) error {
		r.HasExit, r.ExitCode, r.ExitStatus = true, end.exitCode, end.status
		r.EndedAt = time.Now()
		if r.MainPID == 0 {
			// The shim is its unit's main process: a command that ended
			// before its spawn read the unit (gone by then, MainPID 0)
			// still has its pid recorded.
			r.MainPID = os.Getpid()
		}
		if r.State == fleet.StateRunning || r.State == fleet.StateProvisioning {
			r.State = fleet.StateExited
			if r.StopReason == "" && cause.atMaxRuntime(end) {
				r.StopReason = fleet.StopMaxRuntime
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, fleet.ErrNotFound) {
		log.Warn("could not record the exit status", "err", err)
	}
	if stopping {
		return
	}
	if err := fleet.RecordWorktreeEnd(context.WithoutCancel(ctx), reg, id, run); err != nil {
		log.Warn("could not record what the worktree holds", "err", err)
	}
}

// shimOps serves OpManager from the registry, so that a worker learns its
// current manager without restarting.
func shimOps(regs *fleet.RegistryHandle, id, run string) func(context.Context, string, json.RawMessage) (any, bool, error) {
	return func(ctx context.Context, op string, _ json.RawMessage) (any, bool, error) {
		if op != OpManager {
			return nil, false, nil
		}
		reg, err := regs.Get(ctx)
		if err != nil {
			return nil, true, err
		}
		w, err := reg.GetRun(ctx, id, run)
		if err != nil {
			return nil, true, err
		}
		return Manager{WorkerID: w.ID, RunID: w.RunID, Manager: w.Manager, FirstManager: w.FirstManager}, true, nil
	}
}

// sameCgroup admits only processes in the shim's own cgroup or below it:
// the worker's processes, and nobody else, may speak as the worker.
func sameCgroup(cg *units.Cgroups) func(pid int) bool {
	if cg == nil {
		return func(int) bool { return false }
	}
	own, err := cg.Membership(os.Getpid())
	if err != nil || own.Path == "" || own.Path == "/" {
		return func(int) bool { return false }
	}
	return func(pid int) bool {
		m, err := cg.Membership(pid)
		return err == nil && (m.Path == own.Path || strings.HasPrefix(m.Path, own.Path+"/"))
	}
}
