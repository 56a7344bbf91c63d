package factory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/teams"
)

// Session is the session a command acts as, with its team
// (teams.Attached): Ops, whether they go through another process's
// holder, the session this process registered, and the team operations.
type Session struct {
	*teams.Attached
	release []func()
}

// Close releases the session (a one-shot keeps its outbox), then what the
// factory opened for it.
func (s *Session) Close() {
	s.Attached.Close()
	for i := len(s.release) - 1; i >= 0; i-- {
		s.release[i]()
	}
}

// AttachOptions say how Attach reaches a session.
type AttachOptions struct {
	Mode   intercom.AttachMode
	Logger *slog.Logger
	// Janitor runs the fleet janitor while this process holds the
	// session of a manager (an mcp holder: docs/architecture.md
	// "Processes").
	Janitor bool
	// HolderWait bounds AttachThrough's wait for the holder.
	HolderWait time.Duration
	// OnRoster hears that the session's audience changed while this
	// process holds it (intercom.SessionConfig.OnRoster).
	OnRoster func()
	// Share asks the broker's node to announce the session to the other
	// hosts while this process holds it (intercom.SessionConfig.Share);
	// AGENT_FLEET_SHARE=1 in the environment does the same.
	Share bool
}

// ShareEnv set to 1 makes every session holder of this process (listen,
// mcp, a worker's shim) ask its node to share the session with the other
// hosts (docs/federation.md "What is shared").
const ShareEnv = "AGENT_FLEET_SHARE"

// ShareRequested reports whether the environment asks holders to share
// their sessions (ShareEnv).
func (f *Factory) ShareRequested() bool { return f.Env(ShareEnv) == "1" }

// Attach reaches the session id of the agent directory p by the session
// policy (teams.Attach: through its live holder, else registered, with the
// Boss contract applied), with this factory's broker starter, ask TTL and
// wait, and the fleet registry for team resolution. A process that holds
// the session (AttachHold) records its workers' lease activity from the
// messages it receives.
func (f *Factory) Attach(ctx context.Context, p intercom.Paths, id intercom.Identity, o AttachOptions) (*Session, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := newTeamRegistry(p)
	rec := f.Recorder(p)
	s := &Session{release: []func(){reg.close, rec.Close}}
	cfg := teams.AttachConfig{Mode: o.Mode, Registry: reg, HolderWait: o.HolderWait,
		Session: intercom.SessionConfig{Paths: p, Identity: id, Start: f.BrokerStarter(),
			AskTTL: f.AskTTL(), AskWait: f.AskWait(), Logger: log, OnRoster: o.OnRoster,
			Deferral: fleet.Deferral{Registry: reg.h}, History: rec,
			Share: o.Mode == intercom.AttachHold && (o.Share || f.ShareRequested()),
			// A live worker's shim holds its id for the worker's life and
			// serves only the worker's processes: waiting for it to let go
			// would only delay the refusal.
			InUse: func(ctx context.Context) error {
				if liveWorker(ctx, p, id.SessionID) != nil {
					return workerSessionError{id.SessionID}
				}
				return nil
			}}}
	if o.Mode == intercom.AttachHold {
		activity := StartActivity(p, id.SessionID, log)
		s.release = append(s.release, activity.Close)
		cfg.Session.OnMessage = activity.OnMessage
		cfg.While = func(ctx context.Context) {
			// A manager back after being away gets what its workers'
			// ends left it.
			DeliverOwedTo(ctx, p, id.SessionID, log)
			if o.Janitor {
				f.RunHolderJanitor(ctx, p, id.SessionID, log)
			}
		}
	}
	a, err := teams.Attach(ctx, cfg)
	if err != nil {
		for i := len(s.release) - 1; i >= 0; i-- {
			s.release[i]()
		}
		return nil, err
	}
	s.Attached = a
	return s, nil
}

// workerSessionError: the session id is a live fleet worker's, held by
// its shim, which admits only the worker's own processes. It wraps
// intercom.ErrSessionIDInUse.
type workerSessionError struct{ id string }

func (e workerSessionError) Error() string {
	return fmt.Sprintf("%v: %s is the session of the fleet worker %s, which only the worker's own processes may act as; act as another session (%s), or run the command inside the worker",
		intercom.ErrSessionIDInUse, e.id, e.id, intercom.SessionIDEnv)
}

func (workerSessionError) Unwrap() error { return intercom.ErrSessionIDInUse }

// OneShot is how a CLI verb reaches its session (docs/architecture.md
// "Identity"): through the live holder of its id, or registered for the
// length of the command.
func (f *Factory) OneShot(ctx context.Context) (*Session, error) {
	p, id, err := f.Identity()
	if err != nil {
		return nil, err
	}
	s, err := f.Attach(ctx, p, id, AttachOptions{Mode: intercom.AttachOnce})
	if errors.Is(err, intercom.ErrSessionIDInUse) && !errors.As(err, new(workerSessionError)) {
		// Most often another command of the same session still runs (an
		// ask waiting for its reply): say how commands can share it.
		return nil, fmt.Errorf("%w. Another program is registered as %s: an agent-fleet command still running (an ask waits for its reply), or a coding agent's intercom adapter. To run commands of one session side by side, start `agent-fleet intercom listen` for it first: commands then go through it",
			err, id.SessionID)
	}
	return s, err
}

// SessionTeam is the team of session id without reaching the session:
// for a process that acts through a holder it found itself. Call release
// when done.
func (f *Factory) SessionTeam(p intercom.Paths, id intercom.Identity) (st *teams.SessionTeam, release func(), err error) {
	reg := newTeamRegistry(p)
	st, err = teams.NewSessionTeam(id, reg, f.AskTTL())
	if err != nil {
		reg.close()
		return nil, nil, err
	}
	return st, reg.close, nil
}
