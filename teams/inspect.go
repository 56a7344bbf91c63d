package teams

import (
	"context"
	"fmt"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// Inspection is a coworker's pending asks, read from its inbox file without
// changing it (spec §7.4, §5.4).
type Inspection struct {
	InboxSessionID string             `json:"inboxSessionId"`
	Asks           []intercom.AskView `json:"asks"`
}

// AuthorizeInspection decides whether the caller, whose team is t, may read
// the pending asks of session requested (spec §7.4): only the manager of a
// fleet-registry team, only for a coworker whose target equals requested
// exactly, and only when requested is an exact connected session id on
// this host (in sessions, or confirmed by connected) that is not remote.
// The refusal wraps ErrInspectionDenied and says what to do; when no
// session requested is connected at all, it also wraps
// intercom.ErrTargetNotFound (exit 3), whoever asks.
func AuthorizeInspection(ctx context.Context, t *Team, sessions []Session, requested string, connected func(context.Context, string) bool) error {
	deny := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInspectionDenied}, args...)...)
	}
	var found *Session
	for i := range sessions {
		if sessions[i].ID == requested {
			found = &sessions[i]
			break
		}
	}
	if found == nil && (connected == nil || !connected(ctx, requested)) {
		return fmt.Errorf("%w: %w: no session %q is connected; give the exact target of a connected coworker, as agent-fleet team (intercom_team) lists it",
			ErrInspectionDenied, intercom.ErrTargetNotFound, requested)
	}
	if t == nil || !t.Self.IsManager {
		return deny("only a manager may inspect another session's pending-ask inbox")
	}
	if !t.fromRegistry {
		return deny("inbox inspection is only available for teams of fleet workers you spawned or adopted (this team is %s)", t.describeSource())
	}
	member := false
	for _, c := range t.Coworkers {
		member = member || c.Target == requested
	}
	if !member {
		return deny("%q is not an owned coworker; use a target returned by intercom_team", requested)
	}
	if found != nil && found.Origin == "remote" {
		return deny("%q is remote and its inbox cannot be read from this host", requested)
	}
	return nil
}

// ReadInbox reads the pending asks of sessionID read-only (version 3 only,
// spec §5.4: any other version is intercom.ErrInboxVersion and nothing is
// shown), drops those older than ttl, and with askID keeps only that ask,
// with its whole text.
func ReadInbox(p intercom.Paths, sessionID, askID string, ttl time.Duration, now time.Time) (*Inspection, error) {
	asks, err := intercom.ReadPendingAsks(p, sessionID)
	if err != nil {
		return nil, fmt.Errorf("inspect the inbox of %s: %w", sessionID, err)
	}
	cutoff := float64(now.Add(-ttl).UnixMilli())
	var fresh []*intercom.InboundMessage
	for _, a := range asks {
		if a.ReceivedAt >= cutoff {
			fresh = append(fresh, a)
		}
	}
	views := intercom.AskViews(fresh, now)
	if askID == "" {
		return &Inspection{InboxSessionID: sessionID, Asks: views}, nil
	}
	for i, a := range fresh {
		if a.AskID() == askID {
			v := views[i]
			v.Text, v.Attachments = a.Message.Text, a.Message.Attachments
			return &Inspection{InboxSessionID: sessionID, Asks: []intercom.AskView{v}}, nil
		}
	}
	return nil, fmt.Errorf("%w: no unresolved pending ask with ask id %q in the inbox of %s", intercom.ErrNoPendingAsk, askID, sessionID)
}
