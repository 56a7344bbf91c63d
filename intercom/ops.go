package intercom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Ops is what a session can do. *Session implements it in the process that
// holds the session; *HolderClient implements it for any other process of
// the same user, by asking the holder (docs/architecture.md "Session holders").
type Ops interface {
	Whoami(ctx context.Context) (*WhoamiResult, error)
	List(ctx context.Context, req ListRequest) (*ListResult, error)
	Send(ctx context.Context, req SendRequest) (*SendResult, error)
	Ask(ctx context.Context, req AskRequest) (*AskResult, error)
	Reply(ctx context.Context, req ReplyRequest) (*SendResult, error)
	Pending(ctx context.Context, req PendingRequest) (*PendingResult, error)
	Status(ctx context.Context) (*StatusResult, error)
	SetSummary(ctx context.Context, summary string) error
	// Listen calls emit for every unread message, oldest first, then for
	// each new one, until ctx ends or emit fails. A message counts as read
	// once emit returned nil for it.
	Listen(ctx context.Context, req ListenRequest, emit func(*MessageView) error) error
}

// WhoamiResult is a session's identity (never its scope).
type WhoamiResult struct {
	SessionID string `json:"sessionId"`
	Name      string `json:"name"`
	Cwd       string `json:"cwd"`
	Model     string `json:"model"`
	Holder    bool   `json:"holder"` // answered by a session holder
}

// ListRequest filters the session list.
type ListRequest struct {
	// Where: "machine" (every visible session, the default), "directory"
	// (same working directory) or "repo" (same git repository root).
	Where       string `json:"where,omitempty"`
	IncludeSelf bool   `json:"includeSelf,omitempty"`
}

// SessionView is one session as listed.
type SessionView struct {
	ID           string  `json:"id"`
	Name         string  `json:"name,omitempty"`
	Cwd          string  `json:"cwd"`
	Model        string  `json:"model"`
	PID          float64 `json:"pid"`
	StartedAt    float64 `json:"startedAt"`
	LastActivity float64 `json:"lastActivity"`
	Status       string  `json:"status,omitempty"`
	Origin       string  `json:"origin,omitempty"`
	// RemoteHostID is the host of a session of another host (origin
	// remote, docs/federation.md); "" for this host's sessions.
	RemoteHostID string `json:"remoteHostId,omitempty"`
	Self         bool   `json:"self,omitempty"`
	SameCwd      bool   `json:"sameCwd,omitempty"`
}

// ListResult is the visible sessions in broker order.
type ListResult struct {
	Sessions []SessionView `json:"sessions"`
	// Others counts the visible sessions that ListRequest.Where left out
	// (omitted when none were).
	Others int `json:"others,omitempty"`
}

// TextProblem says what makes a message's text unfit to send: "" when it
// has words, else that it is empty or only whitespace. Such a message tells
// the recipient nothing, so every surface that sends people's or agents'
// words (the send, ask and reply verbs and tools) refuses it before
// anything is sent (CheckText); automatic senders (a worker's turn
// answers) are not held to it.
func TextProblem(text string) string {
	switch {
	case text == "":
		return "the message is empty"
	case strings.TrimSpace(text) == "":
		return "the message is only whitespace"
	}
	return ""
}

// CheckText is TextProblem as an ErrInvalidInput error (nil when the text
// may be sent).
func CheckText(text string) error {
	if p := TextProblem(text); p != "" {
		return fmt.Errorf("%w: %s", ErrInvalidInput, p)
	}
	return nil
}

// CheckTarget refuses, naming to, a target no session can have
// (ErrInvalidInput): empty, longer than a broker takes (wire.MaxTargetChars
// UTF-16 units, as it counts them), or holding a control character (a
// stray newline would be echoed back as part of the name). Spaces around
// it are allowed: resolution trims them.
func CheckTarget(to string) error {
	n, ctl := 0, -1
	for i, r := range to {
		n += max(utf16.RuneLen(r), 1)
		if ctl < 0 && unicode.IsControl(r) {
			ctl = i
		}
	}
	switch {
	case strings.TrimSpace(to) == "":
		return fmt.Errorf("%w: to is empty: give the session's id, name or id prefix", ErrInvalidInput)
	case n > wire.MaxTargetChars:
		return fmt.Errorf("%w: to is %d characters long, over the %d a target may have: give the session's id, name or id prefix (the text goes in the message)",
			ErrInvalidInput, n, wire.MaxTargetChars)
	case ctl >= 0:
		return fmt.Errorf("%w: to %q holds a control character (%U): give the session's id, name or id prefix alone",
			ErrInvalidInput, to, []rune(to[ctl:])[0])
	}
	return nil
}

