package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
)

type spawnOptions struct {
	fleetOptions
	Args verbs.Args
}

func newSpawnCmd(f *factory.Factory, runF func(*spawnOptions) error) *cobra.Command {
	opts := &spawnOptions{fleetOptions: newFleetOptions(f), Args: verbs.Args{Action: "spawn"}}
	cmd := &cobra.Command{
		Use:   "spawn --id ID [flags] [-- CMD ARGS…]",
		Short: "Start a worker as a systemd user service",
		Long: `Start a worker: a transient systemd user service that runs under
agent-fleet's worker shim, which holds the worker's intercom session (its id
is the worker id). You become the worker's manager.

--kind exec (the default) runs CMD, resolved with your PATH. A command that
is not on your PATH or not executable is refused before anything starts
(exit 3), and so is an agent directory whose socket paths are over the
kernel's 107-byte limit (exit 2). spawn returns once the session is registered and the command has
run for a readiness grace (250ms; AGENT_FLEET_READY_GRACE sets it), and says
what is known then: running; or, for a command that ended within the grace,
"started; it has already exited (exit N)" with exit status 1 (a clean exit
is a worker that exited, status 0). One that cannot be executed after all
(a missing interpreter) is a failed spawn, exit 1, with its last log lines;
one that ends after the grace is a worker that exited: status shows how.

--kind claude, codex, opencode or pi runs a coding agent as a coworker: one
non-interactive turn of the harness for --task, then one turn per batch of
intercom messages it receives, resuming the same conversation; it costs
nothing in between. Its intercom tools (agent-fleet's MCP server) act as the
worker. Each turn's final answer reaches you as a message (or as the reply to
an ask it left unanswered); a failed turn is reported to you and shown by
status, and the worker waits for your next message. --model, --effort and
--permission (read-only, workspace-write, full; default: the harness's own
configuration) set the harness's options; --env passes API keys. After --,
CMD names the harness executable (and arguments put before every turn's).
--budget-usd and --budget-tokens stop it from starting turns past a budget:
the messages it would work on wait, and you are told, until renew raises it.
A turn that ends on the provider's rate limit pauses the worker until the
limit resets; it then resumes the same conversation. A claude worker's
permission prompts (and a workspace-write codex worker's) come to you as asks:
reply allow, deny or always; --permission-wait (default 5m) denies them unanswered.

--worktree gives the worker a git worktree of its own as its working
directory: "git worktree add" from HEAD of the repository --cwd (or the
current directory) is in, on a new branch agent-fleet/<id>, or with
--worktree=BRANCH on BRANCH (checked out if it exists, else created from
HEAD). It goes inside the repository's git directory,
.git/agent-fleet/worktrees/<id>, or below $AGENT_FLEET_WORKTREE_ROOT. A
branch checked out in another worktree (a live worker's, or yours) is
refused (exit 4), as is a directory that is not in a repository (exit 2).
Uncommitted changes of the checkout are not in the worktree; spawn says how
many there are. status shows the branch, how far it is ahead of and behind
the base branch, and its dirty files; forget and prune remove the worktree
only once it is clean and its commits are merged or pushed.

--profile confines the worker: trusted (your full rights; the default for
exec), workspace (writes only its cwd, its harness's state, the intercom
directory and a private /tmp; your credentials, agent sockets and the user
bus hidden; the default for coding agents), readonly (workspace with the cwd
read-only; the default for --permission read-only). A named profile this
user manager cannot enforce in full fails (exit 5, doctor says why) unless
--allow-degraded runs it without what is missing; status then says so.`,
		Example: `  agent-fleet spawn --id tests --role tester -- make test
  agent-fleet spawn --id w1 --cwd ~/src/app --env API_KEY=… -- ./run-agent.sh
  agent-fleet spawn --id rev --kind claude --permission read-only --task "Review the diff on this branch"
  agent-fleet spawn --id fix --kind codex --effort high --permission workspace-write --task "Make the tests pass"
  agent-fleet spawn --id feat --kind claude --worktree --task "Add the --dry-run flag; commit on your branch"
  agent-fleet spawn --id b2 --worktree=fix/login -- make test

  agent-fleet spawn --id build --profile workspace --cwd ~/src/app -- make`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Args.Spawn.Command = args
			if opts.Args.Spawn.Worktree && len(args) > 0 && cmd.ArgsLenAtDash() != 0 {
				// "--worktree feature -- cmd" would run feature: its branch goes after "=".
				return factory.Usagef("with --worktree, give the branch as --worktree=BRANCH and the command after --")
			}
			if err := verbs.CheckSpawnID(cmd.Flags().Changed("id"), opts.Args.ID); err != nil {
				return err
			}
			if len(args) == 0 && (opts.Args.Spawn.Kind == "" || opts.Args.Spawn.Kind == "exec") {
				return factory.Usagef("an exec worker needs a command: agent-fleet spawn --id %s -- CMD ARGS…", opts.Args.ID)
			}
			if runF != nil {
				return runF(opts)
			}
			return spawnRun(cmd.Context(), opts)
		},
	}
	addParamFlags(cmd, "spawn", &opts.Args)
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the worker as JSON")
	return cmd
}

func spawnRun(ctx context.Context, opts *spawnOptions) error {
	return runFleetVerb(ctx, opts.fleetOptions, opts.Args)
}

// addParamFlags gives cmd the flags of action's params (verbs.Flags),
// parsed into a as agent_fleet's arguments are.
func addParamFlags(cmd *cobra.Command, action string, a *verbs.Args) {
	for _, p := range verbs.Flags(action) {
		if p.Name == "id" && action != "spawn" {
			continue // the others take their worker id as an argument
		}
		cmd.Flags().Var(&paramFlag{p: p, a: a}, p.Flag, p.Usage)
		cmd.Flags().Lookup(p.Flag).DefValue = p.Default
		cmd.Flags().Lookup(p.Flag).NoOptDefVal = p.NoValue
	}
}

// paramFlag is a verbs.Param as a flag: its text goes through the same
// parser as agent_fleet's argument.
type paramFlag struct {
	p   *verbs.Param
	a   *verbs.Args
	set string // the last value given, for help and String
}

func (v *paramFlag) String() string { return v.set }

func (v *paramFlag) Set(s string) error {
	if err := v.p.SetFlag(v.a, s); err != nil {
		return err
	}
	v.set = s
	return nil
}

func (v *paramFlag) Type() string { return v.p.FlagType }
