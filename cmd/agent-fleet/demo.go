package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/units"
)

// The demo's two workers and their conversation.
const (
	demoPong = "demo-pong"
	demoPing = "demo-ping"

	// demoPongScript answers every ask with "pong N". $1 is agent-fleet.
	demoPongScript = `af=$1
echo "demo-pong: listening for asks"
"$af" intercom listen --json | while IFS= read -r msg; do
  ask=$(printf '%s\n' "$msg" | sed -n 's/.*"askId":"\([^"]*\)".*/\1/p')
  [ -n "$ask" ] || continue
  from=$(printf '%s\n' "$msg" | sed -n 's/.*"from":{"id":"\([^"]*\)".*/\1/p')
  text=$(printf '%s\n' "$msg" | sed -n 's/.*"text":"\([^"]*\)".*/\1/p')
  answer="pong${text#ping}"
  echo "demo-pong: $from asked \"$text\"; replying \"$answer\""
  "$af" intercom reply --ask-id "$ask" "$answer" >/dev/null || echo "demo-pong: the reply failed"
done`

	// demoPingScript asks demo-pong "ping 1" … "ping $2", then waits. $1
	// is agent-fleet.
	demoPingScript = `af=$1 n=$2 ok=0 i=1
while [ $i -le $n ]; do
  echo "demo-ping: asking demo-pong \"ping $i\""
  if out=$("$af" intercom ask demo-pong "ping $i" --timeout 10s 2>&1); then
    echo "demo-ping: demo-pong replied \"$(printf '%s\n' "$out" | tail -n 1)\""
    ok=$((ok+1))
  else
    echo "demo-ping: the ask failed: $out"
  fi
  i=$((i+1))
done
echo "demo-ping: done: $ok of $n asks answered"
exec sleep 300`

	// demoMaxRuntime makes systemd stop the demo's workers even if the demo
	// itself is killed before it can.
	demoMaxRuntime = 2 * time.Minute
	// demoTalkTimeout bounds the wait for the conversation.
	demoTalkTimeout = 20 * time.Second
	// cleanupTimeout bounds the cleanup after success, failure or Ctrl-C.
	cleanupTimeout = 45 * time.Second
)

type demoOptions struct {
	// noBoot forbids booting a private user manager.
	noBoot bool
	// pings is how many asks demo-ping sends.
	pings int
}

func newDemoCmd(s *streams) *cobra.Command {
	opts := &demoOptions{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Spawn two workers that talk through the intercom, then stop them with verified cleanup",
		Long: `Run a short, narrated demonstration in a fresh temporary agent directory
(PI_CODING_AGENT_DIR, for the demo and its workers), so your own broker,
registry and sessions are never touched; the directory is removed at the end.

With a systemd user manager (yours, or — when running as root on a machine
whose PID 1 is not systemd — a private one booted for the demo and stopped at
the end), it spawns two exec workers as transient user services: demo-pong
answers every ask, demo-ping asks it a few questions. It shows list, status
(unit, cgroup, processes) and what they said, then stops both and proves their
cgroups empty. Without a user manager it says what is missing and runs the
intercom part alone: two sessions talking through a broker.

Exit status 0 when everything worked.`,
		Example: "  agent-fleet demo\n  go run ./cmd/agent-fleet demo",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.pings < 1 || opts.pings > 20 {
				return &usageError{errors.New("--pings must be between 1 and 20")}
			}
			return runDemo(cmd.Context(), s, opts)
		},
	}
	cmd.Flags().BoolVar(&opts.noBoot, "no-boot", false, "never boot a private user manager (run the intercom part alone when none is reachable)")
	cmd.Flags().IntVar(&opts.pings, "pings", 3, "how many asks demo-ping sends")
	return cmd
}

// narrator numbers the demo's steps and indents what it says about them.
// Safe for concurrent use.
type narrator struct {
	mu   sync.Mutex
	w    io.Writer
	step int
}

func (n *narrator) title(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.step++
	fmt.Fprintf(n.w, "\n%d. %s\n", n.step, fmt.Sprintf(format, args...))
}

func (n *narrator) say(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for line := range strings.SplitSeq(fmt.Sprintf(format, args...), "\n") {
		fmt.Fprintf(n.w, "   %s\n", line)
	}
}