// SendRequest sends one message. To is an exact session id, a unique
// case-insensitive name, or a unique id prefix of at least 4 characters.
type SendRequest struct {
	To          string            `json:"to"`
	Text        string            `json:"text"`
	Attachments []wire.Attachment `json:"attachments,omitempty"`
	// MessageID reuses an id for an idempotent retry; "" = a new id.
	MessageID string `json:"messageId,omitempty"`
	// Control is sent as content.control (spec §2.5) only when the serving
	// broker is agent-fleet's (its local API answers): the TypeScript
	// brokers may refuse a message with one, so there it is left out and
	// Text alone must say everything. Not with attachments' asks or
	// replies: a control makes a message neither.
	Control *wire.Control `json:"control,omitempty"`
	// Team is the named team the message is sent in (content.team; "" =
	// none). A sender's team layer fills it in or checks it.
	Team string `json:"team,omitempty"`
}

// SendResult is the outcome of a send or reply. A delivery failure is a
// result with OK false and Code set, not an error.
type SendResult struct {
	OK         bool   `json:"ok"`
	MessageID  string `json:"messageId,omitempty"` // none for a send to a team: see Recipients
	To         string `json:"to"`                  // as given
	TargetID   string `json:"targetId,omitempty"`  // resolved session id, when known
	Delivered  bool   `json:"delivered"`
	Accepted   bool   `json:"accepted"`
	DeliveryID string `json:"deliveryId,omitempty"`
	Code       string `json:"code,omitempty"`
	Reason     string `json:"reason,omitempty"`
	ReplyTo    string `json:"replyTo,omitempty"`
	AskID      string `json:"askId,omitempty"` // the ask a reply answered
	Team       string `json:"team,omitempty"`  // content.team as sent
	// Recipients is, for a send to a team (team:NAME, *), the outcome of
	// each ordinary send it was expanded into, one message id each; OK is
	// then true only when every one was delivered.
	Recipients []SendResult `json:"recipients,omitempty"`
	// Offline is, for a send to a team, the members it selects that were
	// not connected, so got nothing.
	Offline []string `json:"offline,omitempty"`
	// State is DeferredQueued when the target is a fleet worker that was
	// not connected yet and the message was kept for it (OK, not
	// Delivered); QueuedAt is when (epoch ms).
	State    string  `json:"state,omitempty"`
	QueuedAt float64 `json:"queuedAt,omitempty"`
}

// OutcomeUnknown reports whether a failed result may still have reached
// the recipient (ErrOutcomeUnknown, exit 8): DELIVERY_TIMEOUT,
// RECIPIENT_DISCONNECTED once accepted, or CodeOutcomeUnknown.
func (r *SendResult) OutcomeUnknown() bool {
	return !r.OK && errors.Is(&DeliveryError{Code: r.Code, Accepted: r.Accepted}, ErrOutcomeUnknown)
}

// OnAskTimeout is what an ask does when its wait runs out.
type OnAskTimeout string

const (
	// DeferOnTimeout stops blocking but keeps the ask answerable: the late
	// reply lands in the inbox (a session holder's behaviour).
	DeferOnTimeout OnAskTimeout = "defer"
	// CancelOnTimeout withdraws the ask (a one-shot with nobody to receive
	// the late reply).
	CancelOnTimeout OnAskTimeout = "cancel"
)

// AskRequest asks a question and waits for the reply.
type AskRequest struct {
	To          string            `json:"to"`
	Text        string            `json:"text"`
	Attachments []wire.Attachment `json:"attachments,omitempty"`
	// Wait bounds the wait for the reply (default: the session's AskWait,
	// 30 s unless PI_INTERCOM_ASK_WAIT_MS says otherwise).
	Wait      time.Duration `json:"waitNs,omitempty"`
	OnTimeout OnAskTimeout  `json:"onTimeout,omitempty"`
	// Team: see SendRequest.Team. Only a reply in the same team answers.
	Team string `json:"team,omitempty"`
}

// AskResult is the outcome of an ask: a reply, or a pending (deferred) or
// cancelled ask after the wait ran out, or a failed send.
type AskResult struct {
	SendResult
	Replied   bool         `json:"replied"`
	Reply     *MessageView `json:"reply,omitempty"`
	Pending   bool         `json:"pending,omitempty"`   // deferred: the reply will appear in pending
	Cancelled bool         `json:"cancelled,omitempty"` // withdrawn after the wait
	// ListenerPID, with Pending, is the consuming listen of the session
	// (Session.Listen): it prints the late reply and takes it out of
	// pending. 0: none runs.
	ListenerPID int   `json:"listenerPid,omitempty"`
	WaitedMs    int64 `json:"waitedMs"`
}

// ReplyRequest answers a pending ask, selected by AskID, or by sender To
// (exact id or case-insensitive name) and Which ("oldest"/"latest"), or the
// only pending ask; or answers any inbound message by its ContextID (an
// ask's context answers the ask; another message's gets an ordinary
// message back). The reply keeps the original message's team: Team, when
// given, must equal it.
type ReplyRequest struct {
	Text        string            `json:"text"`
	Attachments []wire.Attachment `json:"attachments,omitempty"`
	AskID       string            `json:"askId,omitempty"`
	ContextID   string            `json:"contextId,omitempty"`
	To          string            `json:"to,omitempty"`
	Which       string            `json:"which,omitempty"`
	Team        string            `json:"team,omitempty"`
}

