package intercom

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// BrokerHealth classifies whatever listens on the broker socket (spec §6.2).
type BrokerHealth int

const (
	// Unreachable: nothing answered a health probe within the timeout.
	Unreachable BrokerHealth = iota
	// Compatible: a pi-intercom v4 broker with the expected remoteAccess
	// contract (ours or a TypeScript one).
	Compatible
	// Incompatible: a broker answered with another protocol, version,
	// endpoint or remoteAccess contract. Never kill it, never start a second.
	Incompatible
)

func (h BrokerHealth) String() string {
	switch h {
	case Compatible:
		return "compatible"
	case Incompatible:
		return "incompatible"
	}
	return "unreachable"
}

// ProbeTimeout bounds one health probe (spec §6.2: 1000 ms).
const ProbeTimeout = time.Second

// ProbeBroker sends one health frame and classifies the answer; detail
// describes an incompatible or failed answer.
func ProbeBroker(ctx context.Context, p Paths) (BrokerHealth, string) {
	h, detail, _ := ProbeListener(ctx, p)
	return h, detail
}

// ProbeListener is ProbeBroker that also says whether anything accepted
// the connection: an unreachable broker on a socket something listens on
// is a live listener that did not answer as a v4 broker (spec §6.2 counts
// that as unreachable too, and a broker started then finds the socket
// taken).
func ProbeListener(ctx context.Context, p Paths) (h BrokerHealth, detail string, listening bool) {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	nc, err := dialBroker(ctx, p)
	if err != nil {
		return Unreachable, err.Error(), false
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	rid := NewMessageID()
	if _, err := nc.Write(wire.AppendHealthRequest(nil, rid)); err != nil {
		return Unreachable, err.Error(), true
	}
	payload, err := wire.NewFrameReader(nc).Next()
	if err != nil {
		return Unreachable, "no health answer: " + err.Error(), true
	}
	h, detail = classifyHealth(payload, rid)
	return h, detail, true
}

func classifyHealth(payload []byte, rid string) (BrokerHealth, string) {
	keys, err := wire.KeyOrder(payload)
	if err != nil {
		return Unreachable, "bad health answer"
	}
	env, err := wire.ParseEnvelope(payload)
	if err != nil || env.Type != wire.TypeHealthOK {
		return Unreachable, "unexpected answer to health"
	}
	f, err := wire.DecodeBrokerFrame(payload)
	if err != nil {
		// A health_ok of another shape (e.g. an older broker with other
		// keys) is a broker, but not one we can speak to.
		return Incompatible, fmt.Sprintf("health_ok with keys %v", keys)
	}
	if f.RequestID != rid {
		return Unreachable, "health answer for another request"
	}
	switch {
	case f.Protocol != wire.ProtocolName || f.Version != wire.ProtocolVersion:
		return Incompatible, fmt.Sprintf("broker speaks %s v%v", f.Protocol, f.Version)
	case f.Endpoint != "local":
		return Incompatible, "broker endpoint is " + f.Endpoint
	case !bytes.Equal(f.RemoteAccess, []byte(wire.RemoteAccessJSON)):
		return Incompatible, "broker remoteAccess contract differs: " + string(f.RemoteAccess)
	}
	return Compatible, ""
}

// BrokerStarter starts a broker for p detached from the caller, returning
// once the process (or unit) has been launched. `cmd` provides it: a
// transient systemd unit where a user manager is reachable, else a double
// fork with setsid (docs/architecture.md "Broker placement").
type BrokerStarter func(ctx context.Context, p Paths) error

// Spawn timing (spec §6.2).
const (
	spawnLockStale   = 10 * time.Second
	brokerStartLimit = 5 * time.Second
)

// EnsureBroker makes sure a compatible broker answers on p: it probes, and
// when nothing answers starts one under the spawn lock and waits for it.
// An incompatible broker is an error (ErrIncompatibleBroker) and is never
// touched. start may be nil: then an unreachable broker is an error. A
// broker socket path over MaxSocketPathBytes is ErrSocketPathTooLong at
// once: no broker could bind it, so none is started.
func EnsureBroker(ctx context.Context, p Paths, start BrokerStarter) error {
	if err := checkEndpoint(p); err != nil {
		return err
	}
	switch h, detail := ProbeBroker(ctx, p); h {
	case Compatible:
		return nil
	case Incompatible:
		return fmt.Errorf("%w: %s", ErrIncompatibleBroker, detail)
	}
	if start == nil {
		return fmt.Errorf("%w: nothing answers on %s", ErrBrokerUnavailable, p.BrokerSocket())
	}
	if err := EnsureDir(p.Dir); err != nil {
		return err
	}
	for attempt := 0; attempt < 5; attempt++ {
		held, err := acquireSpawnLock(p.SpawnLock())
		if err != nil {
			return err
		}
		if !held {
			// Another client is starting one: wait for it.
			if err := waitForBroker(ctx, p, brokerStartLimit); err == nil {
				return nil
			}
			continue
		}
		err = func() error {
			defer os.Remove(p.SpawnLock())
			switch h, detail := ProbeBroker(ctx, p); h {
			case Compatible:
				return nil
			case Incompatible:
				return fmt.Errorf("%w: %s", ErrIncompatibleBroker, detail)
			}
			if err := start(ctx, p); err != nil {
				return fmt.Errorf("%w: start: %v; %s%s", ErrBrokerUnavailable, err, doctorHint, logTail(p))
			}
			if err := waitForBroker(ctx, p, brokerStartLimit); err != nil {
				return fmt.Errorf("%w; %s%s", err, doctorHint, logTail(p))
			}
			return nil
		}()
		return err
	}
	return fmt.Errorf("%w: could not take %s", ErrBrokerUnavailable, p.SpawnLock())
}

// acquireSpawnLock creates broker.spawn.lock ("<pid>\n<ms>\n") atomically:
// the content is written to a temporary file that is then hard-linked into
// place, so nobody ever reads a half-written lock. A lock whose pid is dead,
// whose content is unreadable (after a short grace for writers that create
// first and write second, as the TypeScript clients do) or older than 10 s
// is stale and replaced. held is false when a live client holds it.
func acquireSpawnLock(path string) (held bool, err error) {
	tmp := path + "." + randomHex(6) + ".tmp"
	content := fmt.Sprintf("%d\n%d\n", os.Getpid(), time.Now().UnixMilli())
	if err := os.WriteFile(tmp, []byte(content), FileMode); err != nil {
		return false, fmt.Errorf("spawn lock: %w", err)
	}
	defer os.Remove(tmp)
	for i := 0; i < 2; i++ {
		err := os.Link(tmp, path)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return false, fmt.Errorf("spawn lock: %w", err)
		}
		if !spawnLockIsStale(path) {
			return false, nil
		}
		_ = os.Remove(path)
	}
	return false, nil
}

