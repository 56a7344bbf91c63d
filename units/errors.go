package units

import (
	"errors"
	"fmt"
	"strings"
)

// The error vocabulary of this package. Callers test with errors.Is; the
// messages are written for the person who has to fix the host.
var (
	// ErrUnsupported: this operating system has no systemd user manager.
	// Every Manager method and cgroup operation returns it off Linux.
	ErrUnsupported = errors.New("worker lifecycle needs Linux with a systemd user manager")

	// ErrNoUserBus: no user D-Bus bus address could be found. The concrete
	// error is a *NoUserBusError that says what is missing and how to fix it.
	ErrNoUserBus = errors.New("no user D-Bus bus")

	// ErrManagerUnreachable: the bus or the user manager behind it cannot be
	// reached (socket gone, connection refused, manager not on the bus).
	ErrManagerUnreachable = errors.New("systemd user manager unreachable")

	// ErrTimeout: the user manager did not answer, or a job did not finish,
	// before the caller's deadline. The manager may be wedged (stopped,
	// overloaded); the outcome of the request is unknown.
	ErrTimeout = errors.New("systemd user manager did not answer in time")

	// ErrUnitNotFound: no unit of that name is loaded.
	ErrUnitNotFound = errors.New("unit not found")

	// ErrNoPrivateManager: no private user manager runs at that runtime
	// directory (StopPrivateManagerAt): it does not exist.
	ErrNoPrivateManager = errors.New("no private user manager there")

	// ErrUnitExists: a unit of that name is already loaded and not failed,
	// so a transient unit cannot be created under that name.
	ErrUnitExists = errors.New("unit already exists")

	// ErrJobFailed: a start or stop job finished with a result other than
	// "done". The concrete error is a *JobError carrying the result.
	ErrJobFailed = errors.New("systemd job failed")

	// ErrInvalidSpec: a ServiceSpec was rejected before anything was sent
	// to systemd.
	ErrInvalidSpec = errors.New("invalid service spec")

	// ErrProcessGone: the process no longer exists (its /proc entry is gone
	// or empty).
	ErrProcessGone = errors.New("process gone")

	// ErrCgroupNotEmpty: processes were still in a cgroup when a kill gave
	// up (processes in uninterruptible sleep, or ones we may not signal).
	ErrCgroupNotEmpty = errors.New("processes survived in the cgroup")

	// ErrNoCgroups: no cgroup hierarchy that systemd uses is mounted.
	ErrNoCgroups = errors.New("no systemd cgroup hierarchy mounted")

	// ErrFreezeUnsupported: the user manager cannot freeze this unit
	// (systemd freezes units only when every cgroup hierarchy is unified),
	// or the host has no cgroup2 freezer to fall back on.
	ErrFreezeUnsupported = errors.New("freezing is not supported here")
)

// NoUserBusError says why no user bus address was found. It matches
// ErrNoUserBus with errors.Is.
type NoUserBusError struct {
	// BusEnv is the value of DBUS_SESSION_BUS_ADDRESS ("" when unset).
	BusEnv string
	// RuntimeDir is the value of XDG_RUNTIME_DIR ("" when unset).
	RuntimeDir string
	// Missing is the socket path that was looked for and not found, if any.
	Missing string
	// Hint is a socket that exists but was not used because the environment
	// does not point at it (e.g. /run/user/<uid>/bus while XDG_RUNTIME_DIR is
	// unset), or "".
	Hint string
	// NoSystemdInit: PID 1 is not systemd (a container), so no login starts
	// a user manager and lingering cannot help; a private manager can.
	NoSystemdInit bool
}

// Reason is what is missing, on one line.
func (e *NoUserBusError) Reason() string {
	var b strings.Builder
	b.WriteString("no user D-Bus bus: ")
	switch {
	case e.BusEnv != "" && e.Missing != "":
		fmt.Fprintf(&b, "DBUS_SESSION_BUS_ADDRESS=%s points at %s, which does not exist", e.BusEnv, e.Missing)
	case e.RuntimeDir == "":
		b.WriteString("DBUS_SESSION_BUS_ADDRESS and XDG_RUNTIME_DIR are both unset")
	default:
		fmt.Fprintf(&b, "DBUS_SESSION_BUS_ADDRESS is unset and %s does not exist", e.Missing)
	}
	return b.String()
}

// Fix is what to do about it, one step per line: for this host (a
// container whose PID 1 is not systemd gets the private manager, a
// systemd host a login or lingering).
func (e *NoUserBusError) Fix() []string {
	var fix []string
	if e.Hint != "" {
		fix = append(fix, fmt.Sprintf("a user bus exists at %s: export XDG_RUNTIME_DIR=%s", e.Hint, strings.TrimSuffix(e.Hint, "/bus")),
			"(su and sudo without a login session leave it unset)")
	}
	if e.NoSystemdInit {
		return append(fix,
			"PID 1 is not systemd here (a container?): no login starts a user manager, and lingering cannot help.",
			`As root, boot a private one for this shell: eval "$(agent-fleet user-manager start)"`,
			"(it needs the systemd and dbus-user-session packages; agent-fleet user-manager stop ends it)")
	}
	return append(fix,
		"Log in through a PAM session (SSH, a desktop), or run: loginctl enable-linger $USER",
		"then: export XDG_RUNTIME_DIR=/run/user/$(id -u)",
		"(Debian and Ubuntu need the dbus-user-session package for the user bus)")
}

// Error is the reason, then what workers need and the fix, on short
// lines.
func (e *NoUserBusError) Error() string {
	lines := []string{e.Reason() + ".", "Workers need a running systemd user manager with its user bus."}
	lines = append(lines, e.Fix()...)
	lines = append(lines, "agent-fleet never starts a bus with dbus-launch.")
	return strings.Join(lines, "\n")
}

// Is makes errors.Is(err, ErrNoUserBus) true.
func (e *NoUserBusError) Is(target error) bool { return target == ErrNoUserBus }

// JobError is a systemd job that finished with a result other than "done".
// It matches ErrJobFailed with errors.Is.
type JobError struct {
	Unit string // unit name
	Job  string // "start" or "stop"
	// Result is systemd's job result: "failed", "canceled", "timeout",
	// "dependency", "skipped" (or "invalid"/"unsupported"/"collected").
	Result string
	// State is the unit's state read right after the job, when it could be
	// read; the zero value otherwise.
	State UnitState
}

func (e *JobError) Error() string {
	msg := fmt.Sprintf("%s job for %s finished with result %q", e.Job, e.Unit, e.Result)
	if e.State.Result != "" && e.State.Result != "success" {
		msg += fmt.Sprintf(" (unit result %q", e.State.Result)
		if e.State.ExecMainCode != 0 {
			msg += fmt.Sprintf(", main process %s", e.State.ExitDescription())
		}
		msg += ")"
	}
	if e.Job == "start" && e.State.Gone() {
		msg += "; the unit is already collected: its command could not be executed or exited at once (an ExitRecord or the log says which)"
	}
	return msg
}

// Is makes errors.Is(err, ErrJobFailed) true.
func (e *JobError) Is(target error) bool { return target == ErrJobFailed }
