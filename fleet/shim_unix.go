//go:build !windows

package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/units"
)

// ShimConfig configures RunShim, the main process of a worker unit.
type ShimConfig struct {
	Paths           intercom.Paths
	WorkerID, RunID string
	// Command is the worker's argv (argv[0] absolute).
	Command []string
	// Start launches a broker when none answers (it must not start one in
	// the worker's own cgroup: cmd passes the transient-unit starter).
	Start  intercom.BrokerStarter
	Logger *slog.Logger
	// Stdout and Stderr receive the command's output (the unit's log).
	Stdout, Stderr io.Writer
	// Kind is the worker kind: "" or "exec" runs Command; a coding-agent
	// kind (harness.IsKind) runs the wake loop of the spec Spawn wrote to
	// WorkerDir, with Command as the harness executable and extra args.
	Kind string
	// AgentFleet is how a turn's harness runs agent-fleet for its MCP
	// server; nil is the shim's own executable. AgentFleetEnv is added to
	// that server's environment.
	AgentFleet, AgentFleetEnv []string
	// TurnBackoff is the wait after a failed turn (doubling per failure in
	// a row); 0 is DefaultTurnBackoff.
	TurnBackoff time.Duration
}

// Exit statuses of the shim itself, when the command never ran.
const (
	ShimExitNoSession = 70  // the intercom session could not be registered
	ShimExitExec      = 127 // the command could not be executed
)

// RunShim holds the worker's intercom session (id = worker id) and serves
// it to the worker's own processes only, runs the command, tells systemd
// READY once the command was executed and the session is registered,
// forwards signals, and when the command ends records its exit status and
// returns it (128+signal for a signal) for the shim to exit with.
func RunShim(ctx context.Context, cfg ShimConfig) int {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(cfg.Stderr, "agent-fleet worker shim: "+format+"\n", args...)
		return code
	}
	for _, k := range inheritedStripped(os.Environ()) {
		os.Unsetenv(k)
	}
	id, err := intercom.ResolveIdentity(intercom.IdentityOptions{Kind: intercom.Worker, WorkerID: cfg.WorkerID})
	if err != nil {
		return fail(ShimExitNoSession, "identity: %v", err)
	}
	// The registry is opened when first needed, off the way to READY.
	regs := NewRegistryHandle(RegistryPath(cfg.Paths), true)
	defer regs.Close()
	joined := make(chan string, 1) // the wake loop's: a manager may have connected
	sess, err := intercom.OpenSession(ctx, intercom.SessionConfig{
		Paths: cfg.Paths, Identity: id, Start: cfg.Start, Reconnect: true, Logger: log,
		OnSessionJoined: func(id string) {
			select {
			case joined <- id:
			default:
			}
		},
	})
	if err != nil {
		return fail(ShimExitNoSession, "cannot register intercom session %q: %v", id.SessionID, err)
	}
	defer sess.Close()

	var ops intercom.Ops = sess
	var tracker *turnTracker
	if harness.IsKind(cfg.Kind) {
		tracker = &turnTracker{Ops: sess}
		ops = tracker
	}
	cg, _ := units.OpenCgroups("/")
	holder, err := intercom.ListenHolder(intercom.HolderConfig{
		Paths: cfg.Paths, SessionID: id.SessionID, Ops: ops, Logger: log,
		AllowPeer: sameCgroup(cg),
		Extra:     shimOps(regs, cfg.WorkerID, cfg.RunID),
	})
	if err != nil {
		return fail(ShimExitNoSession, "cannot serve the session holder: %v", err)
	}
	hctx, stopHolder := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		_ = holder.Serve(hctx)
		close(served)
	}()
	defer func() { stopHolder(); <-served }()
	if tracker != nil {
		return runHarnessShim(ctx, cfg, sess, tracker, regs, joined, log)
	}

	cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
	cmd.Env = commandEnv(os.Environ())
	cmd.Stdout, cmd.Stderr = cfg.Stdout, cfg.Stderr
	if devnull, err := os.Open(os.DevNull); err == nil {
		cmd.Stdin = devnull
		defer devnull.Close()
	}
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(signals)
	if err := cmd.Start(); err != nil {
		return fail(ShimExitExec, "cannot execute %s: %v", cfg.Command[0], err)
	}
	if err := notifyReady(); err != nil {
		log.Warn("sd_notify READY failed", "err", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var waitErr error
wait:
	for {
		select {
		case sig := <-signals:
			_ = cmd.Process.Signal(sig)
		case waitErr = <-done:
			break wait
		}
	}
	code, exitCode, status := exitOf(cmd.ProcessState, waitErr)
	recordExit(ctx, regs, cfg.WorkerID, cfg.RunID, exitCode, status, log)
	return code
}

// recordExit records a shim's end — its command's, or its own for a
// coding-agent worker — in the registry: exitCode is systemd's
// ExecMainCode name ("exited", "killed"). A stop cancels ctx; the exit is
// recorded all the same.
func recordExit(ctx context.Context, regs *RegistryHandle, id, run, exitCode string, status int, log *slog.Logger) {
	reg, err := regs.Get(context.WithoutCancel(ctx))
	if err != nil || reg == nil {
		log.Warn("registry unavailable; the exit status is left to systemd", "err", err)
		return
	}
	_, err = reg.Update(context.WithoutCancel(ctx), id, run, func(r *Worker) error {
		r.HasExit, r.ExitCode, r.ExitStatus = true, exitCode, status
		r.EndedAt = time.Now()
		if r.State == StateRunning || r.State == StateProvisioning {
			r.State = StateExited
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		log.Warn("could not record the exit status", "err", err)
	}
}

// ShimOpManager asks a worker's shim holder who manages the worker now
// (after an adoption, not the manager it was spawned by). Result: Manager.
const ShimOpManager = "manager"

// Manager is the answer to ShimOpManager.
type Manager struct {
	WorkerID     string `json:"workerId"`
	RunID        string `json:"runId"`
	Manager      string `json:"manager"`
	FirstManager string `json:"firstManager"`
}

// shimOps serves ShimOpManager from the registry, so that a worker learns
// its current manager without restarting.
func shimOps(regs *RegistryHandle, id, run string) func(context.Context, string, json.RawMessage) (any, bool, error) {
	return func(ctx context.Context, op string, _ json.RawMessage) (any, bool, error) {
		if op != ShimOpManager {
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

// exitOf turns a finished command into the shim's exit code and the
// systemd-style (code, status) pair recorded for it.
func exitOf(ps *os.ProcessState, err error) (code int, exitCode string, status int) {
	if ps == nil {
		return ShimExitExec, "exited", ShimExitExec
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		kind := "killed"
		if ws.CoreDump() {
			kind = "dumped"
		}
		return 128 + int(ws.Signal()), kind, int(ws.Signal())
	}
	return ps.ExitCode(), "exited", ps.ExitCode()
}

// commandEnv is the shim's environment minus what is systemd's business
// with the shim alone, and EnvShimKeep.
func commandEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if strings.HasPrefix(kv, "NOTIFY_SOCKET=") || strings.HasPrefix(kv, "MAINPID=") || strings.HasPrefix(kv, EnvShimKeep+"=") {
			continue
		}
		out = append(out, kv)
	}
	return out
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
