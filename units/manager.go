package units

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"syscall"
	"time"
)

// Manager is what the fleet needs from a systemd user manager. *Systemd is
// the real one, *unitstest.Fake the one for fast tests;
// unitstest.RunConformance keeps them in agreement. Implementations are safe for concurrent use.
//
// Every method honours ctx's deadline; a ctx without a deadline gets the
// implementation's default (Options.DefaultTimeout). A manager that does not
// answer makes calls fail with an error matching ErrTimeout, never hang.
type Manager interface {
	// StartService creates and starts a transient service and waits for its
	// start job. It returns the unit's state read right after the job
	// finished with "done" (MainPID, ControlGroup and InvocationID are
	// captured then). A unit that already ended by then comes back with
	// ActiveState inactive/failed or Gone(). A failed unit of the same name
	// is reset first; an active one gives ErrUnitExists. A job result other
	// than "done" gives a *JobError (ErrJobFailed) carrying the state.
	// With Type=exec a command that exits non-zero at once may give either
	// outcome (systemd races execve's success against the exit); with
	// Type=notify an exit before READY=1 always fails the job.
	StartService(ctx context.Context, spec ServiceSpec) (UnitState, error)
	// StopUnit stops a unit and waits for the stop job (SIGTERM, then
	// SIGKILL after the unit's stop timeout, to the whole cgroup). Stopping
	// a unit that is not loaded gives ErrUnitNotFound. A ctx from
	// WithJobQueued hears when the manager has queued the job.
	StopUnit(ctx context.Context, name string) error
	// StopTimeout is how long a service's stop job waits after SIGTERM
	// before it sends SIGKILL (TimeoutStopUSec, fixed when the unit
	// started); NoTimeout for none. One property read. A unit that is not
	// loaded answers with the manager's default (90 s unless configured).
	StopTimeout(ctx context.Context, name string) (time.Duration, error)
	// ControlPID is the pid of the service's control process: the
	// ExecStartPre/StartPost/Reload/Stop/StopPost command systemd runs in
	// the unit's cgroup (one at a time), 0 while none runs and for a unit
	// that is not loaded. One property read. systemd starts ExecStopPost
	// only once the main process has ended, so a cgroup holding nothing
	// but that pid holds nothing of the service's own.
	ControlPID(ctx context.Context, name string) (int, error)
	// ResetFailed forgets a failed unit so its name can be used again. It
	// is a no-op for units that are not loaded or not failed.
	ResetFailed(ctx context.Context, name string) error
	// KillUnit sends sig to every process of the unit (the whole cgroup),
	// without stopping it. ErrUnitNotFound if it is not loaded.
	KillUnit(ctx context.Context, name string, sig syscall.Signal) error
	// FreezeUnit freezes every process of a running unit's cgroup (the
	// cgroup2 freezer) and returns once it is frozen; ThawUnit lets them
	// run again. ErrUnitNotFound if the unit is not loaded;
	// ErrFreezeUnsupported where the manager cannot freeze units (systemd
	// freezes only with every cgroup hierarchy unified). FreezerState
	// reports the outcome.
	FreezeUnit(ctx context.Context, name string) error
	ThawUnit(ctx context.Context, name string) error
	// Unit reads a unit's state. A unit that is not loaded is not an error:
	// its state has Gone() true.
	Unit(ctx context.Context, name string) (UnitState, error)
	// ListUnits lists the loaded units whose names match any of the glob
	// patterns (e.g. "agent-fleet-worker-*"), sorted by name.
	ListUnits(ctx context.Context, patterns ...string) ([]UnitSummary, error)
	// ServiceEnvironment is a loaded service's Environment= (what its spec
	// set, not what it inherits). Fleet reads worker identities from it to
	// rebuild a lost registry. ErrUnitNotFound if the unit is not loaded.
	ServiceEnvironment(ctx context.Context, name string) ([]string, error)
	// ServiceCommand is what a loaded service runs and since when: its
	// ExecStart= argv, WorkingDirectory= and ExecMainStartTimestamp. Fleet
	// reads it to rebuild a lost registry. ErrUnitNotFound if the unit is
	// not loaded.
	ServiceCommand(ctx context.Context, name string) (ServiceCommand, error)
	// Version is the user manager's systemd version.
	Version(ctx context.Context) (Version, error)
	// Ping checks that the user manager itself answers (not only the bus).
	Ping(ctx context.Context) error
	// Close releases the connection. Safe to call twice.
	Close() error
}

// NoTimeout is StopTimeout's answer for a unit that waits forever.
const NoTimeout = time.Duration(math.MaxInt64)

type jobQueuedKey struct{}

// WithJobQueued returns a ctx that makes StopUnit call queued once the
// manager has accepted the stop job, before the job is done: the moment
// its SIGTERM goes out. queued runs at most once, on StopUnit's goroutine.
func WithJobQueued(ctx context.Context, queued func()) context.Context {
	return context.WithValue(ctx, jobQueuedKey{}, queued)
}

// JobQueued calls ctx's WithJobQueued callback, if any: what a Manager
// does once its manager accepted a stop job.
func JobQueued(ctx context.Context) {
	if fn, ok := ctx.Value(jobQueuedKey{}).(func()); ok && fn != nil {
		fn()
	}
}

// ServiceCommand is what a service's main process runs (Manager.ServiceCommand).
type ServiceCommand struct {
	// Argv is the first ExecStart= command line (nil for none).
	Argv []string
	// WorkingDirectory is WorkingDirectory= ("" when unset).
	WorkingDirectory string
	// StartedAt is when the main process started (ExecMainStartTimestamp,
	// microsecond precision); zero while it has not.
	StartedAt time.Time
}

// Options configure Connect and Probe.
type Options struct {
	// Bus, when its Address is set, is used instead of resolving the
	// address from the environment.
	Bus BusAddress
	// Getenv looks up environment variables for ResolveBus; default
	// os.Getenv.
	Getenv func(string) string
	// DefaultTimeout bounds an operation whose ctx has no deadline,
	// including the wait for its job; default 30 s. Pass a ctx with a later
	// deadline to stop units with longer stop timeouts.
	DefaultTimeout time.Duration
	// Logger receives reconnects at Info and retries at Debug; default
	// slog.Default().
	Logger *slog.Logger
}

const defaultTimeout = 30 * time.Second

func (o Options) timeout() time.Duration {
	if o.DefaultTimeout > 0 {
		return o.DefaultTimeout
	}
	return defaultTimeout
}

func (o Options) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.Default()
}

// withDefaultDeadline gives ctx a deadline of d if it has none.
func withDefaultDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// ProbeResult is what Probe found.
type ProbeResult struct {
	// Bus is the address used and where it came from.
	Bus BusAddress
	// Version of the user manager.
	Version Version
	// RoundTrip is how long a ping to the manager took.
	RoundTrip time.Duration
}

// timeoutError reports that ctx ended while waiting for what.
func timeoutError(ctx context.Context, what string, started time.Time) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
	return fmt.Errorf("%s: %w: no answer within %s; the user manager may be stopped or overloaded, and the outcome is unknown (%w)",
		what, ErrTimeout, time.Since(started).Round(time.Millisecond), ctx.Err())
}

// sleepFor waits d or until ctx ends (then its error).
func sleepFor(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
