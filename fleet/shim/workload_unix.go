//go:build !windows

package shim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// workload is what a worker unit runs under its shim: the worker's command
// (execWorkload) or a coding agent's wake loop (wakeWorkload). It is
// go-plugin's runner.Runner cut to what Run needs: there is no kill,
// because a worker is stopped by systemd's signal, which each workload
// handles its own way (a command gets it forwarded; the wake loop ends the
// running turn's process group).
type workload interface {
	// signals are the signals the workload acts on. Run catches them from
	// before start until it returns, so that a second stop signal cannot
	// cut the exit record short, and hands them to start.
	signals() []os.Signal
	// start runs the workload and returns once it runs (READY follows), or
	// errStopped when it was stopped before it ran, or why it could not be
	// started. Run calls it once.
	start(ctx context.Context, sig <-chan os.Signal) error
	// wait returns how the workload ended, once it has (at once after a
	// start that failed). It may be called any number of times.
	wait() ending
}

// errStopped: the workload was stopped before it ran (no READY, nothing
// to report).
var errStopped = errors.New("stopped before it ran")

// ending is how a workload ended.
type ending struct {
	// code is the shim's exit status.
	code int
	// exitCode and status are what the registry records: systemd's
	// ExecMainCode name ("exited", "killed", "dumped") and the exit status
	// or signal number. exitCode "" records nothing: a command that never
	// ran leaves its end to systemd's record (and its spawn fails).
	exitCode string
	status   int
}

// execWorkload runs the worker's command with /dev/null as its standard
// input and every signal the shim gets forwarded to it.
type execWorkload struct {
	argv           []string
	stdout, stderr io.Writer
	done           chan struct{} // closed once the command ended or did not start
	end            ending
}

func (w *execWorkload) signals() []os.Signal {
	return []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}
}

func (w *execWorkload) start(_ context.Context, sig <-chan os.Signal) error {
	w.done = make(chan struct{})
	cmd := exec.Command(w.argv[0], w.argv[1:]...)
	cmd.Env = commandEnv(os.Environ())
	cmd.Stdout, cmd.Stderr = direct(w.stdout), direct(w.stderr)
	devnull, err := os.Open(os.DevNull)
	if err == nil {
		cmd.Stdin = devnull
	}
	closeStdin := func() {
		if devnull != nil {
			devnull.Close()
		}
	}
	if err := cmd.Start(); err != nil {
		closeStdin()
		w.end = ending{code: ExitExec}
		close(w.done)
		return fmt.Errorf("cannot execute %s: %w", w.argv[0], err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	go func() {
		defer close(w.done)
		defer closeStdin()
		for {
			select {
			case s := <-sig:
				_ = cmd.Process.Signal(s)
			case <-waited:
				w.end = exitOf(cmd.ProcessState)
				return
			}
		}
	}()
	return nil
}

// endedWithin waits up to d for the command to end and reports whether
// it did.
func (w *execWorkload) endedWithin(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.done:
		return true
	case <-t.C:
		return false
	}
}

func (w *execWorkload) wait() ending {
	<-w.done
	return w.end
}

// exitOf turns a finished command into the shim's exit code and the
// systemd-style (code, status) pair recorded for it.
func exitOf(ps *os.ProcessState) ending {
	if ps == nil {
		return ending{code: ExitExec, exitCode: "exited", status: ExitExec}
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		kind := "killed"
		if ws.CoreDump() {
			kind = "dumped"
		}
		return ending{code: 128 + int(ws.Signal()), exitCode: kind, status: int(ws.Signal())}
	}
	return ending{code: ps.ExitCode(), exitCode: "exited", status: ps.ExitCode()}
}

// direct is the file w writes to, when w wraps one (Unwrap() io.Writer):
// the command then gets that file as its descriptor — the unit's log, as
// systemd opened it — and writes there itself, in its own order and
// whatever becomes of the shim, not through a pipe into this process.
func direct(w io.Writer) io.Writer {
	for {
		if f, ok := w.(*os.File); ok {
			return f
		}
		u, ok := w.(interface{ Unwrap() io.Writer })
		if !ok {
			return w
		}
		w = u.Unwrap()
	}
}
