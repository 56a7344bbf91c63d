package units

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// DefaultSlice is the slice our services run in unless a spec names another.
// systemd nests slices by their dashes, so its cgroup is
// .../agent.slice/agent-fleet.slice/<unit>.
const DefaultSlice = "agent-fleet.slice"

// ServiceType is systemd's Type= for a service.
type ServiceType string

const (
	// ServiceExec: the start job finishes once execve of the main process
	// succeeded, so a missing or non-executable binary fails the start.
	ServiceExec ServiceType = "exec"
	// ServiceNotify: the start job finishes when the main process sends
	// READY=1 on $NOTIFY_SOCKET, and fails if it exits before.
	ServiceNotify ServiceType = "notify"
	// ServiceSimple: the start job finishes right after fork; a failing
	// execve shows up later as a failed unit.
	ServiceSimple ServiceType = "simple"
)

// CollectMode is systemd's CollectMode= for a transient unit.
type CollectMode string

const (
	// CollectInactiveOrFailed unloads the unit as soon as it is inactive or
	// failed, so failed units never pile up. Its result and exit status are
	// then gone: record them with ServiceSpec.ExitRecord. The default.
	CollectInactiveOrFailed CollectMode = "inactive-or-failed"
	// CollectInactive keeps a failed unit loaded (with Result,
	// ExecMainCode and ExecMainStatus readable) until ResetFailed.
	CollectInactive CollectMode = "inactive"
)

// Output is where a service's stdout or stderr goes, in systemd's
// StandardOutput= syntax. The zero value leaves systemd's default (the
// journal).
type Output string

const (
	// OutputJournal sends the stream to the journal. Hosts where PID 1 is
	// not systemd have no journald and lose it.
	OutputJournal Output = "journal"
	// OutputNull discards the stream.
	OutputNull Output = "null"
)

// AppendTo sends a stream to the end of the file at path (absolute),
// creating it if needed.
func AppendTo(path string) Output { return Output("append:" + path) }

// ServiceSpec describes a transient service. The zero values of the optional
// fields give: Type=exec, our DefaultSlice, CollectMode=inactive-or-failed,
// output to the journal, systemd's default timeouts (90 s start/stop), no
// runtime limit. KillMode is always control-group: stopping the unit kills
// every process in its cgroup, however it was started (setsid, double fork,
// nohup).
type ServiceSpec struct {
	// Name is the unit name, ending in ".service", unique per launch
	// (e.g. agent-fleet-worker-<id>-<run>.service). Required.
	Name string
	// Description is shown by systemctl; defaults to Name.
	Description string
	// Argv is the command; Argv[0] must be an absolute path (resolve it with
	// the caller's PATH first: the user manager's PATH is not the caller's).
	// It is passed verbatim: "$" is never expanded by systemd. Required.
	Argv []string
	// WorkingDirectory is absolute; "" keeps the manager's (the home
	// directory).
	WorkingDirectory string
	// Env is the unit's environment, "KEY=value" entries, added to the user
	// manager's own environment.
	Env []string
	// UnsetEnv names variables removed from what the unit would otherwise
	// inherit from the user manager's environment (systemd ≥ 235).
	UnsetEnv []string
	// Type is exec (default), notify or simple.
	Type ServiceType
	// NotifyAccess for Type=notify: "main" (default) or "all".
	NotifyAccess string
	// Slice is the slice the unit runs in; default DefaultSlice.
	Slice string
	// StartTimeout bounds the start job (notify: time to READY=1); 0 keeps
	// systemd's default (90 s). Rounded down to microseconds.
	StartTimeout time.Duration
	// StopTimeout is how long a stop waits after SIGTERM before SIGKILL;
	// 0 keeps systemd's default (90 s).
	StopTimeout time.Duration
	// MaxRuntime stops the unit after it has been active this long
	// (RuntimeMaxSec); 0 means no limit.
	MaxRuntime time.Duration
	// Collect is the CollectMode; default CollectInactiveOrFailed.
	Collect CollectMode
	// LogFile, when set (absolute), sends both stdout and stderr to the end
	// of that file. Stdout and Stderr, when set, take precedence.
	LogFile string
	// Stdout and Stderr override LogFile per stream.
	Stdout, Stderr Output
	// StopPost is an optional command run after the service stopped
	// (ExecStopPost), with $SERVICE_RESULT, $EXIT_CODE and $EXIT_STATUS set.
	// Argv[0] must be absolute. Passed verbatim like Argv.
	StopPost []string
	// ExitRecord, when set (absolute path), makes the unit write its final
	// result there when it ends, even if nobody is watching and the unit is
	// collected at once; read it with ReadExitRecord. Uses /bin/sh.
	ExitRecord string
	// Limits are the unit's MemoryMax=, CPUQuota= and TasksMax= (with the
	// accounting each needs); zero fields set none. systemd accepts them
	// even where it cannot apply them (a controller the manager lacks):
	// check ManagerControllers first.
	Limits Limits
	// Sandbox confines the service (and its ExecStopPost, the exit record
	// included); the zero value confines nothing.
	Sandbox Sandbox
}