func runDemo(ctx context.Context, s *streams, opts *demoOptions) (err error) {
	ctx, stop := untilHangup(ctx)
	defer stop()
	n := &narrator{w: s.Out}
	fmt.Fprintln(s.Out, "agent-fleet demo: two workers, run by systemd, talk to each other through the intercom.")

	n.title("A fresh agent directory")
	sb, err := newSandbox("agent-fleet-demo-")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	n.say("Using %s as PI_CODING_AGENT_DIR for the demo and everything it starts,", sb.paths.AgentDir)
	n.say("so your own broker, registry and sessions are not touched. It is removed at the end.")
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		interrupted := ctx.Err() != nil
		if interrupted {
			fmt.Fprintln(s.Out, "\nInterrupted: cleaning up what the demo started.")
		}
		n.title("Cleaning up")
		for _, line := range sb.close(cctx) {
			n.say("%s", line)
		}
		switch {
		case interrupted && sb.closeErr == nil:
			fmt.Fprintln(s.Out, "\nThe demo was interrupted; everything it started is gone.")
			err = fmt.Errorf("demo interrupted: %w", ctx.Err())
		case err != nil || sb.closeErr != nil:
			err = errors.Join(err, sb.closeErr)
			fmt.Fprintf(s.Out, "\nThe demo failed: %v\n", err)
		default:
			fmt.Fprintln(s.Out, "\nDemo complete: everything the demo started is gone.")
		}
	}()

	n.title("A systemd user manager")
	if err := sb.findManager(ctx, !opts.noBoot, "demo"); err != nil {
		return err
	}
	switch {
	case sb.private != nil:
		n.say("No user manager is reachable: %s.", firstClause(sb.ownErr))
		n.say("This machine's PID 1 is not systemd and the demo runs as root, so it booted a private")
		n.say("`systemd --user` for itself: pid %d, runtime directory %s, systemd %s.", sb.private.PID, sb.private.RuntimeDir, sb.probe.Version.Raw)
		n.say("It is stopped at the end, also on Ctrl-C.")
	case sb.missing == nil:
		n.say("Your user manager answers at %s (from %s), systemd %s.", sb.probe.Bus.Address, sb.probe.Bus.Source, sb.probe.Version.Raw)
	default:
		n.say("None is available, so workers cannot be spawned here:")
		n.say("%s", sb.missing.Error())
		n.say("The demo runs only the intercom part: two sessions talking through a broker.")
		return runIntercomDemo(ctx, n, sb, opts)
	}
	return runFleetDemo(ctx, n, sb, opts)
}

