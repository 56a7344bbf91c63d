//go:build !windows

package shim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
)

// Limits of one turn's process.
const (
	maxTurnStdout  = 32 << 20        // bytes of standard output kept for parsing
	stderrTailKeep = 20              // lines of error output kept for reports
	turnStopGrace  = 2 * time.Second // SIGTERM → SIGKILL of a turn's process group
	turnPipeDelay  = 2 * time.Second // how long output pipes may outlive the harness
)

// turnExit is how a turn's process went.
type turnExit struct {
	Stdout     []byte
	StderrTail []string
	// Status is the exit status, -1 when a signal ended it.
	Status int
	// StartErr: the process could not be started.
	StartErr error
	// TimedOut: the turn ran past its bound and was killed.
	TimedOut bool
	// Stopped: the worker was stopped during the turn.
	Stopped bool
}

// turnRunner runs one turn's process. started is called once it runs.
type turnRunner func(ctx context.Context, cmd *harness.TurnCommand, opts turnProcOptions, started func()) turnExit

type turnProcOptions struct {
	Dir     string
	Env     []string // the harness's base environment (cmd.Env overrides)
	Timeout time.Duration
	Log     io.Writer // the unit's log: the harness's output is copied here
}

// runTurnProcess runs a turn as its own process group: standard input is
// the prompt; standard output is kept for parsing (and copied to the log);
// the last lines of error output are kept for reports. ctx ending (the
// worker is stopped) or the timeout ends the group: SIGTERM, then SIGKILL
// after turnStopGrace. When the harness has exited, what it left behind in
// its process group is killed: a worker costs nothing between turns.
func runTurnProcess(ctx context.Context, tc *harness.TurnCommand, opts turnProcOptions, started func()) turnExit {
	for path, data := range tc.Files {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return turnExit{StartErr: err, Status: -1}
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return turnExit{StartErr: err, Status: -1}
		}
	}
	cmd := exec.Command(tc.Argv[0], tc.Argv[1:]...)
	cmd.Dir = opts.Dir
	cmd.Env = mergeEnv(opts.Env, tc.Env)
	cmd.Stdin = strings.NewReader(tc.Stdin)
	log := opts.Log
	if log == nil {
		log = io.Discard
	}
	stdout := &capBuffer{max: maxTurnStdout}
	stderr := &lineTail{keep: stderrTailKeep}
	lw := &lockedWriter{w: log}
	cmd.Stdout = io.MultiWriter(stdout, lw)
	cmd.Stderr = io.MultiWriter(stderr, lw)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = turnPipeDelay
	if err := cmd.Start(); err != nil {
		return turnExit{StartErr: err, Status: -1}
	}
	pgid := cmd.Process.Pid
	if started != nil {
		started()
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var timeout <-chan time.Time
	if opts.Timeout > 0 {
		t := time.NewTimer(opts.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	res := turnExit{}
	var waitErr error
	select {
	case waitErr = <-done:
	case <-ctx.Done():
		res.Stopped = true
		waitErr = endGroup(pgid, done)
	case <-timeout:
		res.TimedOut = true
		waitErr = endGroup(pgid, done)
	}
	// Whatever the harness left in its group goes with it.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	res.Stdout, res.StderrTail = stdout.Bytes(), stderr.Lines()
	res.Status = -1
	if cmd.ProcessState != nil {
		res.Status = cmd.ProcessState.ExitCode()
	}
	var ee *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &ee) && !errors.Is(waitErr, exec.ErrWaitDelay) {
		fmt.Fprintf(lw, "agent-fleet worker shim: waiting for the harness: %v\n", waitErr)
	}
	return res
}

// endGroup ends a turn's process group: SIGTERM, SIGKILL after the grace.
func endGroup(pgid int, done <-chan error) error {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case err := <-done:
		return err
	case <-time.After(turnStopGrace):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return <-done
}

// mergeEnv is base with over's variables set (over wins).
func mergeEnv(base, over []string) []string {
	set := map[string]bool{}
	for _, kv := range over {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	out := make([]string, 0, len(base)+len(over))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if !set[k] {
			out = append(out, kv)
		}
	}
	return append(out, over...)
}

// capBuffer keeps the first max bytes written to it.
type capBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (c *capBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capBuffer) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.buf.Bytes())
}

// lineTail keeps the last keep non-empty lines written to it (each at
// most 500 bytes).
type lineTail struct {
	mu    sync.Mutex
	keep  int
	part  []byte
	lines []string
}

func (t *lineTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.part = append(t.part, p...)
	for {
		i := bytes.IndexByte(t.part, '\n')
		if i < 0 {
			break
		}
		t.add(string(t.part[:i]))
		t.part = t.part[i+1:]
	}
	if len(t.part) > 64<<10 {
		t.add(string(t.part))
		t.part = nil
	}
	return len(p), nil
}

func (t *lineTail) add(line string) {
	line = strings.TrimSpace(strings.TrimSuffix(line, "\r"))
	if line == "" {
		return
	}
	if len(line) > 500 {
		line = line[:500] + "…"
	}
	t.lines = append(t.lines, line)
	if len(t.lines) > t.keep {
		t.lines = t.lines[len(t.lines)-t.keep:]
	}
}

func (t *lineTail) Lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := append([]string(nil), t.lines...)
	if s := strings.TrimSpace(string(t.part)); s != "" {
		out = append(out, s)
	}
	if len(out) > t.keep {
		out = out[len(out)-t.keep:]
	}
	return out
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(p)
	return len(p), nil
}
