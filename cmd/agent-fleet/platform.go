package main

import (
	"context"
	"fmt"
	"runtime"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/units"
)

// hostOS is the operating system the fleet surfaces answer for. Tests set
// it to see, on Linux, what macOS and Windows users get.
var hostOS = runtime.GOOS

// requireWorkerPlatform is the first step of every fleet verb and
// agent_fleet action but doctor and capabilities: off Linux it answers
// units.ErrUnsupported (exit 5) before touching anything.
func requireWorkerPlatform() error {
	if hostOS == "linux" {
		return nil
	}
	return fmt.Errorf("%w: this is %s; %s", units.ErrUnsupported, hostOS, brokerOnlyTail)
}

// brokerOnlyTail is what still works off Linux.
const brokerOnlyTail = "the broker, the intercom CLI verbs and the MCP intercom tools work here (agent-fleet doctor checks them)"

// capabilities is fleet.ProbeCapabilities stated for hostOS: off Linux the
// fleet is unavailable, and the reason says what works instead.
func capabilities(ctx context.Context) fleet.Capabilities {
	c := fleet.ProbeCapabilities(ctx, journaldRuns())
	if hostOS != "linux" {
		c.FleetBackend, c.SystemdVersion, c.WorkerKinds = "unavailable", "", []string{}
		c.FleetReason = requireWorkerPlatform().Error()
		c.CgroupLayout, c.CgroupKill = "", false
	}
	return c
}

// doctorChecks runs doctor for hostOS, with the checks that need cmd's
// knowledge (installed units, the workers.json view) on Linux.
func doctorChecks(ctx context.Context, cfg fleet.DoctorConfig) []fleet.Check {
	cfg.GOOS = hostOS
	cfg.Journal = journaldRuns()
	checks := fleet.Doctor(ctx, cfg)
	if hostOS != "linux" {
		return checks
	}
	checks = append(checks, installedUnitsCheck(ctx, cfg.Paths))
	return append(checks, fleet.WorkersViewCheck(cfg.Paths))
}
