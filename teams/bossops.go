package teams

import (
	"context"
	"errors"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// GuardOps applies the Boss contract to a session's operations (the send
// path of the MCP tools and the CLI verbs): sends and asks go only to exact
// live ids the contract allows, replies only to such senders, and listing
// is refused in team-only mode (filtered with local visibility). Without a
// contract it returns ops itself. selfID is the session's id.
func GuardOps(ops intercom.Ops, b *Boss, selfID string) intercom.Ops {
	if b == nil || !b.Present {
		return ops
	}
	return &bossOps{Ops: ops, boss: b, self: selfID}
}

type bossOps struct {
	intercom.Ops
	boss *Boss
	self string
}

// live lists the session's live sessions, unfiltered, itself included.
func (o *bossOps) live(ctx context.Context) ([]Session, error) {
	res, err := o.Ops.List(ctx, intercom.ListRequest{IncludeSelf: true})
	if err != nil {
		return nil, err
	}
	return SessionsOf(res), nil
}

func (o *bossOps) target(ctx context.Context, to string) (string, error) {
	if err := o.boss.Usable(o.self); err != nil {
		return "", err
	}
	sessions, err := o.live(ctx)
	if guardedBeyond(err) {
		return to, nil // the holder's own guard resolves it
	}
	if err != nil {
		return "", err
	}
	return o.boss.ResolveTarget(to, o.self, sessions)
}

// guardedBeyond reports whether err is the refusal of a listing by the
// Boss guard of the process that holds the session (a Boss participant's
// listen or mcp): that holder applies the contract to everything sent
// through it, with the live sessions it may see and this process may not.
func guardedBeyond(err error) bool {
	var oe *intercom.OpError
	return errors.As(err, &oe) && oe.Code == BossScopeDenied
}

func (o *bossOps) List(ctx context.Context, req intercom.ListRequest) (*intercom.ListResult, error) {
	if err := o.boss.Usable(o.self); err != nil {
		return nil, err
	}
	if o.boss.Restricted {
		return nil, &BossError{Code: BossScopeDenied, Message: "Global intercom discovery is unavailable in Boss team-only mode; use intercom_team"}
	}
	return o.Ops.List(ctx, req) // local visibility: every session of the scope
}

func (o *bossOps) Send(ctx context.Context, req intercom.SendRequest) (*intercom.SendResult, error) {
	target, err := o.target(ctx, req.To)
	if err != nil {
		return nil, err
	}
	req.To = target
	return o.Ops.Send(ctx, req)
}

func (o *bossOps) Ask(ctx context.Context, req intercom.AskRequest) (*intercom.AskResult, error) {
	target, err := o.target(ctx, req.To)
	if err != nil {
		return nil, err
	}
	req.To = target
	return o.Ops.Ask(ctx, req)
}

// Reply admits the reply only when every pending ask it could answer (by
// ask id, by exact sender id, or all of them) comes from a sender the
// contract lets this session reach; a sender selector must be an exact id.
func (o *bossOps) Reply(ctx context.Context, req intercom.ReplyRequest) (*intercom.SendResult, error) {
	if err := o.boss.Usable(o.self); err != nil {
		return nil, err
	}
	sessions, err := o.live(ctx)
	if guardedBeyond(err) {
		return o.Ops.Reply(ctx, req) // the holder's own guard judges it
	}
	if err != nil {
		return nil, err
	}
	if req.To != "" {
		if _, err := o.boss.ResolveTarget(req.To, o.self, sessions); err != nil {
			return nil, err
		}
	}
	pend, err := o.Ops.Pending(ctx, intercom.PendingRequest{})
	if err != nil {
		return nil, err
	}
	for _, a := range pend.Asks {
		if (req.AskID != "" && a.AskID != req.AskID) || (req.To != "" && a.From.ID != req.To) {
			continue
		}
		if _, err := o.boss.ResolveTarget(a.From.ID, o.self, sessions); err != nil {
			return nil, err
		}
	}
	return o.Ops.Reply(ctx, req)
}

func (o *bossOps) Status(ctx context.Context) (*intercom.StatusResult, error) {
	if err := o.boss.Usable(o.self); err != nil {
		return nil, err
	}
	st, err := o.Ops.Status(ctx)
	if err != nil || !st.Connected {
		return st, err
	}
	if sessions, err := o.live(ctx); err == nil {
		st.ActiveSessions = len(o.boss.FilterSessions(sessions, o.self))
	}
	return st, nil
}

// DeniedOps is a session this process does not reach (a CLI verb's team
// operations without a holder): Whoami answers from the identity, and
// every other operation fails with err.
func DeniedOps(who intercom.WhoamiResult, err error) intercom.Ops {
	return deniedOps{who: who, err: err}
}

// RefusedOps is the session of a process whose Boss contract is not usable
// (spec §7.3, deny-all): it never registers, and every operation, Whoami
// included, fails with err.
func RefusedOps(err error) intercom.Ops { return refusedOps{deniedOps{err: err}} }

type refusedOps struct{ deniedOps }

func (r refusedOps) Whoami(context.Context) (*intercom.WhoamiResult, error) { return nil, r.err }

type deniedOps struct {
	who intercom.WhoamiResult
	err error
}

func (d deniedOps) Whoami(context.Context) (*intercom.WhoamiResult, error) {
	w := d.who
	return &w, nil
}
func (d deniedOps) List(context.Context, intercom.ListRequest) (*intercom.ListResult, error) {
	return nil, d.err
}
func (d deniedOps) Send(context.Context, intercom.SendRequest) (*intercom.SendResult, error) {
	return nil, d.err
}
func (d deniedOps) Ask(context.Context, intercom.AskRequest) (*intercom.AskResult, error) {
	return nil, d.err
}
func (d deniedOps) Reply(context.Context, intercom.ReplyRequest) (*intercom.SendResult, error) {
	return nil, d.err
}
func (d deniedOps) Pending(context.Context, intercom.PendingRequest) (*intercom.PendingResult, error) {
	return nil, d.err
}
func (d deniedOps) Status(context.Context) (*intercom.StatusResult, error) { return nil, d.err }
func (d deniedOps) SetSummary(context.Context, string) error               { return d.err }
func (d deniedOps) Listen(context.Context, intercom.ListenRequest, func(*intercom.MessageView) error) error {
	return d.err
}

// PurgeInbox drops what a session's inbox holds from senders the contract
// refuses (messages and pending asks recovered from before the contract),
// as the Pi adapter does when it starts. It returns how many it dropped.
func PurgeInbox(in *intercom.Inbox, b *Boss, selfID string) (int, error) {
	if b == nil || !b.Present || in == nil {
		return 0, nil
	}
	n := 0
	var keys []string
	for _, m := range in.Unread() {
		if b.AuthorizeSender(m.From.ID, selfID) != nil {
			keys = append(keys, m.Key)
		}
	}
	if len(keys) > 0 {
		if err := in.Consume(keys...); err != nil {
			return n, err
		}
		n += len(keys)
	}
	for _, a := range in.PendingAsks() {
		if b.AuthorizeSender(a.From.ID, selfID) != nil {
			if err := in.DismissAsk(a.Message.ID, a.From.ID); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}