func spawnLockIsStale(path string) bool {
	fi, err := os.Stat(path)
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	lines := strings.Split(string(data), "\n")
	var pid int
	var ms int64
	var perr, merr error = errors.New("short"), nil
	if len(lines) >= 2 {
		pid, perr = strconv.Atoi(strings.TrimSpace(lines[0]))
		ms, merr = strconv.ParseInt(strings.TrimSpace(lines[1]), 10, 64)
	}
	if perr != nil || merr != nil {
		return time.Since(fi.ModTime()) > time.Second
	}
	return !ProcessAlive(pid) || time.Since(time.UnixMilli(ms)) > spawnLockStale
}

// waitForBroker waits up to limit for a compatible broker on p. Its error
// says what is wrong: nothing answered, or something that holds the
// socket did not answer as a broker (so no broker can start there).
func waitForBroker(ctx context.Context, p Paths, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		h, detail, listening := ProbeListener(ctx, p)
		if h == Compatible {
			return nil
		}
		if time.Now().After(deadline) {
			if h == Unreachable && listening {
				return fmt.Errorf("%w: something listens on %s but does not answer as an intercom v4 broker (%s), so no broker can start there",
					ErrBrokerUnavailable, p.BrokerSocket(), detail)
			}
			return fmt.Errorf("%w: started, but it did not answer within %s", ErrBrokerUnavailable, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// doctorHint ends the errors of a broker that could not be started.
const doctorHint = "agent-fleet doctor says what is wrong and how to fix it"

// logTail quotes the end of broker.log for an error message.
func logTail(p Paths) string {
	data, err := os.ReadFile(p.BrokerLog())
	if err != nil || len(bytes.TrimSpace(data)) == 0 {
		return ""
	}
	if len(data) > 2048 {
		data = data[len(data)-2048:]
	}
	return "\n--- " + p.BrokerLog() + " (tail) ---\n" + strings.TrimSpace(string(data))
}

// MaxBrokerLogBytes bounds broker.log: a starter trims it to its last
// quarter before appending a new broker's output.
const MaxBrokerLogBytes = 1 << 20

// PrepareBrokerLog trims broker.log when it has grown past
// MaxBrokerLogBytes and opens it for appending (0600).
func PrepareBrokerLog(p Paths) (*os.File, error) {
	path := p.BrokerLog()
	if fi, err := os.Stat(path); err == nil && fi.Size() > MaxBrokerLogBytes {
		if data, err := os.ReadFile(path); err == nil {
			_ = WriteFileAtomic(path, data[len(data)-MaxBrokerLogBytes/4:])
		}
	}
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, FileMode)
}

// dialBroker connects to the broker endpoint of p.
func dialBroker(ctx context.Context, p Paths) (net.Conn, error) {
	return dialEndpoint(ctx, p)
}

// DialBroker connects to the broker endpoint of p (broker.sock; the named
// pipe on Windows) and nothing more: no health probe, no registration.
// Raw-frame tools such as `agent-fleet bench broker` speak on it.
func DialBroker(ctx context.Context, p Paths) (net.Conn, error) {
	return dialEndpoint(ctx, p)
}
