package main

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/units"
)

// user-manager boots the private systemd user manager of
// docs/systemd.md "A private user manager" for people who installed the
// binary alone (contrib/test-systemd-manager.sh is its shell version for
// a checkout).

func newUserManagerCmd(f *factory.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "user-manager",
		Short: "Boot or stop a private systemd user manager (containers, as root)",
		Long: `Where PID 1 is not systemd (a container, a CI VM) no login starts a systemd
user manager and "loginctl enable-linger" cannot help, so workers have
nowhere to run. As root, "user-manager start" boots a private
"systemd --user" with its own runtime directory and cgroup, and prints the
shell lines that point this shell at it; "user-manager stop" ends it and
whatever it still runs.`,
		Example: `  eval "$(agent-fleet user-manager start)"
  agent-fleet doctor
  eval "$(agent-fleet user-manager stop)"`,
	}
	cmd.AddCommand(newUserManagerStartCmd(f), newUserManagerStopCmd(f))
	return cmd
}

type userManagerStartOptions struct {
	IO    *factory.IOStreams
	watch int
}

func newUserManagerStartCmd(f *factory.Factory) *cobra.Command {
	opts := &userManagerStartOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "start [--watch PID]",
		Short: "Boot a private systemd user manager and print its environment",
		Long: `Boot a private systemd user manager and print, on stdout, the export lines
of XDG_RUNTIME_DIR and DBUS_SESSION_BUS_ADDRESS that reach it (and nothing
else), for eval. It needs root, a PID 1 that is not systemd, and the
systemd and dbus-user-session packages; it says what is missing otherwise.

The manager reads unit files from $XDG_RUNTIME_DIR/config, so run
"agent-fleet install" there with XDG_CONFIG_HOME=$XDG_RUNTIME_DIR/config.
It runs until "agent-fleet user-manager stop", or, with --watch PID, until
that process exits (--watch $$: this shell). Without --watch, the manager
an earlier start booted, if it runs, is reached rather than a second one.`,
		Example: `  eval "$(agent-fleet user-manager start)"
  eval "$(agent-fleet user-manager start --watch $$)"   # ends with this shell`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return userManagerStartRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().IntVar(&opts.watch, "watch", 0, "stop the manager when process PID exits (default: run until user-manager stop)")
	return cmd
}

func userManagerStartRun(ctx context.Context, opts *userManagerStartOptions) error {
	if err := units.CanBootPrivateManager(); err != nil {
		return fmt.Errorf("%w: %v", factory.ErrNoSystemd, err)
	}
	// A second manager would not see the first one's workers: reach the
	// one running (unless this one is to end with a process).
	pm, how := units.FindPrivateManager("user"), "already ran and runs"
	if pm == nil || opts.watch != 0 {
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		var err error // watching init (1): it runs until stopped, or the container ends
		if pm, err = units.BootRecorded(ctx, units.BootOptions{Name: "user", Watch: cmp.Or(opts.watch, 1)}); err != nil {
			return fmt.Errorf("%w: %v", factory.ErrNoSystemd, err)
		}
		how = "runs"
	}
	fmt.Fprintf(opts.IO.Out, "export XDG_RUNTIME_DIR=%s\nexport DBUS_SESSION_BUS_ADDRESS=%s\n",
		output.ShellQuote(pm.RuntimeDir), output.ShellQuote(pm.Bus.Address))
	until := "agent-fleet user-manager stop " + output.ShellQuote(pm.RuntimeDir)
	if opts.watch != 0 {
		until += fmt.Sprintf(", or until process %d exits", opts.watch)
	}
	fmt.Fprintf(opts.IO.Err, "agent-fleet: a private systemd user manager (pid %d) %s until: %s\n", pm.PID, how, until)
	return nil
}

type userManagerStopOptions struct {
	IO     *factory.IOStreams
	Getenv func(string) string
}

func newUserManagerStopCmd(f *factory.Factory) *cobra.Command {
	opts := &userManagerStopOptions{IO: f.IO, Getenv: f.Env}
	cmd := &cobra.Command{
		Use:   "stop [RUNTIME_DIR]",
		Short: "Stop a private user manager that user-manager start booted",
		Long: `Stop the private systemd user manager whose runtime directory is
RUNTIME_DIR (default $XDG_RUNTIME_DIR): the manager by its pid, then
whatever is left in its cgroup (its units, workers among them); its
directories are removed. A directory that "user-manager start" did not make
is refused and left alone. When it was this shell's manager, stdout has the
unset line for eval.`,
		Example: `  eval "$(agent-fleet user-manager stop)"
  agent-fleet user-manager stop /tmp/agent-fleet-systemd-1234567`,
		Args: optionalArg("runtime directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
			rt := opts.Getenv("XDG_RUNTIME_DIR")
			if len(args) > 0 {
				rt = args[0]
			}
			if rt == "" {
				return factory.Usagef("name the manager's runtime directory (XDG_RUNTIME_DIR is not set)")
			}
			return userManagerStopRun(rt, opts)
		},
	}
	return cmd
}

func userManagerStopRun(rt string, opts *userManagerStopOptions) error {
	if abs, err := filepath.Abs(rt); err == nil {
		rt = abs
	}
	if err := units.StopPrivateManagerAt(rt); err != nil {
		return err
	}
	fmt.Fprintf(opts.IO.Err, "agent-fleet: stopped the private systemd user manager of %s\n", rt)
	if env := opts.Getenv("XDG_RUNTIME_DIR"); env != "" && filepath.Clean(env) == rt {
		fmt.Fprintln(opts.IO.Out, "unset XDG_RUNTIME_DIR DBUS_SESSION_BUS_ADDRESS")
	}
	return nil
}
