package factory

import (
	"context"
	"fmt"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/node"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/units"
)

// RequireWorkerPlatform is the first step of every fleet verb and
// agent_fleet action but doctor and capabilities: off Linux it answers
// units.ErrUnsupported (exit 5) before touching anything.
func (f *Factory) RequireWorkerPlatform() error {
	if f.GOOS == "linux" {
		return nil
	}
	return fmt.Errorf("%w: this is %s; %s", units.ErrUnsupported, f.GOOS, brokerOnlyTail)
}

// brokerOnlyTail is what still works off Linux.
const brokerOnlyTail = "the broker, the intercom CLI verbs and the MCP intercom tools work here (agent-fleet doctor checks them)"

// Capabilities is fleet.ProbeCapabilities stated for f.GOOS: off Linux
// the fleet is unavailable, and the reason says what works instead.
func (f *Factory) Capabilities(ctx context.Context) fleet.Capabilities {
	c := fleet.ProbeCapabilities(ctx, f.Journald(), f.Env)
	if f.GOOS != "linux" {
		c.FleetBackend, c.SystemdVersion, c.WorkerKinds = "unavailable", "", []string{}
		c.FleetReason = f.RequireWorkerPlatform().Error()
		c.CgroupLayout, c.CgroupKill = "", false
	}
	return c
}

// DoctorChecks runs doctor for f.GOOS, with the checks that need cmd's
// knowledge (installed units, the workers.json view) on Linux, and the
// federation section (node.DoctorChecks) everywhere.
func (f *Factory) DoctorChecks(ctx context.Context, cfg fleet.DoctorConfig) []fleet.Check {
	cfg.GOOS = f.GOOS
	cfg.Journal = f.Journald()
	if cfg.Getenv == nil {
		cfg.Getenv = f.Env
	}
	checks := fleet.Doctor(ctx, cfg)
	if f.GOOS == "linux" {
		checks = append(checks, f.installedUnitsCheck(ctx, cfg.Paths), fleet.WorkersViewCheck(cfg.Paths))
	}
	// Federation last: its NATS connect may take up to its timeout.
	return append(checks, node.DoctorChecks(ctx, cfg.Paths)...)
}
