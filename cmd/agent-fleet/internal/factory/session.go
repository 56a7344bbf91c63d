package factory

import (
	"context"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// OneShot is how a CLI verb reaches its session: through the live holder
// of its id, or by registering itself for the length of the command.
type OneShot struct {
	Ops     intercom.Ops
	Session *intercom.Session // nil when acting through a holder
	Holder  bool
	Team    *SessionTeam
}

// Close ends the command's own registration (keeping its outbox) and
// releases the team.
func (o *OneShot) Close() {
	if o.Session != nil {
		_ = o.Session.Close()
	}
	o.Team.Close()
}

// OneShot acts through a live holder of the CLI's session, or registers
// (docs/architecture.md "Identity"), with the Boss contract applied (spec
// §7.3).
func (f *Factory) OneShot(ctx context.Context) (*OneShot, error) {
	p, id, err := f.Identity()
	if err != nil {
		return nil, err
	}
	team, err := f.SessionTeam(p, id)
	if err != nil {
		return nil, err
	}
	if hc, err := intercom.DialHolder(ctx, p, id.SessionID); err == nil {
		return &OneShot{Ops: team.Through(p, hc), Holder: true, Team: team}, nil
	}
	sess, err := intercom.OpenSession(ctx, intercom.SessionConfig{
		Paths: p, Identity: id, Start: f.BrokerStarter(), AskTTL: f.AskTTL(), AskWait: f.AskWait(),
		Filter: team.Filter(), ReplayFilter: team.Replay(),
	})
	if err != nil {
		team.Close()
		return nil, err
	}
	return &OneShot{Ops: team.Own(p, sess), Session: sess, Team: team}, nil
}
