// Package intercom is the intercom client and the on-disk and socket
// conventions every agent-fleet process shares: where the files of an
// agent directory live and how they are written (paths, atomic files, file
// locks, one socket listener), identities, the client with its durable
// outbox and inbox, sessions and their holders, the session policy
// (Attach: through the live holder of an id, else registered; Hold;
// Failover), broker auto-start and the client of the broker's local API.
// The wire protocol is intercom/wire (docs/protocol.md), the broker
// intercom/broker; errors.go is the package's error vocabulary.
package intercom

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// AgentDirEnv names the agent directory (spec §1.1).
const AgentDirEnv = "PI_CODING_AGENT_DIR"

// MaxSocketPathBytes is the longest Unix socket path the kernel accepts
// (sun_path is 108 bytes including the terminating NUL).
const MaxSocketPathBytes = 107

// Modes of everything agent-fleet creates below the intercom directory.
const (
	DirMode  os.FileMode = 0o700
	FileMode os.FileMode = 0o600
)

// AgentDir resolves the agent directory the way every adapter does (spec
// §1.1): $PI_CODING_AGENT_DIR trimmed, made absolute against the working
// directory; unset or blank means $HOME/.pi/agent.
func AgentDir(getenv func(string) string) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	dir := strings.TrimSpace(getenv(AgentDirEnv))
	if dir == "" {
		home := getenv("HOME")
		if home == "" {
			h, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("resolve agent directory: %s and HOME are unset: %w", AgentDirEnv, err)
			}
			home = h
		}
		return filepath.Join(home, ".pi", "agent"), nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("resolve agent directory %q: %w", dir, err)
	}
	return abs, nil
}

// Paths names the files of one agent directory. The zero value is not
// usable; build it with NewPaths.
type Paths struct {
	AgentDir string // absolute agent directory
	Dir      string // <AgentDir>/intercom, 0700
}

// NewPaths returns the paths below agentDir, which must be absolute.
func NewPaths(agentDir string) Paths {
	return Paths{AgentDir: agentDir, Dir: filepath.Join(agentDir, "intercom")}
}

// DefaultPaths resolves the agent directory from the environment.
func DefaultPaths() (Paths, error) {
	dir, err := AgentDir(nil)
	if err != nil {
		return Paths{}, err
	}
	return NewPaths(dir), nil
}

// BrokerSocket is the v4 broker endpoint, <dir>/broker.sock (spec §1.1).
func (p Paths) BrokerSocket() string { return filepath.Join(p.Dir, "broker.sock") }

// LocalAPISocket is the broker's local API, <dir>/agent-fleet.sock (spec §10.1).
func (p Paths) LocalAPISocket() string { return filepath.Join(p.Dir, "agent-fleet.sock") }

// OwnerFile is the broker's lifetime lock, created O_EXCL (spec §6.1).
func (p Paths) OwnerFile() string { return filepath.Join(p.Dir, "broker.owner") }

// PIDFile holds the broker's pid once it listens (spec §6.1).
func (p Paths) PIDFile() string { return filepath.Join(p.Dir, "broker.pid") }

// ReadPIDFile is the pid a pid file (PIDFile, OwnerFile) holds: a decimal
// number, surrounding space ignored; 0 when it is missing or holds none.
func ReadPIDFile(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0
	}
	return pid
}

// SpawnLock serialises clients that start a broker (spec §6.2).
func (p Paths) SpawnLock() string { return filepath.Join(p.Dir, "broker.spawn.lock") }

// AskState holds the broker's ask edges (spec §5.7).
func (p Paths) AskState() string { return filepath.Join(p.Dir, "broker-asks.json") }

// BrokerLog is the bounded stderr log of an auto-started broker.
func (p Paths) BrokerLog() string { return filepath.Join(p.Dir, "broker.log") }

// SessionFileName is the per-session file name of the outbox and inbox:
// the SHA-256 hex of the session id (spec §5.3).
func SessionFileName(sessionID string) string {
	sum := sha256.Sum256([]byte(sessionID))
	return hex.EncodeToString(sum[:]) + ".json"
}

// SessionLock is the lock file of a session's inbox and outbox: the
// process that has them open holds it (OpenSession, until Close).
func (p Paths) SessionLock(sessionID string) string { return p.Outbox(sessionID) + ".lock" }

// Outbox is a session's durable outbox (spec §5.3).
func (p Paths) Outbox(sessionID string) string {
	return filepath.Join(p.Dir, "outbox", SessionFileName(sessionID))
}

// Inbox is a session's durable inbox (spec §5.4).
func (p Paths) Inbox(sessionID string) string {
	return filepath.Join(p.Dir, "inbox", SessionFileName(sessionID))
}

// HolderSocket is the socket of the process holding a session: the first 16
// hex digits of the SHA-256 of the id, short so the path fits (spec §10.2).
func (p Paths) HolderSocket(sessionID string) string {
	sum := sha256.Sum256([]byte(sessionID))
	return filepath.Join(p.Dir, "s", hex.EncodeToString(sum[:8])+".sock")
}

// OrchestratorDir holds the fleet registry and worker logs.
func (p Paths) OrchestratorDir() string { return filepath.Join(p.Dir, "orchestrator") }

// EnsureDir creates dir (and parents) and forces its mode to 0700, repairing
// a directory left with looser permissions (spec §1.1).
func EnsureDir(dir string) error {
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := os.Chmod(dir, DirMode); err != nil {
		return fmt.Errorf("restrict %s to 0700: %w", dir, err)
	}
	return nil
}

// CheckSocketPath refuses a socket path the kernel cannot bind.
func CheckSocketPath(path string) error {
	if len(path) > MaxSocketPathBytes {
		return fmt.Errorf("%w: %s is %d bytes, the limit is %d; set %s to a shorter directory",
			ErrSocketPathTooLong, path, len(path), MaxSocketPathBytes, AgentDirEnv)
	}
	return nil
}

// PipeName is the Windows named pipe of the broker for agentDir (spec §1.1):
// every run of non-alphanumerics becomes "-", trimmed, lowercased.
func PipeName(agentDir string) string {
	var b strings.Builder
	dash := false
	for _, r := range agentDir {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if alnum {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	seg := strings.ToLower(strings.Trim(b.String(), "-"))
	if seg == "" {
		seg = "default"
	}
	return `\\.\pipe\pi-intercom-` + seg
}