// runFleetDemo spawns the two workers, shows them and their conversation,
// and stops them with verified cleanup.
func runFleetDemo(ctx context.Context, n *narrator, sb *sandbox, opts *demoOptions) error {
	n.title("The intercom broker")
	if err := intercom.EnsureBroker(ctx, sb.paths, brokerStarter()); err != nil {
		return fmt.Errorf("start the intercom broker: %w", err)
	}
	sb.brokerStarted = true
	fe, err := openFleet(ctx)
	if err != nil {
		return err
	}
	sb.fleet = fe
	if st, err := sb.units.Unit(ctx, BrokerUnitName(sb.paths.AgentDir)); err == nil && st.Running() {
		n.say("The broker runs as its own unit %s,", st.Name)
		n.say("outside every worker's cgroup, so stopping a worker never stops it.")
	} else {
		n.say("The broker runs as a detached process (%s).", sb.paths.BrokerSocket())
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locate agent-fleet: %w", err)
	}

	n.title("Spawning two workers as systemd user services (you, %s, are their manager)", fe.caller)
	specs := []fleet.SpawnRequest{
		{ID: demoPong, Role: "responder", Task: "answer every ask with pong",
			Command: []string{"/bin/sh", "-c", demoPongScript, demoPong, exe}},
		{ID: demoPing, Role: "asker", Task: fmt.Sprintf("ask demo-pong %d times", opts.pings),
			Command: []string{"/bin/sh", "-c", demoPingScript, demoPing, exe, fmt.Sprint(opts.pings)}},
	}
	about := map[string]string{
		demoPong: "listens on the intercom and answers every ask",
		demoPing: fmt.Sprintf("asks demo-pong %d questions, then waits", opts.pings),
	}
	for _, req := range specs {
		req.Cwd, req.MaxRuntime = sb.paths.AgentDir, demoMaxRuntime
		began := time.Now()
		w, err := fe.fleet.Spawn(ctx, req)
		if w != nil {
			sb.workers = append(sb.workers, w)
		}
		if err != nil {
			return fmt.Errorf("spawn %s: %w", req.ID, err)
		}
		n.say("%s (%s): ready in %s — the shim ran its command and registered its session.",
			w.ID, about[w.ID], time.Since(began).Round(time.Millisecond))
		n.say("  unit %s, main pid %d", w.Unit, w.MainPID)
	}

	n.title("Waiting for the conversation")
	said, err := waitConversation(ctx, fe, opts.pings)
	if err != nil {
		return err
	}
	n.say("%s", said)

	n.title("`agent-fleet list`")
	ws, err := fe.fleet.List(ctx, false)
	if err != nil {
		return err
	}
	for _, w := range ws {
		n.say("%-10s %-8s role %-9s manager %s  %s", w.ID, w.State, w.Role, w.Manager, w.Unit)
	}

	n.title("`agent-fleet status`: unit, cgroup and processes")
	for _, w := range sb.workers {
		st, err := fe.fleet.Status(ctx, w.ID)
		if err != nil {
			return err
		}
		n.say("%s: %s, unit %s", w.ID, st.Worker.State, st.Unit.ActiveState+"/"+st.Unit.SubState)
		n.say("  cgroup %s", st.Worker.ControlGroup)
		procs := make([]string, 0, len(st.Processes))
		for _, p := range st.Processes {
			procs = append(procs, fmt.Sprintf("%d %s", p.PID, p.Name))
		}
		n.say("  %d processes: %s", st.ProcessCount, strings.Join(procs, ", "))
	}

	n.title("What they said (`agent-fleet logs`)")
	for _, w := range sb.workers {
		lines, err := fe.fleet.Logs(ctx, w.ID, 20)
		if err != nil {
			return err
		}
		for _, l := range lines {
			n.say("%s", l)
		}
	}

	n.title("Stopping both workers, with verified cleanup")
	return sb.stopWorkers(ctx, n)
}

