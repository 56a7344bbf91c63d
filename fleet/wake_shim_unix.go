//go:build !windows

package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// runHarnessShim is RunShim for the coding-agent kinds: the session is
// registered and served (through tracker); it runs the wake loop until the
// worker is stopped, signals READY once the first turn runs, and exits 0
// on an orderly stop.
func runHarnessShim(ctx context.Context, cfg ShimConfig, sess *intercom.Session, tracker *turnTracker, regs *RegistryHandle, joined <-chan string, log *slog.Logger) int {
	dir := WorkerDir(cfg.Paths, cfg.WorkerID, cfg.RunID)
	spec, err := harness.ReadSpec(dir)
	if err != nil {
		fmt.Fprintf(cfg.Stderr, "agent-fleet worker shim: %v\n", err)
		return ShimExitExec
	}
	if spec.Kind != cfg.Kind {
		fmt.Fprintf(cfg.Stderr, "agent-fleet worker shim: the spec is for a %s worker, not %s\n", spec.Kind, cfg.Kind)
		return ShimExitExec
	}
	if len(cfg.Command) > 0 {
		spec.Command = cfg.Command // the unit's argv is the authority
	}
	if len(cfg.AgentFleet) == 0 {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintf(cfg.Stderr, "agent-fleet worker shim: %v\n", err)
			return ShimExitExec
		}
		cfg.AgentFleet = []string{exe}
	}
	loop, err := newWakeLoop(wakeConfig{
		WorkerID: cfg.WorkerID, RunID: cfg.RunID, Dir: dir, Spec: spec,
		Session: sess, Tracker: tracker, Registry: regs,
		MCP: harness.WorkerMCPServer(cfg.AgentFleet, spec.Kind, os.Environ(), cfg.AgentFleetEnv),
		Env: harnessEnv(), FirstManager: os.Getenv(EnvManagerID),
		Log: cfg.Stderr, Logger: log, Backoff: cfg.TurnBackoff, Joined: joined,
	})
	if err != nil {
		fmt.Fprintf(cfg.Stderr, "agent-fleet worker shim: %v\n", err)
		return ShimExitExec
	}

	// SIGTERM (a stop), SIGINT and SIGHUP end the loop: the running turn's
	// process group is ended, and the shim exits 0.
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(signals)
	go func() {
		select {
		case sig := <-signals:
			log.Info("stopping", "signal", sig)
			stop()
		case <-lctx.Done():
		}
	}()
	err = loop.run(lctx, func() {
		if err := notifyReady(); err != nil {
			log.Warn("sd_notify READY failed", "err", err)
		}
	})
	code := 0
	if errors.Is(err, errFirstTurn) {
		fmt.Fprintf(cfg.Stderr, "agent-fleet worker shim: cannot execute %s: %s\n", spec.Command[0], loop.state.Last.Error)
		code = ShimExitExec
	}
	recordExit(ctx, regs, cfg.WorkerID, cfg.RunID, "exited", code, log)
	return code
}
