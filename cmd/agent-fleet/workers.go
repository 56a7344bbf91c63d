package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/units"
)

// workerView is a worker as --json prints it.
type workerView struct {
	ID            string   `json:"id"`
	RunID         string   `json:"runId"`
	Generation    int      `json:"generation"`
	Kind          string   `json:"kind"`
	Role          string   `json:"role,omitempty"`
	Task          string   `json:"task,omitempty"`
	Cwd           string   `json:"cwd"`
	Command       []string `json:"command"`
	EnvKeys       []string `json:"envKeys,omitempty"`
	Unit          string   `json:"unit"`
	MainPID       int      `json:"mainPid,omitempty"`
	ControlGroup  string   `json:"controlGroup,omitempty"`
	State         string   `json:"state"`
	StateReason   string   `json:"stateReason,omitempty"`
	Manager       string   `json:"manager"`
	FirstManager  string   `json:"firstManager"`
	LeaseDeadline string   `json:"leaseDeadline,omitempty"`
	LeaseSeconds  int64    `json:"leaseSeconds,omitempty"`
	LastActivity  string   `json:"lastActivity,omitempty"`
	Checkpoints   int      `json:"checkpointsSent,omitempty"`
	GraceDeadline string   `json:"graceDeadline,omitempty"`
	CreatedAt     string   `json:"createdAt"`
	ReadyAt       string   `json:"readyAt,omitempty"`
	EndedAt       string   `json:"endedAt,omitempty"`
	ExitCode      string   `json:"exitCode,omitempty"`
	ExitStatus    *int     `json:"exitStatus,omitempty"`
	LastError     string   `json:"lastError,omitempty"`
	StopReason    string   `json:"stopReason,omitempty"`
	LogPath       string   `json:"logPath,omitempty"`
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func viewWorker(w *fleet.Worker) workerView {
	v := workerView{ID: w.ID, RunID: w.RunID, Generation: w.Generation, Kind: w.Kind, Role: w.Role, Task: w.Task,
		Cwd: w.Cwd, Command: w.Command, EnvKeys: w.EnvKeys, Unit: w.Unit, MainPID: w.MainPID, ControlGroup: w.ControlGroup,
		State: string(w.State), StateReason: w.StateReason, Manager: w.Manager, FirstManager: w.FirstManager,
		LeaseDeadline: stamp(w.LeaseDeadline), LeaseSeconds: int64(w.LeaseDuration / time.Second), LastActivity: stamp(w.LastActivity),
		Checkpoints: w.CheckpointAttempts, GraceDeadline: stamp(w.GraceDeadline), CreatedAt: stamp(w.CreatedAt), ReadyAt: stamp(w.ReadyAt), EndedAt: stamp(w.EndedAt),
		LastError: w.LastError, StopReason: w.StopReason, LogPath: w.LogPath}
	if w.HasExit {
		status := w.ExitStatus
		v.ExitCode, v.ExitStatus = w.ExitCode, &status
	}
	return v
}

// exitText is how a worker ended, for people.
func exitText(w *fleet.Worker) string {
	if !w.HasExit {
		return ""
	}
	if w.ExitCode == "exited" {
		return fmt.Sprintf("exit %d", w.ExitStatus)
	}
	return fmt.Sprintf("%s by signal %d", w.ExitCode, w.ExitStatus)
}

// stateText is a worker's state for people, with how it ended when it did:
// "running", "exited (exit 3)".
func stateText(w *fleet.Worker) string {
	if e := exitText(w); e != "" {
		return string(w.State) + " (" + e + ")"
	}
	return string(w.State)
}

type spawnOptions struct {
	req    fleet.SpawnRequest
	asJSON bool
}

func newSpawnCmd(s *streams) *cobra.Command {
	opts := &spawnOptions{}
	cmd := &cobra.Command{
		Use:   "spawn --id ID [flags] [-- CMD ARGS…]",
		Short: "Start a worker as a systemd user service",
		Long: `Start a worker: a transient systemd user service that runs under
agent-fleet's worker shim, which holds the worker's intercom session (its id
is the worker id). You become the worker's manager.

--kind exec (the default) runs CMD. spawn returns once the command was
executed and the session is registered; a command that cannot be executed
is a failed spawn (exit 1, with its exit status and last log lines), and so
is one seen to exit non-zero by then (one that exits a moment later is a
worker that exited: status shows how). CMD is resolved with your PATH.

--kind claude, codex, opencode or pi runs a coding agent as a coworker: one
non-interactive turn of the harness for --task, then one turn per batch of
intercom messages it receives, resuming the same conversation; it costs
nothing in between. Its intercom tools (agent-fleet's MCP server) act as the
worker. Each turn's final answer reaches you as a message (or as the reply to
an ask it left unanswered); a failed turn is reported to you and shown by
status, and the worker waits for your next message. --model, --effort and
--permission (read-only, workspace-write, full; default: the harness's own
configuration) set the harness's options; --env passes API keys. After --,
CMD names the harness executable (and arguments put before every turn's).`,
		Example: `  agent-fleet spawn --id tests --role tester -- make test
  agent-fleet spawn --id w1 --cwd ~/src/app --env API_KEY=… -- ./run-agent.sh
  agent-fleet spawn --id rev --kind claude --permission read-only --task "Review the diff on this branch"
  agent-fleet spawn --id fix --kind codex --effort high --permission workspace-write --task "Make the tests pass"`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && (opts.req.Kind == "" || opts.req.Kind == "exec") {
				return &usageError{fmt.Errorf("an exec worker needs a command: agent-fleet spawn --id %s -- CMD ARGS…", opts.req.ID)}
			}
			opts.req.Command = args
			env, err := openFleet(cmd.Context())
			if err != nil {
				return err
			}
			defer env.close()
			w, err := env.fleet.Spawn(cmd.Context(), opts.req)
			if err != nil {
				if w != nil && opts.asJSON {
					_ = printJSON(s.Out, viewWorker(w))
				}
				return err
			}
			if opts.asJSON {
				return printJSON(s.Out, viewWorker(w))
			}
			fmt.Fprintf(s.Out, "Spawned worker %s: run %s, unit %s, pid %d, %s.\n", w.ID, w.RunID, w.Unit, w.MainPID, stateText(w))
			if harness.IsKind(w.Kind) {
				fmt.Fprintln(s.Out, strings.TrimSpace(harnessSpawnNote(w)))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.req.ID, "id", "", "worker id (required): letters, digits, _ and -, at most 64")
	f.StringVar(&opts.req.Kind, "kind", "exec", "worker kind: exec, claude, codex, opencode or pi")
	f.StringVar(&opts.req.Role, "role", "", "the worker's role (builder, reviewer, …)")
	f.StringVar(&opts.req.Cwd, "cwd", "", "working directory (default: the current one)")
	f.StringVar(&opts.req.Task, "task", "", "the task the worker was spawned for (a coding agent's first turn)")
	f.StringArrayVar(&opts.req.Env, "env", nil, "extra environment NAME=value (repeatable; values are not recorded)")
	f.StringVar(&opts.req.Model, "model", "", "model (coding-agent kinds)")
	f.StringVar(&opts.req.Effort, "effort", "", "reasoning effort (claude: low…max; codex: low…xhigh; pi: off…max; opencode: a model variant)")
	f.StringVar(&opts.req.Permission, "permission", "", "permission mode (coding-agent kinds): read-only, workspace-write or full; default: the harness's own configuration")
	f.DurationVar(&opts.req.TurnTimeout, "turn-timeout", 0, "end a coding agent's turn after this long (default 2h)")
	f.DurationVar(&opts.req.Lease, "lease", 0, "idle lease (default: none for a person, the fleet default for agents)")
	f.DurationVar(&opts.req.MaxRuntime, "max-runtime", 0, "stop the worker after this long (0 = no limit)")
	f.BoolVar(&opts.asJSON, "json", false, "print the worker as JSON")
	_ = cmd.MarkFlagRequired("id")
	return cmd
}

func newListWorkersCmd(s *streams) *cobra.Command {
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List your workers (--all: every manager's)",
		Example: "  agent-fleet list\n  agent-fleet list --all --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env, err := openFleet(cmd.Context())
			if err != nil {
				return err
			}
			defer env.close()
			ws, err := env.fleet.List(cmd.Context(), all)
			if err != nil {
				return err
			}
			if asJSON {
				views := make([]workerView, len(ws))
				for i, w := range ws {
					views[i] = viewWorker(w)
				}
				return printJSON(s.Out, views)
			}
			printWorkers(s.Out, ws, all)
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "every manager's workers")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func printWorkers(out io.Writer, ws []*fleet.Worker, all bool) {
	if len(ws) == 0 {
		fmt.Fprintln(out, "No workers.")
		return
	}
	tw := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRUN\tSTATE\tROLE\tMANAGER\tAGE\tLEASE\tCOMMAND")
	now := time.Now()
	for _, w := range ws {
		state := stateText(w)
		if harness.IsKind(w.Kind) && w.State.Live() && w.StateReason != "" {
			state += " (" + strings.ReplaceAll(w.StateReason, "-", " ") + ")"
		}
		lease := "-"
		if !w.LeaseDeadline.IsZero() && w.State.Live() {
			lease = "until " + w.LeaseDeadline.Local().Format("15:04:05")
		}
		role := w.Role
		if role == "" {
			role = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", w.ID, w.RunID, state, role, w.Manager,
			now.Sub(w.CreatedAt).Round(time.Second), lease, workerCommand(w))
	}
	tw.Flush()
}

// workerCommand is what a worker runs, for lists: a coding agent's kind
// and model, or the command.
func workerCommand(w *fleet.Worker) string {
	if harness.IsKind(w.Kind) {
		if w.Model != "" {
			return w.Kind + " (" + w.Model + ")"
		}
		return w.Kind
	}
	return shortCommand(w.Command)
}

func shortCommand(argv []string) string {
	s := strings.Join(argv, " ")
	if len(s) > 40 {
		s = s[:37] + "…"
	}
	return s
}

func newStatusWorkerCmd(s *streams) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "status ID",
		Short:   "Show a worker's state, unit, cgroup and processes",
		Example: "  agent-fleet status tests --json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			env, err := openFleet(cmd.Context())
			if err != nil {
				return err
			}
			defer env.close()
			st, err := env.fleet.Status(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(s.Out, statusView(st))
			}
			printStatus(s.Out, st)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

// printStatus shows one worker for people (status, and agent_fleet's
// status action).
func printStatus(out io.Writer, st *fleet.Status) {
	w := st.Worker
	fmt.Fprintf(out, "Worker %s (run %s, generation %d)\n", w.ID, w.RunID, w.Generation)
	state := stateText(w)
	if w.StateReason != "" && w.State.Live() {
		state += " (" + strings.ReplaceAll(w.StateReason, "-", " ") + ")"
	}
	if w.StopReason != "" {
		state += ", stop: " + strings.ReplaceAll(w.StopReason, "-", " ")
	}
	fmt.Fprintf(out, "  state:    %s\n", state)
	printTurns(out, w, st.Turns)
	fmt.Fprintf(out, "  manager:  %s (spawned by %s)\n", w.Manager, w.FirstManager)
	if l := leaseText(st); l != "" {
		fmt.Fprintf(out, "  lease:    %s\n", l)
	}
	fmt.Fprintf(out, "  unit:     %s (%s)\n", w.Unit, unitText(st.Unit))
	if w.ControlGroup != "" {
		fmt.Fprintf(out, "  cgroup:   %s\n", w.ControlGroup)
	}
	fmt.Fprintf(out, "  command:  %s\n  cwd:      %s\n", strings.Join(w.Command, " "), w.Cwd)
	if w.LogPath != "" {
		fmt.Fprintf(out, "  log:      %s\n", w.LogPath)
	}
	if w.LastError != "" {
		fmt.Fprintf(out, "  error:    %s\n", w.LastError)
	}
	if st.ProcessCount > 0 {
		fmt.Fprintf(out, "  processes (%d):\n", st.ProcessCount)
		for _, p := range st.Processes {
			fmt.Fprintf(out, "    %d %s\n", p.PID, p.Name)
		}
		if st.ProcessCount > len(st.Processes) {
			fmt.Fprintf(out, "    … %d more\n", st.ProcessCount-len(st.Processes))
		}
	}
}

// leaseText describes a live worker's idle lease for people.
func leaseText(st *fleet.Status) string {
	w := st.Worker
	if !w.State.Live() {
		return ""
	}
	if w.LeaseDeadline.IsZero() {
		return "none (no idle expiry)"
	}
	t := fmt.Sprintf("%s idle lease, until %s", w.LeaseDuration, w.LeaseDeadline.Local().Format(time.RFC3339))
	if !w.LastActivity.IsZero() {
		t += ", last activity " + w.LastActivity.Local().Format(time.RFC3339)
	}
	if w.CheckpointAttempts > 0 {
		t += fmt.Sprintf(", %d checkpoint(s) sent, stop at %s", w.CheckpointAttempts, w.GraceDeadline.Local().Format(time.RFC3339))
	}
	switch st.LeaseActivity {
	case fleet.ActivityVerified:
		t += "; renewed by its messages to its manager (verified by cgroup)"
	case fleet.ActivitySenderID:
		t += "; renewed by messages carrying its id (no agent-fleet local API: sender ids are not verified)"
	}
	return t
}

func unitText(u units.UnitState) string {
	if u.Gone() {
		return "not loaded"
	}
	return u.ActiveState + "/" + u.SubState
}

type statusJSON struct {
	Worker       workerView    `json:"worker"`
	UnitActive   string        `json:"unitActiveState"`
	UnitSub      string        `json:"unitSubState,omitempty"`
	Processes    []processJSON `json:"processes"`
	ProcessCount int           `json:"processCount"`
	// LeaseActivity: "verified" or "sender-id" (see fleet.Status).
	LeaseActivity string `json:"leaseActivity,omitempty"`
	// Turns: a coding-agent worker's turns.
	Turns *harness.TurnState `json:"turns,omitempty"`
}

type processJSON struct {
	PID  int    `json:"pid"`
	Name string `json:"name"`
}

func statusView(st *fleet.Status) statusJSON {
	v := statusJSON{Worker: viewWorker(st.Worker), UnitActive: st.Unit.ActiveState, UnitSub: st.Unit.SubState,
		ProcessCount: st.ProcessCount, Processes: []processJSON{}, LeaseActivity: st.LeaseActivity, Turns: st.Turns}
	if st.Unit.Gone() {
		v.UnitActive = "not-loaded"
	}
	for _, p := range st.Processes {
		v.Processes = append(v.Processes, processJSON{PID: p.PID, Name: p.Name})
	}
	return v
}

func newStopCmd(s *streams) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stop ID",
		Short: "Stop a worker and prove that nothing it started survives",
		Long: `Stop the worker's unit (SIGTERM, then SIGKILL to its whole cgroup), wait
until it is inactive, read its cgroup, SIGKILL anything left, and read it
again: the stop succeeds only when the cgroup is empty. Processes that could
not be killed are reported (exit 1).`,
		Example: "  agent-fleet stop tests",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			env, err := openFleet(cmd.Context())
			if err != nil {
				return err
			}
			defer env.close()
			res, err := env.fleet.Stop(cmd.Context(), args[0])
			if res != nil && asJSON {
				_ = printJSON(s.Out, map[string]any{"worker": viewWorker(res.Worker), "alreadyEnded": res.AlreadyEnded,
					"killed": res.Killed, "survivors": res.Survivors})
			}
			if err != nil {
				return err
			}
			if !asJSON {
				switch {
				case res.AlreadyEnded:
					fmt.Fprintf(s.Out, "Worker %s had already ended (%s).\n", res.Worker.ID, res.Worker.State)
				case len(res.Killed) > 0:
					fmt.Fprintf(s.Out, "Stopped %s; %d processes outlived the stop and were killed; its cgroup is empty.\n", res.Worker.ID, len(res.Killed))
				default:
					fmt.Fprintf(s.Out, "Stopped %s; its cgroup is empty.\n", res.Worker.ID)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func newLogsCmd(s *streams) *cobra.Command {
	var n int
	cmd := &cobra.Command{
		Use:     "logs ID",
		Short:   "Print a worker's last log lines",
		Example: "  agent-fleet logs tests -n 100",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if n < 1 {
				return &usageError{fmt.Errorf("-n must be at least 1, not %d", n)}
			}
			env, err := openFleet(cmd.Context())
			if err != nil {
				return err
			}
			defer env.close()
			lines, err := env.fleet.Logs(cmd.Context(), args[0], n)
			if err != nil {
				return err
			}
			for _, l := range lines {
				fmt.Fprintln(s.Out, l)
			}
			return nil
		},
	}
	cmd.Flags().IntVarP(&n, "lines", "n", 50, "how many lines")
	return cmd
}

// printTurns shows a coding-agent worker's turns: its conversation, the
// turn running now, and how the last one ended (with its error lines).
func printTurns(out io.Writer, w *fleet.Worker, t *harness.TurnState) {
	if t == nil {
		return
	}
	conv := "no conversation yet"
	if t.Session != "" {
		conv = "conversation " + t.Session
	}
	fmt.Fprintf(out, "  harness:  %s, %s; %d turns, %d failed\n", t.Kind, conv, t.Turns, t.Failures)
	if c := t.Current; c != nil {
		fmt.Fprintf(out, "  turn:     #%d (%s) running since %s\n", c.N, turnReason(c), c.StartedAt.Local().Format(time.TimeOnly))
	}
	if l := t.Last; l != nil {
		how := "ok"
		if !l.OK {
			how = "failed: " + l.Error
		}
		fmt.Fprintf(out, "  last:     #%d (%s) ended %s after %s, %s\n", l.N, turnReason(l), l.EndedAt.Local().Format(time.TimeOnly),
			l.EndedAt.Sub(l.StartedAt).Round(100*time.Millisecond), how)
		if !l.OK {
			for _, line := range l.ErrorLines[max(0, len(l.ErrorLines)-5):] {
				fmt.Fprintf(out, "            | %s\n", line)
			}
		}
		if l.Final != "" {
			first, _, _ := strings.Cut(l.Final, "\n")
			fmt.Fprintf(out, "  answer:   %s\n", shortText(first, 100))
		}
		if len(l.Delivered) > 0 {
			fmt.Fprintf(out, "  sent to:  %s\n", strings.Join(l.Delivered, ", "))
		}
		for _, u := range l.Undelivered {
			if to, ok := strings.CutSuffix(u, ": "+harness.HeldNote); ok {
				if len(t.Held) == 0 {
					fmt.Fprintf(out, "  sent to:  %s (held until it connected)\n", to)
				}
				continue // else the held line says it
			}
			fmt.Fprintf(out, "  unsent:   %s\n", u)
		}
	}
	if len(t.Held) > 0 {
		h := t.Held[0]
		what := map[bool]string{true: "message", false: "messages"}[len(t.Held) == 1]
		if w.State.Live() {
			fmt.Fprintf(out, "  held:     %d %s for %s since %s (not connected): sent when it connects\n", len(t.Held), what, h.To, h.HeldAt.Local().Format(time.TimeOnly))
		} else {
			fmt.Fprintf(out, "  unsent:   %d %s held for %s since %s were never delivered: the worker ended first (logs has every turn's output)\n", len(t.Held), what, h.To, h.HeldAt.Local().Format(time.TimeOnly))
		}
	}
	if t.Consecutive > 1 && t.NextTurnAt.After(time.Now()) {
		fmt.Fprintf(out, "  backoff:  %d failed turns in a row; no turn before %s\n", t.Consecutive, t.NextTurnAt.Local().Format(time.TimeOnly))
	}
}

func turnReason(r *harness.TurnRecord) string {
	if r.Reason == "task" {
		return "task"
	}
	if r.Messages == 1 {
		return "1 message"
	}
	return fmt.Sprintf("%d messages", r.Messages)
}

func shortText(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// harnessSpawnNote says what a coding-agent worker does next.
func harnessSpawnNote(w *fleet.Worker) string {
	if w.Task == "" {
		return fmt.Sprintf(" It has no task yet: your first message to %s starts its first turn, and each turn's final answer reaches you as a message.", w.ID)
	}
	return fmt.Sprintf(" Its first turn (the task) is running; its final answer reaches you as a message. Send %s more work with intercom send; status shows its turns.", w.ID)
}