// waitConversation waits until demo-ping says it is done, and checks that
// every ask was answered.
func waitConversation(ctx context.Context, fe *fleetEnv, pings int) (string, error) {
	deadline := time.Now().Add(demoTalkTimeout)
	want := fmt.Sprintf("demo-ping: done: %d of %d asks answered", pings, pings)
	for {
		lines, _ := fe.fleet.Logs(ctx, demoPing, 50)
		for _, l := range lines {
			if l == want {
				return fmt.Sprintf("demo-ping asked %d times and demo-pong answered every ask.", pings), nil
			}
			if strings.HasPrefix(l, "demo-ping: done:") {
				return "", fmt.Errorf("the workers did not finish their conversation: %s\n%s", l, strings.Join(lines, "\n"))
			}
		}
		if st, err := fe.fleet.Status(ctx, demoPing); err == nil && st.Worker.State.Terminal() {
			return "", fmt.Errorf("demo-ping ended (%s) before its conversation was over:\n%s", st.Worker.State, strings.Join(lines, "\n"))
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no answer within %s; demo-ping's log so far:\n%s", demoTalkTimeout, strings.Join(lines, "\n"))
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// runIntercomDemo is the part that needs no systemd: demo-pong and
// demo-ping as two sessions of this process, talking through a broker that
// the first of them starts.
func runIntercomDemo(ctx context.Context, n *narrator, sb *sandbox, opts *demoOptions) error {
	n.title("Two intercom sessions")
	open := func(id string) (*intercom.Session, error) {
		ident, err := intercom.ResolveIdentity(intercom.IdentityOptions{Kind: intercom.Worker, WorkerID: id, Cwd: sb.paths.AgentDir})
		if err != nil {
			return nil, err
		}
		sb.brokerStarted = true
		return intercom.OpenSession(ctx, intercom.SessionConfig{Paths: sb.paths, Identity: ident, Start: brokerStarter()})
	}
	pong, err := open(demoPong)
	if err != nil {
		return fmt.Errorf("open session %s: %w", demoPong, err)
	}
	defer pong.Close()
	ping, err := open(demoPing)
	if err != nil {
		return fmt.Errorf("open session %s: %w", demoPing, err)
	}
	defer ping.Close()
	n.say("demo-pong and demo-ping are registered with a broker the first of them started")
	n.say("(the same as `agent-fleet intercom listen` and `agent-fleet intercom ask` would do).")

	n.title("The conversation")
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	asks := make(chan intercom.MessageView, opts.pings)
	go func() {
		_ = pong.Listen(lctx, intercom.ListenRequest{}, func(m *intercom.MessageView) error {
			if m.ExpectsReply {
				asks <- *m
			}
			return nil
		})
	}()
	replied := make(chan error, 1)
	go func() {
		for range opts.pings {
			select {
			case <-lctx.Done():
				replied <- lctx.Err()
				return
			case m := <-asks:
				answer := "pong" + strings.TrimPrefix(m.Text, "ping")
				n.say("demo-pong: %s asked %q; replying %q", m.From.ID, m.Text, answer)
				res, err := pong.Reply(lctx, intercom.ReplyRequest{AskID: m.AskID, Text: answer})
				if err == nil && !res.OK {
					err = fmt.Errorf("reply to %s: %s %s", m.From.ID, res.Code, res.Reason)
				}
				if err != nil {
					replied <- err
					return
				}
			}
		}
		replied <- nil
	}()
	for i := 1; i <= opts.pings; i++ {
		text := fmt.Sprintf("ping %d", i)
		n.say("demo-ping: asking demo-pong %q", text)
		res, err := ping.Ask(ctx, intercom.AskRequest{To: demoPong, Text: text, Wait: 10 * time.Second, OnTimeout: intercom.CancelOnTimeout})
		if err != nil {
			return fmt.Errorf("ask %q: %w", text, err)
		}
		if !res.Replied {
			return fmt.Errorf("ask %q: no reply (%s %s)", text, res.Code, res.Reason)
		}
		n.say("demo-ping: demo-pong replied %q", res.Reply.Text)
	}
	if err := <-replied; err != nil {
		return err
	}
	n.say("demo-ping asked %d times and demo-pong answered every ask.", opts.pings)
	return nil
}

// untilHangup is ctx, also cancelled when the terminal goes away (SIGHUP)
// or stdout is a closed pipe (SIGPIPE, e.g. "agent-fleet demo | head"):
// either would otherwise end the process before it cleaned up. After
// SIGPIPE the narration's writes fail silently; the cleanup still runs.
func untilHangup(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGPIPE)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}

// sandbox is what the demo and the spawn benchmark run in: a fresh agent
// directory, set as PI_CODING_AGENT_DIR in this process so that the broker
// and the workers it starts inherit it, and a systemd user manager — the
// user's own, or a private one booted for the run — or none. close undoes
// all of it, touching only what the run created.
type sandbox struct {
	paths intercom.Paths
	// private is the manager booted for this run (nil: the user's own, or
	// none).
	private *units.PrivateManager
	// probe describes the manager in use.
	probe units.ProbeResult
	// ownErr says why the user's own manager was not used.
	ownErr error
	// missing says why there is no manager at all (nil when there is one).
	missing error
	// units is a connection to the manager in use (nil without one).
	units *units.Systemd

	fleet   *fleetEnv
	workers []*fleet.Worker // spawned here: stopped by close
	stopped map[string]bool // worker ids stopped
	// bare are transient units started here directly (name → stopped).
	bare          map[string]bool
	brokerStarted bool
	restoreEnv    []func()
	closeErr      error
}

// newSandbox creates the agent directory and points PI_CODING_AGENT_DIR at
// it. Socket paths must stay under 107 bytes, so a long TMPDIR falls back
// to /tmp.
func newSandbox(prefix string) (*sandbox, error) {
	sb := &sandbox{stopped: map[string]bool{}, bare: map[string]bool{}}
	var dir string
	for _, parent := range []string{"", "/tmp"} {
		d, err := os.MkdirTemp(parent, prefix)
		if err != nil {
			return nil, err
		}
		if err := os.Chmod(d, 0o700); err != nil {
			os.RemoveAll(d)
			return nil, err
		}
		p := intercom.NewPaths(d)
		if intercom.CheckSocketPath(p.HolderSocket("demo-worker")) == nil && intercom.CheckSocketPath(p.LocalAPISocket()) == nil {
			dir = d
			break
		}
		os.RemoveAll(d)
	}
	if dir == "" {
		return nil, errors.New("no temporary directory short enough for intercom socket paths")
	}
	sb.paths = intercom.NewPaths(dir)
	sb.setenv(intercom.AgentDirEnv, dir)
	return sb, nil
}

// setenv sets a variable of this process until close.
func (sb *sandbox) setenv(k, v string) {
	old, had := os.LookupEnv(k)
	_ = os.Setenv(k, v)
	sb.restoreEnv = append(sb.restoreEnv, func() {
		if had {
			_ = os.Setenv(k, old)
		} else {
			_ = os.Unsetenv(k)
		}
	})
}

// findManager uses the user's own manager when it answers; otherwise, when
// allowed and possible (root, PID 1 not systemd), boots a private one named
// label. With neither, sb.missing says what is missing and nil is
// returned; a boot that was possible but failed is an error.
func (sb *sandbox) findManager(ctx context.Context, allowBoot bool, label string) error {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	probe, err := units.Probe(pctx, units.Options{})
	cancel()
	if err == nil {
		sb.probe = probe
		return sb.connect(ctx)
	}
	sb.ownErr = err
	switch {
	case errors.Is(err, units.ErrUnsupported):
		sb.missing = err
		return nil
	case !allowBoot:
		sb.missing = fmt.Errorf("%w\nA private user manager was not booted: --no-boot forbids it", err)
		return nil
	}
	if bootErr := units.CanBootPrivateManager(); bootErr != nil {
		sb.missing = fmt.Errorf("%w\nA private user manager cannot be booted either: %v", err, bootErr)
		return nil
	}
	pm, err := units.BootPrivateManager(ctx, units.BootOptions{Name: label})
	if err != nil {
		return err
	}
	sb.private = pm
	for _, kv := range pm.Env() {
		k, v, _ := strings.Cut(kv, "=")
		sb.setenv(k, v)
	}
	pctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if sb.probe, err = units.Probe(pctx, units.Options{Bus: pm.Bus}); err != nil {
		return err
	}
	return sb.connect(ctx)
}

// connect opens the sandbox's own connection to the manager in use.
func (sb *sandbox) connect(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := units.Connect(cctx, units.Options{Bus: sb.probe.Bus, DefaultTimeout: 30 * time.Second})
	if err != nil {
		return err
	}
	sb.units = m
	return nil
}

// firstClause is an error message up to its first "; " (the rest is
// advice that does not apply once a private manager was booted).
func firstClause(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "; ")
	return msg
}

// stopWorkers stops every worker spawned here and proves its cgroup empty.
func (sb *sandbox) stopWorkers(ctx context.Context, n *narrator) error {
	cg, err := units.OpenCgroups("")
	if err != nil {
		return err
	}
	var errs []error
	for _, w := range sb.workers {
		if sb.stopped[w.ID] {
			continue
		}
		began := time.Now()
		res, err := sb.fleet.fleet.Stop(ctx, w.ID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sb.stopped[w.ID] = true
		took := time.Since(began).Round(time.Millisecond)
		if res.AlreadyEnded {
			n.say("%s had already ended (%s).", w.ID, res.Worker.State)
		}
		cgroup := res.Worker.ControlGroup
		if cgroup == "" {
			cgroup = w.ControlGroup
		}
		pids, perr := cg.Procs(cgroup)
		switch {
		case perr != nil:
			errs = append(errs, fmt.Errorf("read the cgroup of %s: %w", w.ID, perr))
		case len(pids) > 0:
			errs = append(errs, fmt.Errorf("%s: %d processes are still in %s: %v", w.ID, len(pids), cgroup, pids))
		case !res.AlreadyEnded:
			killed := ""
			if len(res.Killed) > 0 {
				killed = fmt.Sprintf("; %d processes outlived the unit's stop and were killed through the cgroup", len(res.Killed))
			}
			n.say("Stopped %s in %s: state %s, unit inactive%s.", w.ID, took, res.Worker.State, killed)
			n.say("  cgroup %s: 0 processes — verified empty.", cgroup)
		}
	}
	return errors.Join(errs...)
}

// close stops what the run started — its workers, its broker, its private
// manager — checks that none of their units is left, removes the agent
// directory and restores the environment. It returns what it did, for the
// narration; failures are in sb.closeErr.
func (sb *sandbox) close(ctx context.Context) []string {
	var said []string
	var errs []error
	if sb.fleet != nil {
		var pending []string
		for _, w := range sb.workers {
			if !sb.stopped[w.ID] {
				pending = append(pending, w.ID)
			}
		}
		if len(pending) > 0 {
			if err := sb.stopWorkers(ctx, &narrator{w: io.Discard}); err != nil {
				errs = append(errs, err)
			} else {
				said = append(said, fmt.Sprintf("Stopped what was still running (%s), with verified cleanup.", strings.Join(pending, ", ")))
			}
		}
		sb.fleet.close()
	}
	if sb.units != nil {
		for name, stopped := range sb.bare {
			if stopped {
				continue
			}
			if err := sb.units.StopUnit(ctx, name); err != nil && !errors.Is(err, units.ErrUnitNotFound) {
				errs = append(errs, err)
			}
			_ = sb.units.ResetFailed(ctx, name)
		}
	}
	if sb.brokerStarted {
		line, err := sb.stopBroker(ctx)
		if err != nil {
			errs = append(errs, err)
		} else if line != "" {
			said = append(said, line)
		}
	}
	if sb.units != nil {
		var left []string
		names := []string{BrokerUnitName(sb.paths.AgentDir)}
		for _, w := range sb.workers {
			names = append(names, w.Unit)
		}
		for name := range sb.bare {
			names = append(names, name)
		}
		for _, name := range names {
			st, err := sb.units.Unit(ctx, name)
			if err != nil {
				errs = append(errs, err)
			} else if !st.Gone() {
				left = append(left, name+" ("+st.ActiveState+")")
			}
		}
		if len(left) > 0 {
			errs = append(errs, fmt.Errorf("units left behind: %s", strings.Join(left, ", ")))
		} else {
			said = append(said, fmt.Sprintf("No unit of the run is left (%d checked by name).", len(names)))
		}
		_ = sb.units.Close()
	}
	if sb.private != nil {
		pid := sb.private.PID
		if err := sb.private.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop the private user manager: %w", err))
		} else {
			said = append(said, fmt.Sprintf("Stopped the private user manager (pid %d) and removed its runtime directory and cgroup.", pid))
		}
	}
	if err := os.RemoveAll(sb.paths.AgentDir); err != nil {
		errs = append(errs, err)
	} else {
		said = append(said, "Removed "+sb.paths.AgentDir+".")
	}
	for i := len(sb.restoreEnv) - 1; i >= 0; i-- {
		sb.restoreEnv[i]()
	}
	sb.restoreEnv = nil
	sb.closeErr = errors.Join(errs...)
	return said
}

// stopBroker stops the broker of the run's agent directory: its unit when
// it runs as one, else through its local API; then waits until nothing
// answers on its socket.
func (sb *sandbox) stopBroker(ctx context.Context) (string, error) {
	unit := BrokerUnitName(sb.paths.AgentDir)
	if sb.units != nil {
		if st, err := sb.units.Unit(ctx, unit); err == nil && !st.Gone() {
			if err := sb.units.StopUnit(ctx, unit); err != nil && !errors.Is(err, units.ErrUnitNotFound) {
				return "", fmt.Errorf("stop the broker unit %s: %w", unit, err)
			}
			_ = sb.units.ResetFailed(ctx, unit)
			return "Stopped the broker unit " + unit + ".", nil
		}
	}
	pid, _ := os.ReadFile(sb.paths.PIDFile())
	api := &intercom.LocalAPIClient{Path: sb.paths.LocalAPISocket()}
	if err := api.Shutdown(ctx); err != nil {
		if errors.Is(err, intercom.ErrNoLocalAPI) {
			return "", nil // it had already gone (idle exit)
		}
		return "", fmt.Errorf("shut down the broker: %w", err)
	}
	for {
		h, _ := intercom.ProbeBroker(ctx, sb.paths)
		_, err := os.Stat(sb.paths.PIDFile())
		if h == intercom.Unreachable && errors.Is(err, os.ErrNotExist) {
			return fmt.Sprintf("Shut down the broker (pid %s).", strings.TrimSpace(string(pid))), nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("the broker (pid %s) did not exit: %w", strings.TrimSpace(string(pid)), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
