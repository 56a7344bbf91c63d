// Package demo is `agent-fleet demo`: a short, narrated run of the product
// in a sandbox — two workers spawned as systemd user services that talk
// through the intercom, shown with list, status and logs, then stopped with
// their cgroups proven empty; or, without a user manager, two intercom
// sessions talking through a broker.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// The demo's two workers.
const (
	PongWorker = "demo-pong"
	PingWorker = "demo-ping"
)

// Their conversation.
const (
	demoPong = PongWorker
	demoPing = PingWorker

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

// Options are the demo's.
type Options struct {
	// NoBoot forbids booting a private user manager.
	NoBoot bool
	// Pings is how many asks demo-ping sends (1–20).
	Pings int
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

// Run runs the demo, narrating to f's stdout. It leaves nothing behind,
// also when interrupted.
func Run(ctx context.Context, f *factory.Factory, opts Options) (err error) {
	if opts.Pings < 1 || opts.Pings > 20 {
		return factory.Usagef("--pings must be between 1 and 20")
	}
	s := f.IO
	ctx, stop := factory.UntilHangup(ctx)
	defer stop()
	n := &narrator{w: s.Out}
	fmt.Fprintln(s.Out, "agent-fleet demo: two workers, run by systemd, talk to each other through the intercom.")

	n.title("A fresh agent directory")
	sb, err := f.NewSandbox("agent-fleet-demo-")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	n.say("Using %s as PI_CODING_AGENT_DIR for the demo and everything it starts,", sb.Paths.AgentDir)
	n.say("so your own broker, registry and sessions are not touched. It is removed at the end.")
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), factory.CleanupTimeout)
		defer cancel()
		interrupted := ctx.Err() != nil
		if interrupted {
			fmt.Fprintln(s.Out, "\nInterrupted: cleaning up what the demo started.")
		}
		n.title("Cleaning up")
		for _, line := range sb.Close(cctx) {
			n.say("%s", line)
		}
		switch {
		case interrupted && sb.CloseErr == nil:
			fmt.Fprintln(s.Out, "\nThe demo was interrupted; everything it started is gone.")
			err = fmt.Errorf("demo interrupted: %w", ctx.Err())
		case err != nil || sb.CloseErr != nil:
			err = errors.Join(err, sb.CloseErr)
			fmt.Fprintf(s.Out, "\nThe demo failed: %v\n", err)
		default:
			fmt.Fprintln(s.Out, "\nDemo complete: everything the demo started is gone.")
		}
	}()

	n.title("A systemd user manager")
	if err := sb.FindManager(ctx, !opts.NoBoot, "demo"); err != nil {
		return err
	}
	switch {
	case sb.Private != nil:
		n.say("No user manager is reachable: %s.", firstClause(sb.OwnErr))
		n.say("This machine's PID 1 is not systemd and the demo runs as root, so it booted a private")
		n.say("`systemd --user` for itself: pid %d, runtime directory %s, systemd %s.", sb.Private.PID, sb.Private.RuntimeDir, sb.Probe.Version.Raw)
		n.say("It is stopped at the end, also on Ctrl-C.")
	case sb.Missing == nil:
		n.say("Your user manager answers at %s (from %s), systemd %s.", sb.Probe.Bus.Address, sb.Probe.Bus.Source, sb.Probe.Version.Raw)
	default:
		n.say("None is available, so workers cannot be spawned here:")
		n.say("%s", sb.Missing.Error())
		n.say("The demo runs only the intercom part: two sessions talking through a broker.")
		return runIntercomDemo(ctx, n, sb, opts)
	}
	return runFleetDemo(ctx, f, n, sb, opts)
}

