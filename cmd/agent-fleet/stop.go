package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
	"github.com/agent-fleet/agent-fleet/fleet"
)

type stopOptions struct {
	fleetOptions
	IDs     []string
	All     bool
	Timeout time.Duration
	Kill    bool
	Host    string
}

func newStopCmd(f *factory.Factory, runF func(*stopOptions) error) *cobra.Command {
	opts := &stopOptions{fleetOptions: newFleetOptions(f)}
	cmd := &cobra.Command{
		Use:   "stop ID... | --all",
		Short: "Stop workers and prove that nothing they started survives",
		Long: `Stop each worker: SIGTERM to every process of its unit, SIGKILL to the whole
cgroup once --timeout has passed (10s by default; --kill: at once), and
prove that nothing of the worker's is left in its cgroup: once the worker's
shim has exited having recorded how its command ended, the cgroup must hold
no process but systemd's own, which writes the exit record; otherwise wait
until the unit is inactive, SIGKILL anything left in the cgroup, and read it
again. A stop succeeds only when that proof holds. Processes that could not
be killed are reported (exit 1). On a terminal, each signal is shown on
stderr as it is sent.

Several ids (or --all: every live worker of yours) are stopped at once and
each is reported on stdout, a failed one with its reason; stderr then only
counts the failures ("1 of 2 workers not stopped"). The exit status is then the most serious of their
failures: 1 (a cleanup could not be verified) before 6 (no user manager),
4 (not yours), 3 (not found) and 2 (not an id); 0 when every one stopped or
had already ended. With one id, --json prints that stop's object; with
several or --all, an array of them, each with its "id", "ok" and, when it
failed, "error".`,
		Example: "  agent-fleet stop tests\n  agent-fleet stop w1 w2 --timeout 30s\n  agent-fleet stop --all --kill",
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.IDs = args
			switch {
			case !opts.All && len(args) == 0:
				return argsError(cmd, "needs a worker ID, or --all")
			case opts.All && len(args) > 0:
				return argsError(cmd, "takes worker IDs or --all, not both")
			}
			if opts.Timeout < 0 {
				return factory.Usagef("--timeout must not be negative")
			}
			if runF != nil {
				return runF(opts)
			}
			return stopRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.All, "all", false, "every live worker of yours")
	cmd.Flags().DurationVar(&opts.Timeout, "timeout", 0, fmt.Sprintf("how long a worker has between SIGTERM and SIGKILL (default %s)", fleet.DefaultStopTimeout))
	cmd.Flags().BoolVar(&opts.Kill, "kill", false, "SIGKILL at once, without SIGTERM first")
	addHostFlag(cmd, &opts.Host)
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the result as JSON")
	return cmd
}

func stopRun(ctx context.Context, opts *stopOptions) error {
	a := verbs.Args{Action: "stop", All: opts.All, Timeout: opts.Timeout, Kill: opts.Kill, Host: opts.Host}
	if len(opts.IDs) == 1 {
		a.ID = opts.IDs[0]
	} else {
		a.IDs = opts.IDs
	}
	if isTerminal(opts.IO.Err) {
		var mu sync.Mutex
		a.StopProgress = func(st fleet.StopStep) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintln(opts.IO.Err, output.StopStepText(st))
		}
	}
	return runFleetVerb(ctx, opts.fleetOptions, a)
}

// isTerminal reports whether w is a terminal (progress is for people
// watching, not for logs or pipes).
func isTerminal(w any) bool {
	if ww, ok := w.(*watchedWriter); ok {
		w = ww.w // execCLI's stdout
	}
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
