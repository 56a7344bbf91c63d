package fleet

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Identity variables fleet sets on every worker (docs/architecture.md "Workers").
const (
	EnvWorkerID      = "AGENT_INTERCOM_WORKER_ID"
	EnvRunID         = "AGENT_INTERCOM_RUN_ID"
	EnvUnit          = "AGENT_INTERCOM_SYSTEMD_UNIT"
	EnvManagerID     = "AGENT_INTERCOM_MANAGER_SESSION_ID"
	EnvManagerTarget = "AGENT_INTERCOM_MANAGER_TARGET"
	EnvOwned         = "AGENT_INTERCOM_OWNED"
	EnvRole          = "AGENT_INTERCOM_ROLE"
	EnvSessionID     = "AGENT_INTERCOM_SESSION_ID"
	EnvSessionName   = "AGENT_INTERCOM_SESSION_NAME"
	EnvScope         = "AGENT_INTERCOM_SCOPE_ID"
	EnvAgentDir      = "PI_CODING_AGENT_DIR"
)

// EnvLease records, in a worker's unit, the idle lease it was spawned with
// (a Go duration; "0s" for none), so that a record rebuilt from the unit
// after the registry was lost gets that lease and never a longer one. It is
// fleet's note to itself: the shim removes it from the command's
// environment.
const EnvLease = "AGENT_FLEET_WORKER_LEASE"

// EnvMaxRuntime records, in the unit of a worker spawned with a maximum
// runtime, that runtime (a Go duration), so that its shim can tell
// systemd's stop at the limit from other ends when it records the exit.
// Another of fleet's notes to itself, removed like EnvLease.
const EnvMaxRuntime = "AGENT_FLEET_WORKER_MAX_RUNTIME"

// passedThrough is the caller environment a worker keeps (docs/architecture.md "Workers").
var passedThrough = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TZ", "XDG_RUNTIME_DIR"}

// stripped matches variables no worker may inherit, from the caller or from
// the user manager's own environment: other sessions' intercom identities,
// peer ids, TmuxDeck and harness session variables (docs/architecture.md "Workers").
var stripped = regexp.MustCompile(`(^|_)INTERCOM_|(^|_)PEER_|^TMUXDECK_|^CLAUDE_CODE_SESSION|^CLAUDECODE$|^CODEX_SESSION|^CODEX_THREAD|^OPENCODE_SESSION|^PI_SESSION|^NOTIFY_SOCKET$|^MAINPID$|^INVOCATION_ID$|^SYSTEMD_EXEC_PID$`)

// Stripped reports whether name must never reach a worker from outside.
func Stripped(name string) bool { return stripped.MatchString(name) }

// envNameRE is what a --env name may be.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

const (
	// MaxExecString is the longest argument or environment entry, in bytes,
	// Linux passes to a program (MAX_ARG_STRLEN: 32 pages, less its NUL).
	MaxExecString = 32*4096 - 1
	// MaxExecList bounds a worker's command line, and its --env entries,
	// in bytes (each string counted with its NUL): systemd writes each as
	// one line of the transient unit file and reads back lines of at most
	// 1 MiB, and both together must stay under the kernel's ARG_MAX
	// (2 MiB with the usual 8 MiB stack) beside what fleet adds.
	MaxExecList = 512 << 10
)

// checkExecSizes refuses a command line or environment the worker's
// process could not be started with (E2BIG) or systemd could not keep.
// Errors wrap ErrInvalidRequest.
func checkExecSizes(argv, env []string) error {
	for _, l := range []struct {
		what string
		list []string
	}{{"command", argv}, {"env", env}} {
		total := 0
		for i, s := range l.list {
			if len(s) > MaxExecString {
				name := fmt.Sprintf("argument %d", i)
				if l.what == "env" {
					k, _, _ := strings.Cut(s, "=")
					name = "entry " + k
				}
				return fmt.Errorf("%w: %s %s is %d bytes; Linux passes at most %d bytes per argument or variable: pass a path to a file instead",
					ErrInvalidRequest, l.what, name, len(s), MaxExecString)
			}
			total += len(s) + 1
		}
		if total > MaxExecList {
			return fmt.Errorf("%w: the %s is %d bytes in all, over the %d a worker's unit can hold: pass a path to a file instead",
				ErrInvalidRequest, l.what, total, MaxExecList)
		}
	}
	return nil
}

// ParseEnv checks --env entries ("K=V"). Identity variables fleet sets
// cannot be overridden.
func ParseEnv(entries []string) ([]string, error) {
	var out []string
	for _, e := range entries {
		k, _, ok := strings.Cut(e, "=")
		if !ok || !envNameRE.MatchString(k) {
			return nil, fmt.Errorf("%w: env entries are NAME=value, got %q", ErrInvalidRequest, e)
		}
		if strings.ContainsRune(e, 0) {
			return nil, fmt.Errorf("%w: env %s contains a NUL byte", ErrInvalidRequest, k)
		}
		if strings.HasPrefix(k, "AGENT_INTERCOM_") || k == EnvAgentDir {
			return nil, fmt.Errorf("%w: env %s: fleet sets the intercom identity itself", ErrInvalidRequest, k)
		}
		if k == EnvLease || k == EnvShimKeep || k == EnvMaxRuntime {
			return nil, fmt.Errorf("%w: env %s: fleet sets it itself", ErrInvalidRequest, k)
		}
		out = append(out, e)
	}
	return out, nil
}

// workerEnv builds a worker's environment: the allowlisted caller
// variables, the agent directory, the --env entries, then the identity.
// Every name appears once (systemd refuses a unit environment that names
// one twice): an --env entry replaces the caller's variable of its name
// (a worker's own HOME), and of two entries for one name the last wins.
func workerEnv(callerEnv func(string) string, agentDir string, extra []string, identity map[string]string) []string {
	last := map[string]int{}
	for i, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		last[k] = i
	}
	var env []string
	for _, k := range passedThrough {
		if _, set := last[k]; set {
			continue
		}
		if v := callerEnv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	env = append(env, EnvAgentDir+"="+agentDir)
	for i, kv := range extra {
		if k, _, _ := strings.Cut(kv, "="); last[k] == i {
			env = append(env, kv)
		}
	}
	keys := make([]string, 0, len(identity))
	for k := range identity {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		env = append(env, k+"="+identity[k])
	}
	return env
}

// EnvShimKeep names, comma-separated, the variables of the strip list that
// a worker's unit sets itself (its identity, --env entries). The shim
// (fleet/shim) keeps those and removes every other such variable — what the
// user manager's own environment passes on to every unit, but for the ones
// systemd sets for the service itself — before anything reads its
// environment, so neither the shim nor the command ever sees one. (Doing it
// there, rather than with UnsetEnvironment= from the manager's environment
// read at spawn, saves spawn a D-Bus call and cannot miss a variable set
// between that read and the start.)
const EnvShimKeep = "AGENT_FLEET_SHIM_KEEP"

// shimKeep is EnvShimKeep's value for a unit environment.
func shimKeep(env []string) string {
	var keep []string
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); Stripped(k) {
			keep = append(keep, k)
		}
	}
	return strings.Join(keep, ",")
}
