// Package shim is the main process of every worker unit (docs/architecture.md
// "Workers"): it holds the worker's intercom session and serves it to the
// worker's own processes only, runs the workload — the worker's command, or
// a coding agent's wake loop of harness turns — tells systemd READY once it
// runs, and records how it ended in the fleet registry. fleet starts it
// (agent-fleet worker-shim); fleet never imports it.
package shim

import (
	"io"
	"log/slog"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// Config configures Run.
type Config struct {
	Paths           intercom.Paths
	WorkerID, RunID string
	// Command is the worker's argv (argv[0] absolute).
	Command []string
	// Start launches a broker when none answers (it must not start one in
	// the worker's own cgroup: cmd passes the transient-unit starter).
	Start intercom.BrokerStarter
	// Logger receives the shim's own warnings; nil logs text to standard
	// error.
	Logger *slog.Logger
	// Stdout and Stderr receive the command's output (the unit's log), and
	// the shim's reasons for failing.
	Stdout, Stderr io.Writer
	// Kind is the worker kind: "" or "exec" runs Command; a coding-agent
	// kind (harness.IsKind) runs the wake loop of the spec Spawn wrote to
	// fleet.WorkerDir, with Command as the harness executable and extra args.
	Kind string
	// AgentFleet is how a turn's harness runs agent-fleet for its MCP
	// server; nil is the shim's own executable. AgentFleetEnv ("K=V") is
	// added to that server's environment.
	AgentFleet, AgentFleetEnv []string
	// TurnBackoff is the wait after a failed turn, doubling per failure in
	// a row up to 5 min; 0 is 5 s.
	TurnBackoff time.Duration
	// ReadyGrace is how long an exec worker's command must run before
	// READY; one that ends within it has its exit recorded first, so the
	// spawn reads how it ended. 0 is fleet.DefaultReadyGrace.
	ReadyGrace time.Duration
	// Share asks the broker's node to announce the worker's session to
	// the other hosts after every registration (intercom.SessionConfig.
	// Share): a worker spawned for a manager on another host.
	Share bool
	// History, when set, records the worker session's messages and
	// receipts.
	History intercom.Recorder
	// Settled, when set, runs once after READY, once the registry is
	// open, off every stop's path: the CLI trims the process's resident
	// set there, which a stop would otherwise pay for as the exit's
	// unmapping.
	Settled func()
}

// Exit statuses of the shim itself, when the workload never ran.
const (
	ExitNoSession = 70  // the intercom session could not be registered or served
	ExitExec      = 127 // the command (or a coding agent's first turn) could not be executed
)

// OpManager asks a worker's shim holder who manages the worker now (after
// an adoption, not the manager it was spawned by), through
// intercom.HolderClient.Call; the result is a Manager.
const OpManager = "manager"

// Manager is the answer to OpManager.
type Manager struct {
	WorkerID     string `json:"workerId"`
	RunID        string `json:"runId"`
	Manager      string `json:"manager"`
	FirstManager string `json:"firstManager"`
}
