// Package factory is what every agent-fleet command is built from: the IO
// streams, the platform the fleet surfaces answer for, the configuration
// read from the environment (resolved here once, never in the engines),
// and lazy openers of the fleet, the user manager, the broker and the
// session a command acts as. The CLI (package main) and the MCP server
// (internal/mcpserver) receive one Factory; tests build one with buffers
// and fakes. It is the only package of cmd/agent-fleet that imports units
// and contrib.
package factory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet/remote"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/teams"
	"github.com/agent-fleet/agent-fleet/units"
)

// IOStreams are where a command reads and writes; tests inject buffers.
type IOStreams struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// System is the process's own standard streams.
func System() *IOStreams { return &IOStreams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr} }

// Factory holds the dependencies of agent-fleet's commands. The zero value
// is not usable: build it with New. Fields may be replaced before the first
// command runs (tests do); a Factory is then read-only and safe for
// concurrent use.
type Factory struct {
	IO *IOStreams
	// GOOS is the operating system the fleet surfaces answer for; tests set
	// it to see, on Linux, what macOS and Windows users get.
	GOOS string
	// Version is the build's version (see BuildVersion).
	Version string
	// ChildEnv is added to the environment of the agent-fleet processes
	// this one starts: brokers, worker shims, a turn's MCP server (tests use
	// it to make the test binary act as agent-fleet).
	ChildEnv []string
	// Executable is the agent-fleet binary those processes run.
	Executable func() (string, error)
	// ConnectUnits reaches the user manager workers run under; nil dials the
	// caller's user bus (units.Connect). Tests pass unitstest's fake.
	ConnectUnits func(ctx context.Context) (units.Manager, error)
	// ConnectFederation joins the other hosts for a CLI verb (Federation);
	// nil connects with the node configuration. Tests pass a link to a
	// NATS server of their own.
	ConnectFederation func(ctx context.Context, p intercom.Paths) (remote.Transport, func(), error)
	// Getenv is the environment commands read their configuration from
	// (the agent directory, the identity, lease and ask settings); nil is
	// the process's. In-process tests give each command its own.
	Getenv func(string) string
}

// Env is the variable k of f's environment.
func (f *Factory) Env(k string) string {
	if f.Getenv != nil {
		return f.Getenv(k)
	}
	return os.Getenv(k)
}

// New is the Factory of a real agent-fleet process.
func New(io *IOStreams, version string) *Factory {
	return &Factory{IO: io, GOOS: runtime.GOOS, Version: version, Executable: os.Executable}
}

// Logger logs to the command's stderr at level ("debug", "info", "warn",
// "error"; anything else is info).
func (f *Factory) Logger(level string) *slog.Logger { return NewLogger(f.IO.Err, level) }

