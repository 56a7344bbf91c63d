// Package fleet runs workers as systemd user services and keeps their
// registry: spawn with readiness that means the command ran and the worker
// is reachable, honest states from systemd plus the registry, and stops
// whose cleanup is proven from the unit's cgroup (docs/architecture.md "Workers").
// It is the manager side: the process inside each unit is fleet/shim, and
// the coding-agent kinds both use are the pure fleet/harness.
package fleet

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/units"
)

// Defaults of Config.
const (
	DefaultStartTimeout = 30 * time.Second
	DefaultStopTimeout  = 10 * time.Second
	// DefaultReadyGrace is how long an exec worker's command must have run
	// before its shim signals READY (Config.ReadyGrace).
	DefaultReadyGrace  = 250 * time.Millisecond
	maxStatusProcesses = 64
)

// Config configures a Fleet.
type Config struct {
	Paths    intercom.Paths
	Registry *Registry
	// Units is the user manager workers run under.
	Units units.Manager
	// Cgroups reads cgroups; nil opens the host's.
	Cgroups *units.Cgroups
	// Caller is the session id of whoever acts (the manager of what it
	// spawns).
	Caller string
	// CallerEnv looks up the caller's environment (PATH for commands, the
	// allowlisted variables workers get); nil is os.Getenv.
	CallerEnv func(string) string
	// CallerCwd is the default working directory; "" is os.Getwd.
	CallerCwd string
	// Shim is the argv prefix of the worker shim: the agent-fleet binary
	// and its hidden worker-shim command.
	Shim []string
	// ShimEnv is added to every worker unit's environment (tests).
	ShimEnv []string
	// StartTimeout bounds a spawn's wait for READY; StopTimeout is how long
	// a stop waits after SIGTERM before SIGKILL.
	StartTimeout, StopTimeout time.Duration
	// ReadyGrace is how long an exec worker's command must run before its
	// shim signals READY: a command that ends within it is recorded first,
	// so spawn reports how it ended instead of "running". 0 is
	// DefaultReadyGrace.
	ReadyGrace time.Duration
	// Journal sends worker output to the journal instead of a log file
	// (only where journald runs).
	Journal bool
	// Leases is the lease policy; zero fields take DefaultLeasePolicy's.
	Leases LeasePolicy
	// Peers answers which pid a session is connected from (the broker's
	// local API); nil makes lease activity fall back to sender ids and
	// adoption treat every manager as disconnected.
	Peers PeerChecker
	// Notify sends a checkpoint message to a worker as the session
	// "agent-fleet" (the janitor uses it); nil disables checkpoints.
	Notify func(ctx context.Context, workerID, text string) error
	// EnsureBroker starts the broker when none answers; a spawn of a
	// confined worker (which cannot reach the user bus to start one in a
	// unit of its own) calls it first. nil: not done.
	EnsureBroker func(ctx context.Context) error
	// Notices sends worker-ended notices (ended.go) right after an
	// operation of this fleet ended a worker, and in the janitor's runs;
	// nil leaves them owed in the registry for another process.
	Notices NoticeSender
	// Now is the clock of deadlines and stamps (tests move it).
	Now    func() time.Time
	Logger *slog.Logger
}

// Fleet performs fleet operations for one caller. Safe for concurrent use.
type Fleet struct {
	cfg Config
	log *slog.Logger

	mu sync.Mutex
	// listing is Reconcile's ListUnits of the worker units, for the
	// settleLive that follows it (workerUnits).
	listing *unitListing
}

// New returns a Fleet. Registry, Units and Shim are required.
func New(cfg Config) (*Fleet, error) {
	if cfg.CallerEnv == nil {
		cfg.CallerEnv = os.Getenv
	}
	if cfg.CallerCwd == "" {
		cfg.CallerCwd, _ = os.Getwd()
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if cfg.ReadyGrace <= 0 {
		cfg.ReadyGrace = DefaultReadyGrace
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Leases = cfg.Leases.withDefaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Cgroups == nil {
		cg, err := units.OpenCgroups("/")
		if err != nil {
			return nil, err
		}
		cfg.Cgroups = cg
	}
	return &Fleet{cfg: cfg, log: cfg.Logger}, nil
}

// ReadyGrace is how long an exec worker's command runs before its shim
// signals READY (Config.ReadyGrace, defaults applied).
func (f *Fleet) ReadyGrace() time.Duration { return f.cfg.ReadyGrace }

// Paths are the agent directory the fleet works in.
func (f *Fleet) Paths() intercom.Paths { return f.cfg.Paths }

// RegistryPath is where the fleet registry of p lives.
func RegistryPath(p intercom.Paths) string {
	return filepath.Join(p.OrchestratorDir(), "fleet.db")
}

// WorkerDir holds a coding-agent incarnation's files: spec.json (written
// by Spawn), state.json and held.json (the shim's turn record) and the MCP
// configuration files of its turns. 0700, files 0600.
func WorkerDir(p intercom.Paths, id, run string) string {
	return filepath.Join(p.OrchestratorDir(), "workers", id+"-"+run)
}

// LogDir holds worker log files where there is no journald.
func LogDir(p intercom.Paths) string { return logDirIn(p.OrchestratorDir()) }

func logDirIn(orchestrator string) string { return filepath.Join(orchestrator, "logs") }

// LogFile is the log file of incarnation id+run where there is no
// journald (the file exists only then).
func LogFile(p intercom.Paths, id, run string) string { return logFileIn(LogDir(p), id, run) }

func logFileIn(logDir, id, run string) string { return filepath.Join(logDir, id+"-"+run+".log") }

// exitDir holds the exit records units write when they end.
func exitDir(p intercom.Paths) string { return filepath.Join(p.OrchestratorDir(), "exits") }

func (f *Fleet) exitRecordPath(w *Worker) string {
	return filepath.Join(exitDir(f.cfg.Paths), w.ID+"-"+w.RunID+".exit")
}

// IsOperator reports whether a manager id is a person's (operator-<user>).
func IsOperator(manager string) bool { return strings.HasPrefix(manager, "operator-") }

// tailLines returns the last n lines of a file (bounded read).
func tailLines(path string, n int) []string {
	fh, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer fh.Close()
	const window = 64 << 10
	if fi, err := fh.Stat(); err == nil && fi.Size() > window {
		_, _ = fh.Seek(fi.Size()-window, io.SeekStart)
	}
	var lines []string
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 0, 4096), window)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return lines
}
