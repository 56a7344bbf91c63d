package intercom

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Identity environment (docs/architecture.md "Identity"; spec §8.1).
const (
	SessionIDEnv   = "AGENT_INTERCOM_SESSION_ID"
	SessionNameEnv = "AGENT_INTERCOM_SESSION_NAME"
	ModelEnv       = "AGENT_INTERCOM_MODEL"
)

// SessionIDPattern is what agent-fleet session ids look like: safe for the
// adapters and for systemd unit names.
const SessionIDPattern = "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"

// ValidSessionID reports whether id matches SessionIDPattern. It is
// spelled out rather than compiled: the counted repetition would cost every
// process start a compile.
func ValidSessionID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// ValidateSessionID checks an id against SessionIDPattern.
func ValidateSessionID(id string) error {
	if !ValidSessionID(id) {
		return fmt.Errorf("%w: %q", ErrInvalidSessionID, id)
	}
	return nil
}

// Identity is who a process is on the intercom: captured once per process
// (spec §4.1: the scope is never re-read, even if the environment changes).
type Identity struct {
	SessionID string
	Name      string
	Model     string
	Cwd       string
	// Scope is the v4 routing scope ("" = unscoped). Private: never print it.
	Scope string
	// RuntimeID is random per process (spec §4.5 same-runtime test).
	RuntimeID string
	PID       int
	StartedAt float64 // epoch ms
}

// IdentityKind selects the session id rule of docs/architecture.md "Identity".
type IdentityKind int

const (
	// OneShot: CLI verbs and `intercom listen` — AGENT_INTERCOM_SESSION_ID,
	// else the stable operator id operator-<username>.
	OneShot IdentityKind = iota
	// Harness: `agent-fleet mcp` — the harness variable, then
	// AGENT_INTERCOM_SESSION_ID, then a fresh <label>-<pid>-<6 hex of
	// sha256(cwd)> so two unconfigured agents never merge.
	Harness
	// Worker: the worker shim — the worker id.
	Worker
)

// IdentityOptions feed ResolveIdentity. Getenv nil means os.Getenv.
type IdentityOptions struct {
	Kind     IdentityKind
	Harness  string // "claude", "codex", "opencode", "pi" or "" (Harness kind)
	WorkerID string // Worker kind
	Getenv   func(string) string
	Cwd      string // "" = os.Getwd
}

// harnessIDEnvs are the session id variables the adapters read, by harness.
var harnessIDEnvs = map[string][]string{
	"claude": {"CLAUDE_INTERCOM_SESSION_ID"},
	"codex":  {"CODEX_INTERCOM_SESSION_ID"},
	"pi":     {"PI_INTERCOM_SESSION_ID"},
}

// ResolveIdentity builds a process's identity from its environment.
func ResolveIdentity(o IdentityOptions) (Identity, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	cwd := o.Cwd
	if cwd == "" {
		wd, err := os.Getwd()
		if err != nil {
			wd = "/"
		}
		cwd = wd
	}
	id := Identity{Cwd: cwd, PID: os.Getpid(), StartedAt: float64(time.Now().UnixMilli()), RuntimeID: randomHex(16)}

	scope := getenv(wire.ScopeEnv)
	if err := wire.ValidateScope(scope); err != nil {
		return Identity{}, err
	}
	id.Scope = scope

	switch o.Kind {
	case Worker:
		id.SessionID = o.WorkerID
	case Harness:
		envs := harnessIDEnvs[o.Harness]
		if o.Harness == "" {
			envs = []string{"CLAUDE_INTERCOM_SESSION_ID", "CODEX_INTERCOM_SESSION_ID"}
		}
		for _, env := range envs {
			if v := strings.TrimSpace(getenv(env)); v != "" {
				id.SessionID = v
				break
			}
		}
		if id.SessionID == "" {
			id.SessionID = strings.TrimSpace(getenv(SessionIDEnv))
		}
		if id.SessionID == "" {
			label := o.Harness
			if label == "" {
				label = "agent"
			}
			sum := sha256.Sum256([]byte(cwd))
			id.SessionID = fmt.Sprintf("%s-%d-%s", label, id.PID, hex.EncodeToString(sum[:3]))
		}
	default:
		id.SessionID = strings.TrimSpace(getenv(SessionIDEnv))
		if id.SessionID == "" {
			id.SessionID = OperatorID(getenv)
		}
	}
	if err := ValidateSessionID(id.SessionID); err != nil {
		return Identity{}, err
	}
	id.Name = strings.TrimSpace(getenv(SessionNameEnv))
	if id.Name == "" {
		id.Name = id.SessionID
	}
	id.Model = strings.TrimSpace(getenv(ModelEnv))
	if id.Model == "" {
		id.Model = o.Harness
	}
	if id.Model == "" {
		id.Model = "cli"
	}
	return id, nil
}

// OperatorID is the stable id of a person at a shell: operator-<username>,
// with characters outside [A-Za-z0-9_-] mapped to "-".
func OperatorID(getenv func(string) string) string {
	name := ""
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if name == "" && getenv != nil {
		name = getenv("USER")
	}
	if name == "" {
		name = "unknown"
	}
	var b strings.Builder
	for _, r := range name {
		if r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	id := "operator-" + b.String()
	if len(id) > 64 {
		id = id[:64]
	}
	return id
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NewMessageID returns a fresh message id (a random UUID, as the adapters use).
func NewMessageID() string { return uuid.NewString() }