// runFleetDemo spawns the two workers, shows them and their conversation,
// and stops them with verified cleanup.
func runFleetDemo(ctx context.Context, f *factory.Factory, n *narrator, sb *factory.Sandbox, opts Options) error {
	n.title("The intercom broker")
	if err := sb.EnsureBroker(ctx); err != nil {
		return fmt.Errorf("start the intercom broker: %w", err)
	}
	fe, err := sb.OpenFleet(ctx)
	if err != nil {
		return err
	}
	if unit, ok := sb.BrokerUnitRunning(ctx); ok {
		n.say("The broker runs as its own unit %s,", unit)
		n.say("outside every worker's cgroup, so stopping a worker never stops it.")
	} else {
		n.say("The broker runs as a detached process (%s).", sb.Paths.BrokerSocket())
	}
	exe, err := f.Exe()
	if err != nil {
		return err
	}

	n.title("Spawning two workers as systemd user services (you, %s, are their manager)", fe.Caller)
	specs := []fleet.SpawnRequest{
		{ID: demoPong, Role: "responder", Task: "answer every ask with pong",
			Command: []string{"/bin/sh", "-c", demoPongScript, demoPong, exe}},
		{ID: demoPing, Role: "asker", Task: fmt.Sprintf("ask demo-pong %d times", opts.Pings),
			Command: []string{"/bin/sh", "-c", demoPingScript, demoPing, exe, fmt.Sprint(opts.Pings)}},
	}
	about := map[string]string{
		demoPong: "listens on the intercom and answers every ask",
		demoPing: fmt.Sprintf("asks demo-pong %d questions, then waits", opts.Pings),
	}
	for _, req := range specs {
		req.Cwd, req.MaxRuntime = sb.Paths.AgentDir, demoMaxRuntime
		began := time.Now()
		w, err := sb.Spawn(ctx, req)
		if err != nil {
			return fmt.Errorf("spawn %s: %w", req.ID, err)
		}
		n.say("%s (%s): ready in %s — the shim ran its command and registered its session.",
			w.ID, about[w.ID], time.Since(began).Round(time.Millisecond))
		n.say("  unit %s, main pid %d", w.Unit, w.MainPID)
	}

	n.title("Waiting for the conversation")
	said, err := waitConversation(ctx, fe, opts.Pings)
	if err != nil {
		return err
	}
	n.say("%s", said)

	n.title("`agent-fleet list`")
	ws, err := fe.Fleet.List(ctx, false)
	if err != nil {
		return err
	}
	for _, w := range ws {
		n.say("%-10s %-8s role %-9s manager %s  %s", w.ID, w.State, w.Role, w.Manager, w.Unit)
	}

	n.title("`agent-fleet status`: unit, cgroup and processes")
	for _, w := range sb.Workers {
		st, err := fe.Fleet.Status(ctx, w.ID)
		if err != nil {
			return err
		}
		n.say("%s: %s, unit %s", w.ID, st.Worker.State, st.Unit.ActiveState+"/"+st.Unit.SubState)
		n.say("  cgroup %s", st.Worker.ControlGroup)
		procs := make([]string, 0, len(st.Processes))
		for _, p := range st.Processes {
			procs = append(procs, fmt.Sprintf("%d %s", p.PID, p.Name))
		}
		n.say("  %s: %s", output.Plural(st.ProcessCount, "process"), strings.Join(procs, ", "))
	}

	n.title("What they said (`agent-fleet logs`)")
	for _, w := range sb.Workers {
		lines, err := fe.Fleet.Logs(ctx, w.ID, 20)
		if err != nil {
			return err
		}
		for _, l := range lines {
			n.say("%s", l)
		}
	}

	n.title("Stopping both workers, with verified cleanup")
	return sb.StopWorkers(ctx, n.say)
}

// waitConversation waits until demo-ping says it is done, and checks that
// every ask was answered.
func waitConversation(ctx context.Context, fe *factory.FleetEnv, pings int) (string, error) {
	deadline := time.Now().Add(demoTalkTimeout)
	want := fmt.Sprintf("demo-ping: done: %d of %d asks answered", pings, pings)
	for {
		lines, _ := fe.Fleet.Logs(ctx, demoPing, 50)
		for _, l := range lines {
			if l == want {
				return fmt.Sprintf("demo-ping asked %d times and demo-pong answered every ask.", pings), nil
			}
			if strings.HasPrefix(l, "demo-ping: done:") {
				return "", fmt.Errorf("the workers did not finish their conversation: %s\n%s", l, strings.Join(lines, "\n"))
			}
		}
		if st, err := fe.Fleet.Status(ctx, demoPing); err == nil && st.Worker.State.Terminal() {
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
func runIntercomDemo(ctx context.Context, n *narrator, sb *factory.Sandbox, opts Options) error {
	n.title("Two intercom sessions")
	open := func(id string) (*intercom.Session, error) {
		ident, err := intercom.ResolveIdentity(intercom.IdentityOptions{Kind: intercom.Worker, WorkerID: id, Cwd: sb.Paths.AgentDir})
		if err != nil {
			return nil, err
		}
		return sb.OpenSession(ctx, ident)
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
	asks := make(chan intercom.MessageView, opts.Pings)
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
		for range opts.Pings {
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
	for i := 1; i <= opts.Pings; i++ {
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
	n.say("demo-ping asked %d times and demo-pong answered every ask.", opts.Pings)
	return nil
}

// firstClause is why no user manager was reachable, without the advice
// that follows (it does not apply once a private manager was booted): the
// message's first line (a missing user bus's reason) up to its first "; ".
func firstClause(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	msg, _, _ = strings.Cut(msg, "; ")
	return strings.TrimSuffix(msg, ".")
}
