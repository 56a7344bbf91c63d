package output

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/agent-fleet/agent-fleet/fleet"
)

// DoctorReport is doctor's findings.
type DoctorReport struct{ Checks []fleet.Check }

// Failed reports whether any check failed (doctor then exits 1).
func (r DoctorReport) Failed() bool {
	for _, c := range r.Checks {
		if c.Status == fleet.CheckFail {
			return true
		}
	}
	return false
}

// JSON implements Report.
func (r DoctorReport) JSON() any { return r.Structured() }

// Structured implements Report: {"ok": no check failed, "checks": […]}.
func (r DoctorReport) Structured() any { return map[string]any{"ok": !r.Failed(), "checks": r.Checks} }

// Text implements Report: an aligned table for people, one line per check
// for a model.
func (r DoctorReport) Text(s Surface) string {
	var lines []string
	for _, c := range r.Checks {
		status := strings.ToUpper(string(c.Status))
		if s == Tool {
			line := fmt.Sprintf("%s %s: %s", status, c.Name, c.Detail)
			if c.Fix != "" {
				line += " (fix: " + c.Fix + ")"
			}
			lines = append(lines, line)
			continue
		}
		// A detail or fix of several lines stays under its check.
		indent := "\n" + strings.Repeat(" ", 23)
		lines = append(lines, fmt.Sprintf("%-4s  %-16s %s", status, c.Name, strings.ReplaceAll(c.Detail, "\n", indent)))
		if c.Fix != "" {
			lines = append(lines, fmt.Sprintf("      %-16s fix: %s", "", strings.ReplaceAll(c.Fix, "\n", indent+"     ")))
		}
	}
	return strings.Join(lines, "\n")
}

// CapabilitiesReport is what the host supports.
type CapabilitiesReport struct{ C fleet.Capabilities }

// JSON implements Report.
func (r CapabilitiesReport) JSON() any { return r.C }

// Structured implements Report.
func (r CapabilitiesReport) Structured() any { return r.C }

// Text implements Report: aligned lines for people, the JSON (indented)
// for a model.
func (r CapabilitiesReport) Text(s Surface) string {
	c := r.C
	if s == Tool {
		data, _ := json.MarshalIndent(c, "", "  ")
		return string(data)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "platform:      %s\nprotocol:      %s\n", c.Platform, c.Protocol)
	if c.FleetBackend == "unavailable" {
		fmt.Fprintf(&b, "fleet:         unavailable: %s\n", c.FleetReason)
	} else {
		fmt.Fprintf(&b, "fleet:         %s (systemd %s), worker kinds: %s, logs: %s\n", c.FleetBackend, c.SystemdVersion, strings.Join(c.WorkerKinds, ", "), c.WorkerLogs)
	}
	if c.CgroupLayout != "" {
		fmt.Fprintf(&b, "cgroups:       %s layout, cgroup.kill: %v\n", c.CgroupLayout, c.CgroupKill)
	}
	if c.Sandbox != nil {
		var yes, no []string
		for _, ch := range c.Sandbox.Checks {
			if ch.Enforced {
				yes = append(yes, ch.Property)
			} else {
				no = append(no, ch.Property)
			}
		}
		fmt.Fprintf(&b, "sandbox:       enforces %s", strings.Join(yes, ", "))
		if len(no) > 0 {
			fmt.Fprintf(&b, "; NOT %s", strings.Join(no, ", "))
		}
		b.WriteString("\n")
		for _, p := range c.Profiles {
			what := "enforced"
			if !p.Enforced {
				what = "degrades to running without " + strings.Join(p.Missing, ", ")
			}
			fmt.Fprintf(&b, "profile %-10s %s\n", string(p.Profile)+":", what)
		}
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
		fmt.Fprintf(&b, "harness %-10s %s\n", k+":", path)
	}
	return strings.TrimRight(b.String(), "\n")
}