// NewLogger logs text lines to w at level.
func NewLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	switch strings.ToLower(level) {
	case "debug":
		l = slog.LevelDebug
	case "warn":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	default:
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// BuildVersion is the version of this build: linked (set at link time with
// -ldflags "-X main.version=…"), else the module version from the build
// information — the tag for `go install …@vX.Y.Z`, a pseudo-version for a
// build in a git checkout — else "devel".
func BuildVersion(linked string) string {
	if linked != "" {
		return linked
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// UsageError marks a command-line (or tool-argument) mistake: exit 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usage wraps err as a UsageError.
func Usage(err error) error { return &UsageError{err} }

// Usagef is a UsageError with a formatted message.
func Usagef(format string, args ...any) error { return &UsageError{fmt.Errorf(format, args...)} }

// ErrNoSystemd wraps a user manager that cannot be reached (exit 6).
var ErrNoSystemd = errors.New("systemd user manager unavailable")

// ErrInterrupted: SIGINT or SIGTERM ended the command before it was done
// (exit 130); what it had found by then is printed all the same.
var ErrInterrupted = errors.New("interrupted")

// ErrAskTimeout: a one-shot ask got no reply in time and was cancelled
// (exit 1).
var ErrAskTimeout = errors.New("ask timed out")

// Paths are the agent directory's paths (PI_CODING_AGENT_DIR, else
// ~/.pi/agent).
func (f *Factory) Paths() (intercom.Paths, error) {
	dir, err := intercom.AgentDir(f.Env)
	if err != nil {
		return intercom.Paths{}, err
	}
	return intercom.NewPaths(dir), nil
}

// Identity is the identity of a CLI verb (docs/architecture.md
// "Identity"): AGENT_INTERCOM_SESSION_ID, else operator-<username>.
func (f *Factory) Identity() (intercom.Paths, intercom.Identity, error) {
	p, err := f.Paths()
	if err != nil {
		return p, intercom.Identity{}, err
	}
	id, err := intercom.ResolveIdentity(intercom.IdentityOptions{Kind: intercom.OneShot, Getenv: f.Env})
	if err != nil {
		return p, id, Usage(err)
	}
	return p, id, nil
}

// SessionIdentity is Identity for the intercom verbs that act as the
// session without reaching the broker (whoami, history): a Boss contract
// in the environment that is not usable refuses them, as it refuses every
// other (deny-all, docs/protocol.md §7.3).
func (f *Factory) SessionIdentity() (intercom.Paths, intercom.Identity, error) {
	p, id, err := f.Identity()
	if err != nil {
		return p, id, err
	}
	if err := teams.ReadBoss(nil).Usable(id.SessionID); err != nil {
		return p, id, fmt.Errorf("%w: %w", teams.ErrUnusableContract, err)
	}
	return p, id, nil
}

// Environment variables read once here (docs/protocol.md §5.7).
const (
	// AskTimeoutEnv sets the ask edge TTL in milliseconds.
	AskTimeoutEnv = "PI_INTERCOM_ASK_TIMEOUT_MS"
	// AskWaitEnv sets a session's soft wait for replies in milliseconds.
	AskWaitEnv = "PI_INTERCOM_ASK_WAIT_MS"
	// LogFilesEnv, when set, sends worker output to files even where
	// journald runs.
	LogFilesEnv = "AGENT_FLEET_LOG_FILES"
)

// AskTTL reads PI_INTERCOM_ASK_TIMEOUT_MS (spec §5.7), default 10 min. A
// malformed value is ignored here; the broker refuses it (BrokerAskTTL).
func (f *Factory) AskTTL() time.Duration {
	if v := strings.TrimSpace(f.Env(AskTimeoutEnv)); v != "" {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
			return time.Duration(ms) * time.Millisecond
		}
	}
	return intercom.DefaultAskTTL
}

// BrokerAskTTL is the ask edge TTL a broker runs with: 0 (the broker's
// default) when unset, a usage error when malformed.
func (f *Factory) BrokerAskTTL() (time.Duration, error) {
	v := strings.TrimSpace(f.Env(AskTimeoutEnv))
	if v == "" {
		return 0, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return 0, Usagef("%s must be a positive number of milliseconds, got %q", AskTimeoutEnv, v)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// AskWait reads PI_INTERCOM_ASK_WAIT_MS (spec §5.7), capped at the 120 s
// ask limit.
func (f *Factory) AskWait() time.Duration {
	if v := strings.TrimSpace(f.Env(AskWaitEnv)); v != "" {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
			return min(time.Duration(ms)*time.Millisecond, intercom.MaxAskWait)
		}
	}
	return intercom.DefaultAskWait
}

// Journald reports whether worker output goes to the journal: journald
// runs on this host and AGENT_FLEET_LOG_FILES is unset.
func (f *Factory) Journald() bool {
	_, err := os.Stat("/run/systemd/journal/socket")
	return err == nil && f.Env(LogFilesEnv) == ""
}

// Exe is the agent-fleet executable children run.
func (f *Factory) Exe() (string, error) {
	exe, err := f.Executable()
	if err != nil {
		return "", fmt.Errorf("locate agent-fleet: %w", err)
	}
	return exe, nil
}