// unitNameRE is what we accept as a service name: systemd's unit-name
// characters, no template "@" (and at most 255 bytes: ValidUnitName). The
// length is not a counted repetition, which would cost every process start
// a quarter-millisecond compile.
var unitNameRE = regexp.MustCompile(`^[A-Za-z0-9:_.\\-]+\.service$`)

// ValidUnitName reports whether name is a unit name we create: a
// ".service" name of systemd's allowed characters, without "@", at most 255
// bytes.
func ValidUnitName(name string) bool { return len(name) <= 255 && unitNameRE.MatchString(name) }

// WithDefaults returns the spec as StartService runs it: the optional
// fields filled (see ServiceSpec), everything validated. Errors match
// ErrInvalidSpec. Other Managers (unitstest.Fake) use it to accept exactly
// what Systemd accepts.
func (s ServiceSpec) WithDefaults() (ServiceSpec, error) {
	bad := func(format string, args ...any) (ServiceSpec, error) {
		return s, fmt.Errorf("%w: %s: %s", ErrInvalidSpec, s.Name, fmt.Sprintf(format, args...))
	}
	if !ValidUnitName(s.Name) {
		return bad("unit name must match %s and have at most 255 bytes", unitNameRE)
	}
	if len(s.Argv) == 0 {
		return bad("empty command")
	}
	if !filepath.IsAbs(s.Argv[0]) {
		return bad("command %q is not an absolute path (resolve it with the caller's PATH first)", s.Argv[0])
	}
	if len(s.StopPost) > 0 && !filepath.IsAbs(s.StopPost[0]) {
		return bad("stop-post command %q is not an absolute path", s.StopPost[0])
	}
	for _, p := range []struct{ what, path string }{
		{"working directory", s.WorkingDirectory}, {"log file", s.LogFile}, {"exit record", s.ExitRecord},
	} {
		if p.path != "" && !filepath.IsAbs(p.path) {
			return bad("%s %q is not absolute", p.what, p.path)
		}
	}
	for _, out := range []Output{s.Stdout, s.Stderr} {
		if path, ok := strings.CutPrefix(string(out), "append:"); ok && !filepath.IsAbs(path) {
			return bad("output file %q is not absolute", path)
		}
	}
	if err := s.Sandbox.validate(); err != nil {
		return bad("%v", err)
	}
	for _, kv := range s.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return bad("environment entry %q is not KEY=value", kv)
		}
	}
	if s.Limits.CPUQuotaPercent > MaxCPUQuotaPercent {
		return bad("CPU quota %d%% is over %d%%", s.Limits.CPUQuotaPercent, MaxCPUQuotaPercent)
	}
	for _, d := range []time.Duration{s.StartTimeout, s.StopTimeout, s.MaxRuntime} {
		if d < 0 {
			return bad("negative duration %s", d)
		}
	}
	if s.Description == "" {
		s.Description = s.Name
	}
	switch s.Type {
	case "":
		s.Type = ServiceExec
	case ServiceExec, ServiceNotify, ServiceSimple:
	default:
		return bad("unknown service type %q", s.Type)
	}
	if s.Type == ServiceNotify && s.NotifyAccess == "" {
		s.NotifyAccess = "main"
	}
	switch s.NotifyAccess {
	case "", "main", "all":
	default:
		return bad("NotifyAccess %q is not main or all", s.NotifyAccess)
	}
	if s.Slice == "" {
		s.Slice = DefaultSlice
	}
	if !strings.HasSuffix(s.Slice, ".slice") {
		return bad("slice %q does not end in .slice", s.Slice)
	}
	switch s.Collect {
	case "":
		s.Collect = CollectInactiveOrFailed
	case CollectInactive, CollectInactiveOrFailed:
	default:
		return bad("unknown collect mode %q", s.Collect)
	}
	if s.LogFile != "" {
		if s.Stdout == "" {
			s.Stdout = AppendTo(s.LogFile)
		}
		if s.Stderr == "" {
			s.Stderr = AppendTo(s.LogFile)
		}
	}
	return s, nil
}
