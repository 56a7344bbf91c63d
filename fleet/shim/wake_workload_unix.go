//go:build !windows

package shim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"syscall"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// wakeWorkload is a coding agent under the shim: the wake loop of the spec
// Spawn wrote, over the held session (served through its turnTracker). It
// runs once the first turn's harness runs (at once without a task); a
// SIGTERM (a stop), SIGINT or SIGHUP ends the loop and the running turn's
// process group, and the shim exits 0.
type wakeWorkload struct {
	loop *wakeLoop
	exe  string // the harness executable, for the report of a first turn that cannot start
	log  *slog.Logger

	running  chan struct{} // closed when the loop says the worker is ready
	done     chan struct{} // closed when the loop ended
	startErr error         // why the first turn could not be started
	end      ending
}

// newWakeWorkload reads the worker's spec and prepares its wake loop.
func newWakeWorkload(cfg Config, s *held, log *slog.Logger) (*wakeWorkload, error) {
	dir := fleet.WorkerDir(cfg.Paths, cfg.WorkerID, cfg.RunID)
	spec, err := harness.ReadSpec(dir)
	if err != nil {
		return nil, err
	}
	if spec.Kind != cfg.Kind {
		return nil, fmt.Errorf("the spec is for a %s worker, not %s", spec.Kind, cfg.Kind)
	}
	if len(cfg.Command) > 0 {
		spec.Command = cfg.Command // the unit's argv is the authority
	}
	if len(cfg.AgentFleet) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cfg.AgentFleet = []string{exe}
	}
	loop, err := newWakeLoop(wakeConfig{
		WorkerID: cfg.WorkerID, RunID: cfg.RunID, Dir: dir, Spec: spec,
		Session: s.Session, Tracker: s.tracker, Registry: s.regs,
		MCP: harness.WorkerMCPServer(cfg.AgentFleet, spec.Kind, os.Environ(), cfg.AgentFleetEnv),
		Env: commandEnv(os.Environ()), FirstManager: os.Getenv(fleet.EnvManagerID),
		Log: cfg.Stderr, Logger: log, Backoff: cfg.TurnBackoff, Joined: s.joined, Presence: s.presence, Kept: s.kept,
	})
	if err != nil {
		return nil, err
	}
	if harness.RelaysPermissions(spec.Kind, spec.Permission) {
		s.permission.Store(&permissionRelay{workerID: cfg.WorkerID, runID: cfg.RunID, spec: spec, home: os.Getenv("HOME"),
			session: s.Session, status: s.presence, regs: s.regs, manager: loop.manager, log: log, askWait: intercom.MaxAskWait})
	}
	return &wakeWorkload{loop: loop, exe: spec.Command[0], log: log,
		running: make(chan struct{}), done: make(chan struct{})}, nil
}

func (w *wakeWorkload) signals() []os.Signal {
	return []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP}
}

func (w *wakeWorkload) start(ctx context.Context, sig <-chan os.Signal) error {
	lctx, stop := context.WithCancel(ctx)
	go func() {
		select {
		case s := <-sig:
			w.log.Info("stopping", "signal", s)
			stop()
		case <-lctx.Done():
		}
	}()
	go func() {
		defer close(w.done)
		defer stop()
		err := w.loop.run(lctx, func() { close(w.running) })
		w.end = ending{code: 0, exitCode: "exited", status: 0}
		if errors.Is(err, errFirstTurn) {
			w.startErr = fmt.Errorf("cannot execute %s: %s", w.exe, w.loop.state.Last.Error)
			w.end = ending{code: ExitExec, exitCode: "exited", status: ExitExec}
		}
	}()
	select {
	case <-w.running:
		return nil
	case <-w.done:
	}
	select {
	case <-w.running:
		return nil // it ran, and was stopped at once
	default:
	}
	if w.startErr != nil {
		return w.startErr
	}
	return errStopped
}

func (w *wakeWorkload) wait() ending {
	<-w.done
	return w.end
}