// PendingRequest lists unread messages and pending asks.
type PendingRequest struct {
	// AskID returns only that ask, with its whole text.
	AskID string `json:"askId,omitempty"`
	// MarkRead marks the returned unread messages read.
	MarkRead bool `json:"markRead,omitempty"`
	// IDs, when set, returns (and marks read) only the unread messages
	// of these ids: an acknowledgement that leaves the rest unread.
	IDs []string `json:"messageIds,omitempty"`
}

// Sender names who sent a message.
type Sender struct {
	ID     string `json:"id"`
	Name   string `json:"name,omitempty"`
	Origin string `json:"origin,omitempty"`
}

// MessageView is an inbound message as shown to people and agents.
type MessageView struct {
	From         Sender            `json:"from"`
	MessageID    string            `json:"messageId"`
	Text         string            `json:"text"`
	Attachments  []wire.Attachment `json:"attachments"`
	ExpectsReply bool              `json:"expectsReply"`
	ReplyTo      string            `json:"replyTo,omitempty"`
	AskID        string            `json:"askId,omitempty"` // set for asks
	// ContextID selects this message for a reply (ReplyRequest.ContextID).
	ContextID  string  `json:"contextId"`
	Team       string  `json:"team,omitempty"` // content.team
	ReceivedAt float64 `json:"receivedAt"`     // epoch ms
	Read       bool    `json:"read"`
	// Control is the message's content.control as sent, for programs
	// (listen --json); omitted when it has none.
	Control json.RawMessage `json:"control,omitempty"`
}

// AskView is a pending inbound ask.
type AskView struct {
	AskID      string  `json:"askId"`
	From       Sender  `json:"from"`
	ReceivedAt float64 `json:"receivedAt"`
	DeferredAt float64 `json:"deferredAt,omitempty"` // the asker stopped waiting
	Preview    string  `json:"preview"`              // first 80 chars, whitespace collapsed
	ContextID  string  `json:"contextId"`
	Team       string  `json:"team,omitempty"` // content.team
	// Selector is "oldest", "latest" or "queued" when the sender has
	// several pending asks, else "".
	Selector       string            `json:"selector,omitempty"`
	ElapsedSeconds int64             `json:"elapsedSeconds"`
	Text           string            `json:"text,omitempty"` // only with PendingRequest.AskID
	Attachments    []wire.Attachment `json:"attachments,omitempty"`
}

// PendingResult lists what waits for this session.
type PendingResult struct {
	Unread []MessageView `json:"unread"`
	Asks   []AskView     `json:"asks"`
}

// StatusResult is a session's connection and queues.
type StatusResult struct {
	Connected      bool   `json:"connected"`
	SessionID      string `json:"sessionId"`
	ActiveSessions int    `json:"activeSessions"`
	Unread         int    `json:"unread"`
	Outbox         int    `json:"outbox"`
	PendingAsks    int    `json:"pendingAsks"`
	Holder         bool   `json:"holder"`
	// Deferred is what this session sent to fleet workers that were not
	// connected yet, with each message's state (deferred.go); omitted
	// when there is none.
	Deferred []DeferredMessage `json:"deferred,omitempty"`
	// Teams is the session's named-team memberships, filled in by its
	// team layer (nil: none, or no team layer).
	Teams []TeamMembership `json:"teams,omitempty"`
	// Routing is this host's multi-node routing, filled in by the CLI
	// from its node (nil: not asked).
	Routing *Routing `json:"routing,omitempty"`
}

// Routing is whether this host's broker routes to other hosts
// (docs/federation.md), as intercom status shows it.
type Routing struct {
	On bool `json:"on"`
	// Line is "Multi-node routing: on (nats, prefix P), N other hosts
	// live" or "Multi-node routing: off (why)".
	Line   string `json:"line"`
	Reason string `json:"reason,omitempty"`
	Prefix string `json:"prefix,omitempty"`
	// OtherHosts counts the other live hosts.
	OtherHosts int `json:"otherHosts"`
}

// TeamMembership is one named team a session belongs to.
type TeamMembership struct {
	Name string `json:"name"`
	Role string `json:"role"` // "manager" or "member"
	// Current: the session is registered in this team's private scope
	// now (at most one is).
	Current bool `json:"current,omitempty"`
}

// ListenRequest configures Listen.
type ListenRequest struct {
	// KeepUnread leaves emitted messages unread: the listen only watches.
	// Without it the listen consumes what it emits, and a session has at
	// most one such listen at a time (ErrListening).
	KeepUnread bool `json:"keepUnread,omitempty"`
	// Started, when set, is called once the listen runs — after a
	// consuming listen got the session's listener slot, before the first
	// message — and again after a Failover took the session over.
	Started func() `json:"-"`
}

// Preview collapses whitespace runs and keeps the first n characters
// (UTF-16 units as the adapters count; whole runes here), no ellipsis.
func Preview(text string, n int) string {
	s := strings.Join(strings.Fields(text), " ")
	units := 0
	for i, r := range s {
		w := 1
		if r >= 0x10000 {
			w = 2
		}
		if units+w > n {
			return s[:i]
		}
		units += w
	}
	return s
}
