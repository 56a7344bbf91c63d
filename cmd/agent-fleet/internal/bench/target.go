package bench

import (
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"

	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
)

// brokerTarget is the broker a benchmark measures: one started for the run
// in a temporary agent directory, or one already listening on a socket.
type brokerTarget struct {
	// Socket is the endpoint the benchmark connects to.
	Socket string `json:"socket"`
	// PID is the broker process measured for CPU and memory; 0 when it
	// could not be found.
	PID int `json:"pid,omitempty"`
	// Process is the measured process's name (/proc/<pid>/comm).
	Process string `json:"process,omitempty"`
	// Implementation is "agent-fleet" when the broker answers agent-fleet's
	// local API, else "other".
	Implementation string `json:"implementation"`
	// Started is true for a broker started for this run (and stopped
	// after it).
	Started bool `json:"started"`
	// RateLimit describes the broker's per-connection rate limit: the v4
	// default, raised for the run, or unknown for a broker not started here.
	RateLimit string `json:"rateLimit"`

	paths  intercom.Paths // of a started broker
	dir    string         // temporary agent directory of a started broker
	cmd    *exec.Cmd
	exited chan error
	closed bool
	dial   dialer
}

// rateTokensPerSecond is the rate limit a load needs on its busiest
// connection (spec §6.6: a frame costs one token per started 8 KiB).
func rateTokensPerSecond(spec LoadSpec) float64 {
	if spec.Rate == 0 {
		return -1 // unpaced: unbounded
	}
	frame := spec.TextBytes + 256 // the send frame around the text
	cost := float64((frame + 8<<10 - 1) / (8 << 10))
	need := spec.Rate * cost
	if spec.PresenceEvery > 0 {
		need += float64(time.Second) / float64(spec.PresenceEvery)
	}
	return need
}

// startBrokerTarget starts `agent-fleet broker` (this executable) in a
// fresh temporary agent directory and waits until it answers. The rate
// limit stays at the v4 default unless the load needs more than 90% of
// its refill; then it is raised so far that it never binds.
func startBrokerTarget(ctx context.Context, f *factory.Factory, spec LoadSpec, log io.Writer) (*brokerTarget, error) {
	dir, err := os.MkdirTemp("", "afbench")
	if err != nil {
		return nil, err
	}
	t := &brokerTarget{Implementation: "agent-fleet", Started: true, dir: dir, paths: intercom.NewPaths(dir)}
	t.Socket = t.paths.BrokerSocket()
	if err := intercom.CheckSocketPath(t.paths.LocalAPISocket()); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	args := []string{"broker", "--no-idle-exit", "--log-level", "warn",
		"--max-sessions", strconv.Itoa(max(broker.DefaultMaxSessions, spec.Sessions+16))}
	t.RateLimit = fmt.Sprintf("v4 default (%g tokens, %g/s per connection)", float64(broker.DefaultRateCapacity), float64(broker.DefaultRateRefill))
	if need := rateTokensPerSecond(spec); need < 0 || need > 0.9*broker.DefaultRateRefill {
		args = append(args, "--rate-capacity", "1e9", "--rate-refill", "1e9")
		t.RateLimit = "raised for the run (1e9 tokens, 1e9/s): the load exceeds the v4 default of 120/s"
	}
	exe, err := f.Exe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(dir, "bench-broker.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	t.cmd = exec.Command(exe, args...)
	t.cmd.Env = append(append(os.Environ(), f.ChildEnv...), intercom.AgentDirEnv+"="+dir)
	t.cmd.Stdout, t.cmd.Stderr = logf, logf
	t.cmd.Dir = dir
	if err := t.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start the broker: %w", err)
	}
	t.exited = make(chan error, 1)
	go func() { t.exited <- t.cmd.Wait() }()
	t.PID = t.cmd.Process.Pid
	t.Process = processName(t.PID)
	t.dial = func(ctx context.Context) (net.Conn, error) { return intercom.DialBroker(ctx, t.paths) }
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, _ := intercom.ProbeBroker(ctx, t.paths)
		if h == intercom.Compatible {
			break
		}
		select {
		case err := <-t.exited:
			t.exited <- err
			out, _ := os.ReadFile(filepath.Join(dir, "bench-broker.log"))
			os.RemoveAll(dir)
			return nil, fmt.Errorf("the broker exited before answering (%v): %s", err, strings.TrimSpace(string(out)))
		case <-ctx.Done():
			t.close(log)
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.close(log)
			return nil, errors.New("the broker started for the run did not answer within 10 s")
		}
	}
	if name := processName(t.PID); name != "" {
		t.Process = name
	}
	return t, nil
}

// externalBrokerTarget measures a broker already listening on socket (the
// value of flag). Its pid is pid when given, else broker.pid beside the
// socket, else what the agent-fleet local API beside it reports.
func externalBrokerTarget(ctx context.Context, socket string, pid int, flag string) (*brokerTarget, error) {
	abs, err := filepath.Abs(socket)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(abs); err != nil {
		return nil, factory.Usage(fmt.Errorf("%s: %w", flag, err))
	}
	t := &brokerTarget{Socket: abs, Implementation: "other", RateLimit: "unknown (the broker was not started by this run)"}
	t.dial = func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", abs)
	}
	dir := filepath.Dir(abs)
	api := &intercom.LocalAPIClient{Path: filepath.Join(dir, "agent-fleet.sock")}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	st, apiErr := api.Stats(actx)
	cancel()
	if apiErr == nil {
		t.Implementation = "agent-fleet"
	}
	fromFile := intercom.ReadPIDFile(filepath.Join(dir, "broker.pid"))
	switch {
	case pid > 0:
		t.PID = pid
	case fromFile > 0:
		t.PID = fromFile
	case apiErr == nil:
		t.PID = st.PID
	}
	if t.PID > 0 && !intercom.ProcessAlive(t.PID) {
		t.PID = 0
	}
	if t.PID > 0 {
		t.Process = processName(t.PID)
	}
	return t, nil
}

// close stops a broker started for the run — through its local API, then
// SIGTERM, then SIGKILL, by its pid only — and removes its directory. An
// external broker is left alone.
// close may be called more than once.
func (t *brokerTarget) close(log io.Writer) {
	if !t.Started || t.cmd == nil || t.closed {
		return
	}
	t.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	err := (&intercom.LocalAPIClient{Path: t.paths.LocalAPISocket()}).Shutdown(ctx)
	cancel()
	if err != nil {
		_ = t.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-t.exited:
	case <-time.After(5 * time.Second):
		fmt.Fprintf(log, "bench: the broker (pid %d) did not stop in 5 s; killing it\n", t.PID)
		_ = t.cmd.Process.Kill()
		<-t.exited
	}
	os.RemoveAll(t.dir)
}

// describe is one line saying what is measured.
func (t *brokerTarget) describe() string {
	var b strings.Builder
	switch {
	case t.Started:
		fmt.Fprintf(&b, "agent-fleet broker (pid %d) started for this run", t.PID)
	case t.Implementation == "agent-fleet":
		fmt.Fprintf(&b, "agent-fleet broker on %s", t.Socket)
	default:
		fmt.Fprintf(&b, "broker on %s", t.Socket)
	}
	if !t.Started {
		switch {
		case t.PID > 0 && t.Process != "":
			fmt.Fprintf(&b, " (pid %d, %s)", t.PID, t.Process)
		case t.PID > 0:
			fmt.Fprintf(&b, " (pid %d)", t.PID)
		default:
			b.WriteString(" (pid unknown: no CPU or memory figures; pass --pid)")
		}
	}
	return b.String()
}
