package main

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// errDoctorFailed: at least one doctor check failed (exit 1).
var errDoctorFailed = errors.New("doctor found problems")

func newDoctorCmd(s *streams) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check what this host offers agent-fleet, with a fix for each problem",
		Long: `Check the platform, the systemd user manager and its bus, lingering, cgroups,
the intercom broker (agent-fleet's, a compatible TypeScript one, or an
incompatible one), socket path lengths, permissions of the agent directory,
the worker registry and live worker units without a record. Each finding is
ok, warn or fail, with a one-line fix. Exits 1 when anything fails.`,
		Example: "  agent-fleet doctor\n  agent-fleet doctor --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := intercom.DefaultPaths()
			if err != nil {
				return err
			}
			checks := doctorChecks(cmd.Context(), fleet.DoctorConfig{Paths: p})
			failed := false
			for _, c := range checks {
				failed = failed || c.Status == fleet.CheckFail
			}
			if asJSON {
				if err := printJSON(s.Out, map[string]any{"ok": !failed, "checks": checks}); err != nil {
					return err
				}
			} else {
				for _, c := range checks {
					fmt.Fprintf(s.Out, "%-4s  %-16s %s\n", strings.ToUpper(string(c.Status)), c.Name, c.Detail)
					if c.Fix != "" {
						fmt.Fprintf(s.Out, "      %-16s fix: %s\n", "", c.Fix)
					}
				}
			}
			if failed {
				return errDoctorFailed
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func newCapabilitiesCmd(s *streams) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "capabilities",
		Short:   "Print what this host supports (for agents to read first)",
		Example: "  agent-fleet capabilities --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := capabilities(cmd.Context())
			if asJSON {
				return printJSON(s.Out, c)
			}
			fmt.Fprintf(s.Out, "platform:      %s\nprotocol:      %s\n", c.Platform, c.Protocol)
			if c.FleetBackend == "unavailable" {
				fmt.Fprintf(s.Out, "fleet:         unavailable: %s\n", c.FleetReason)
			} else {
				fmt.Fprintf(s.Out, "fleet:         %s (systemd %s), worker kinds: %s, logs: %s\n", c.FleetBackend, c.SystemdVersion, strings.Join(c.WorkerKinds, ", "), c.WorkerLogs)
			}
			if c.CgroupLayout != "" {
				fmt.Fprintf(s.Out, "cgroups:       %s layout, cgroup.kill: %v\n", c.CgroupLayout, c.CgroupKill)
			}
			kinds := make([]string, 0, len(c.Harnesses))
			for k := range c.Harnesses {
				kinds = append(kinds, k)
			}
			sort.Strings(kinds)
			for _, k := range kinds {
				path := c.Harnesses[k]
				if path == "" {
					path = "not found"
				} else if v := c.HarnessVersions[k]; v != "" {
					path += " (" + v + ")"
				}
				fmt.Fprintf(s.Out, "harness %-10s %s\n", k+":", path)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}
