package output

import (
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

// Text implements Report: aligned lines for people, a few sentences for a
// model (the details are its structuredContent).
func (r CapabilitiesReport) Text(s Surface) string {
	c := r.C
	if s == Tool {
		return capabilitiesTool(c)
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

// capabilitiesTool says what a model may do with agent_fleet here: whether
// workers can run, of which kinds, what stop, pause, limits and profiles
// can do, and which coding agents are installed.
func capabilitiesTool(c fleet.Capabilities) string {
	lines := []string{fmt.Sprintf("Host %s; intercom protocol %s.", c.Platform, c.Protocol)}
	if c.FleetBackend == "unavailable" {
		lines = append(lines, fmt.Sprintf("Workers cannot run here: %s. Only doctor and capabilities work; the intercom tools do.", c.FleetReason))
	} else {
		logs := "log files"
		if c.WorkerLogs == "journal" {
			logs = "the journal"
		}
		lines = append(lines, fmt.Sprintf("Workers run as systemd user services (systemd %s); spawn kinds: %s; logs read from %s.",
			c.SystemdVersion, strings.Join(c.WorkerKinds, ", "), logs))
		limits := "none (memory, cpu and tasks are refused)"
		if len(c.ResourceLimits) > 0 {
			limits = strings.Join(c.ResourceLimits, ", ")
		}
		pause := "pause is unavailable"
		if c.Pause != "" {
			pause = "pause works"
		}
		lines = append(lines, fmt.Sprintf("Resource limits enforced: %s; %s.", limits, pause))
	}
	if c.CgroupLayout != "" {
		kill := "processes left after a stop are killed one by one"
		if c.CgroupKill {
			kill = "a stop kills whatever is left at once (cgroup.kill)"
		}
		lines = append(lines, fmt.Sprintf("Cgroups: %s layout; %s.", c.CgroupLayout, kill))
	}
	if len(c.Profiles) > 0 {
		var enforced, degraded []string
		for _, p := range c.Profiles {
			if p.Enforced {
				enforced = append(enforced, string(p.Profile))
			} else {
				degraded = append(degraded, fmt.Sprintf("%s (runs without %s)", p.Profile, strings.Join(p.Missing, ", ")))
			}
		}
		var ps []string
		if len(enforced) > 0 {
			ps = append(ps, "enforced: "+strings.Join(enforced, ", "))
		}
		if len(degraded) > 0 {
			ps = append(ps, "degraded: "+strings.Join(degraded, ", "))
		}
		lines = append(lines, "Profiles "+strings.Join(ps, "; ")+".")
	}
	var have, missing []string
	kinds := make([]string, 0, len(c.Harnesses))
	for k := range c.Harnesses {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		switch {
		case c.Harnesses[k] == "":
			missing = append(missing, k)
		case c.HarnessVersions[k] != "":
			have = append(have, fmt.Sprintf("%s (%s)", k, c.HarnessVersions[k]))
		default:
			have = append(have, k)
		}
	}
	if len(kinds) > 0 {
		h := "Coding agents installed: none"
		if len(have) > 0 {
			h = "Coding agents installed: " + strings.Join(have, ", ")
		}
		if len(missing) > 0 {
			h += "; not found: " + strings.Join(missing, ", ") + " (to spawn one, give its executable in command)"
		}
		lines = append(lines, h+".")
	}
	if c.Harnesses["pi"] != "" && c.PiMCPAdapter == "" {
		lines = append(lines, "pi workers cannot be spawned: pi-mcp-adapter was not found.")
	}
	return strings.Join(lines, "\n")
}
