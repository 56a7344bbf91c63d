package main

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
)

// errDoctorFailed: at least one doctor check failed (exit 1).
var errDoctorFailed = errors.New("doctor found problems")

type hostOptions struct {
	Factory    *factory.Factory
	JSON       bool
	Pair       bool // test the two sessions of Args instead of the host
	Args       []string
	Timeout    time.Duration
	TimeoutSet bool // --timeout was given (only --pair takes it)
}

func newDoctorCmd(f *factory.Factory, runF func(*hostOptions) error) *cobra.Command {
	opts := &hostOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check what this host offers agent-fleet, with a fix for each problem",
		Long: `Check the platform, the systemd user manager and its bus, lingering, cgroups,
the intercom broker (agent-fleet's, a compatible TypeScript one, or an
incompatible one), socket path lengths, permissions of the agent directory,
the worker registry and live worker units without a record. Each finding is
ok, warn or fail, with a one-line fix. Exits 1 when anything fails.

With --pair A B it tests two live sessions instead: an ask from A through its
holder, B's acknowledgement and reply, A's receipt, each leg timed (README).`,
		Example: "  agent-fleet doctor\n  agent-fleet doctor --json\n  agent-fleet doctor --pair reviewer builder",
		Args:    func(_ *cobra.Command, args []string) error { return verbs.CheckPairArgs(opts.Pair, args) },
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Args, opts.TimeoutSet = args, cmd.Flags().Changed("timeout")
			if runF != nil {
				return runF(opts)
			}
			return doctorRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as JSON")
	cmd.Flags().BoolVar(&opts.Pair, "pair", false, "test the sessions A and B (the arguments): an ask, its acknowledgement, the reply")
	cmd.Flags().DurationVar(&opts.Timeout, "timeout", time.Minute, "with --pair, how long to wait for B")
	return cmd
}

func doctorRun(ctx context.Context, opts *hostOptions) error {
	if opts.TimeoutSet && !opts.Pair {
		return factory.Usagef("--timeout is how long doctor --pair waits for B: it needs --pair")
	}
	rep, err := verbs.Host(ctx, opts.Factory, verbs.Args{Action: "doctor", Timeout: opts.Timeout, Pair: opts.Args})
	if err != nil {
		return err
	}
	if err := output.Print(opts.Factory.IO.Out, rep, opts.JSON); err != nil {
		return err
	}
	if rep.(interface{ Failed() bool }).Failed() {
		return errDoctorFailed
	}
	return nil
}

func newCapabilitiesCmd(f *factory.Factory, runF func(*hostOptions) error) *cobra.Command {
	opts := &hostOptions{Factory: f}
	cmd := &cobra.Command{
		Use:     "capabilities",
		Short:   "Print what this host supports (for agents to read first)",
		Example: "  agent-fleet capabilities --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(opts)
			}
			return capabilitiesRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as JSON")
	return cmd
}

func capabilitiesRun(ctx context.Context, opts *hostOptions) error {
	rep, err := verbs.Host(ctx, opts.Factory, verbs.Args{Action: "capabilities"})
	if err != nil {
		return err
	}
	return output.Print(opts.Factory.IO.Out, rep, opts.JSON)
}
