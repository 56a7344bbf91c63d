package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	contribsystemd "github.com/agent-fleet/agent-fleet/contrib/systemd"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/units"
)

type installOptions struct {
	dryRun bool
	binary string
}

func newInstallCmd(s *streams) *cobra.Command {
	opts := &installOptions{}
	cmd := &cobra.Command{
		Use:   "install [--dry-run] [--binary PATH]",
		Short: "Install the janitor's systemd user timer (agent-fleet-cleanup.timer)",
		Long: `Write agent-fleet-cleanup.service and agent-fleet-cleanup.timer (kept in
contrib/systemd) to your user unit directory ($XDG_CONFIG_HOME/systemd/user,
else ~/.config/systemd/user), reload the user manager, and enable and start the
timer: every five minutes it runs "agent-fleet cleanup --execute" on this agent
directory. Running it again updates the files. --dry-run shows what would change.`,
		Example: "  agent-fleet install --dry-run\n  agent-fleet install",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runInstall(cmd.Context(), s, opts)
		},
	}
	cmd.Flags().BoolVar(&opts.dryRun, "dry-run", false, "show what would be written and done, change nothing")
	cmd.Flags().StringVar(&opts.binary, "binary", "", "the agent-fleet executable the timer runs (default: this one)")
	return cmd
}

func newUninstallCmd(s *streams) *cobra.Command {
	opts := &installOptions{}
	cmd := &cobra.Command{
		Use:     "uninstall [--dry-run]",
		Short:   "Stop, disable and remove the janitor's systemd user timer",
		Example: "  agent-fleet uninstall",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runUninstall(cmd.Context(), s, opts)
		},
	}
	cmd.Flags().BoolVar(&opts.dryRun, "dry-run", false, "show what would be removed, change nothing")
	return cmd
}

var errNeedsLinux = errors.New("the janitor timer is a systemd user unit: install needs Linux with systemd")

// installBinary is the executable the timer runs: --binary, else this one,
// refusing a throwaway build (go run, go test).
func installBinary(flag string) (string, error) {
	bin := flag
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", err
		}
		bin = exe
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		return "", err
	}
	if resolved, err := filepath.EvalSymlinks(bin); err == nil {
		bin = resolved
	}
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", &usageError{fmt.Errorf("%s is not an executable", bin)}
	}
	if flag == "" && (strings.Contains(bin, "/go-build") || strings.HasPrefix(bin, os.TempDir()+"/")) {
		return "", &usageError{fmt.Errorf("this agent-fleet is a temporary build (%s): install it first (go install ./cmd/agent-fleet), or pass --binary PATH", bin)}
	}
	return bin, nil
}

func runInstall(ctx context.Context, s *streams, opts *installOptions) error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("%w (%s)", units.ErrUnsupported, errNeedsLinux)
	}
	bin, err := installBinary(opts.binary)
	if err != nil {
		return err
	}
	p, err := intercom.DefaultPaths()
	if err != nil {
		return err
	}
	dir, err := units.UserUnitDir(os.Getenv)
	if err != nil {
		return err
	}
	files := contribsystemd.Render(bin, p.AgentDir)
	verb := map[bool]string{true: "would ", false: ""}[opts.dryRun]
	var changed []string
	for _, name := range contribsystemd.Names {
		path := filepath.Join(dir, name)
		old, err := os.ReadFile(path)
		switch {
		case err == nil && bytes.Equal(old, files[name]):
			fmt.Fprintf(s.Out, "%s: unchanged\n", path)
			continue
		case err == nil:
			fmt.Fprintf(s.Out, "%s: %supdate\n", path, verb)
		default:
			fmt.Fprintf(s.Out, "%s: %screate\n", path, verb)
		}
		changed = append(changed, name)
		if opts.dryRun {
			fmt.Fprintf(s.Out, "---\n%s---\n", files[name])
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := writeUnitFile(path, files[name]); err != nil {
			return err
		}
	}
	fmt.Fprintf(s.Out, "%sreload the user manager, enable and start %s (runs %s cleanup --execute on %s every 5 min)\n",
		map[bool]string{true: "Would ", false: "Done: "}[opts.dryRun], contribsystemd.CleanupTimer, bin, p.AgentDir)
	if opts.dryRun {
		return nil
	}
	m, err := connectManager(ctx)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.Reload(ctx); err != nil {
		return err
	}
	if err := m.EnableUnitFiles(ctx, contribsystemd.CleanupTimer); err != nil {
		return err
	}
	if len(changed) > 0 {
		// A running timer keeps its old schedule until restarted.
		_ = m.StopUnit(ctx, contribsystemd.CleanupTimer)
	}
	return m.StartUnit(ctx, contribsystemd.CleanupTimer)
}

func runUninstall(ctx context.Context, s *streams, opts *installOptions) error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("%w (%s)", units.ErrUnsupported, errNeedsLinux)
	}
	dir, err := units.UserUnitDir(os.Getenv)
	if err != nil {
		return err
	}
	var present []string
	for _, name := range contribsystemd.Names {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			present = append(present, filepath.Join(dir, name))
		}
	}
	if len(present) == 0 {
		fmt.Fprintln(s.Out, "The janitor timer is not installed.")
		return nil
	}
	if opts.dryRun {
		fmt.Fprintf(s.Out, "Would stop and disable %s and remove:\n  %s\n", contribsystemd.CleanupTimer, strings.Join(present, "\n  "))
		return nil
	}
	m, err := connectManager(ctx)
	if err != nil {
		return err
	}
	defer m.Close()
	for _, name := range []string{contribsystemd.CleanupTimer, contribsystemd.CleanupService} {
		if err := m.StopUnit(ctx, name); err != nil && !errors.Is(err, units.ErrUnitNotFound) {
			return err
		}
	}
	if err := m.DisableUnitFiles(ctx, contribsystemd.CleanupTimer); err != nil && !errors.Is(err, units.ErrUnitNotFound) {
		return err
	}
	for _, path := range present {
		if err := os.Remove(path); err != nil {
			return err
		}
		fmt.Fprintf(s.Out, "removed %s\n", path)
	}
	return m.Reload(ctx)
}

// writeUnitFile writes a unit file atomically, 0644 as systemctl does.
func writeUnitFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// connectManager reaches the caller's user manager (exit 6 without one).
func connectManager(ctx context.Context) (*units.Systemd, error) {
	m, err := units.Connect(ctx, units.Options{})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoSystemd, err)
	}
	return m, nil
}
