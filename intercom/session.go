package intercom

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Ask waits (spec §5.7, §8.3).
const (
	// DefaultAskWait is a session's soft wait for a reply
	// (PI_INTERCOM_ASK_WAIT_MS overrides it through SessionConfig.AskWait).
	DefaultAskWait = 30 * time.Second
	// AskTimeout is how long an ask by a person or an agent waits for its
	// reply unless told otherwise: the CLI's ask --timeout and
	// intercom_ask's timeout_ms. One default for both surfaces; 45 s keeps
	// intercom_ask within the tool-call timeouts of MCP clients (Codex:
	// 60 s).
	AskTimeout = 45 * time.Second
	// MaxAskWait bounds every ask's wait.
	MaxAskWait    = 120 * time.Second
	DefaultAskTTL = 10 * time.Minute
)

// SessionConfig configures a Session.
type SessionConfig struct {
	Paths    Paths
	Identity Identity
	Logger   *slog.Logger
	// Start launches a broker when none answers (nil: never).
	Start BrokerStarter
	// AskTTL is how long a received ask stays answerable (the broker's
	// edge TTL, PI_INTERCOM_ASK_TIMEOUT_MS). Default 10 min.
	AskTTL time.Duration
	// Reconnect keeps the session registered across broker restarts.
	Reconnect bool
	// Unpaced writes frames as they come, for a broker whose rate limit
	// was raised for this client (benchmarks; see ClientConfig.Unpaced).
	Unpaced bool
	// AskWait is how long Ask waits when the request names no wait.
	// Default DefaultAskWait.
	AskWait time.Duration
	// Filter, when set, judges every inbound message before it touches the
	// inbox; a non-empty reason refuses it (message_rejected), as Boss
	// team-only visibility requires (spec §7.3).
	Filter func(from wire.SessionInfo, msg *wire.MessageInfo) (reject string)
	// OnMessage, when set, sees every new inbound message once it is
	// durable (fleet records worker activity there). It runs on the
	// session's reader and must be quick.
	OnMessage func(m *InboundMessage)
	// OnSessionJoined, when set, is told the id of every session that
	// joins this session's audience (session_joined, spec §4.3): a sender
	// can retry what it holds for a session that was not connected. It
	// runs on the session's reader and must not block.
	OnSessionJoined func(sessionID string)
	// OnRoster, when set, is told that this session's audience changed: a
	// session joined or left, or published a presence update (a status
	// such as a worker's turn). It runs on the session's reader and must
	// not block; the caller lists the sessions again when it needs them.
	OnRoster func()
	// InUse, when set, says whether a registration refused as
	// SESSION_ID_IN_USE is worth retrying (ClientConfig.InUse).
	InUse func(ctx context.Context) error
	// ReplayFilter, when set, drops queued outbox entries it refuses instead
	// of replaying them after a registration (ClientConfig.ReplayFilter).
	ReplayFilter func(to string) bool
	// OnRegistered, when set, runs after every registration, first and
	// reconnects (ClientConfig.OnRegistered); it must not block.
	OnRegistered func()
	// Deferral, when set, keeps sends to fleet workers that are not
	// connected yet (deferred.go).
	Deferral Deferral
	// History, when set, records the session's messages and receipts
	// (history.go).
	History Recorder
	// Share asks the broker after every registration to announce the
	// session to the other hosts (the local API op share, answered by a
	// node: docs/federation.md). A broker without federation is logged
	// once; the session works as without it.
	Share bool
}

// Session is a registered intercom session with its durable outbox and
// inbox: the process that holds a session runs one, and every operation of
// Ops runs here. Safe for concurrent use.
type Session struct {
	cfg    SessionConfig
	log    *slog.Logger
	client *Client
	inbox  *Inbox
	outbox *Outbox

	mu      sync.Mutex
	waiters map[string]*askWaiter // by the id of our ask
	claimed map[string]bool       // inbox keys handed to an ask waiter
	staged  []*InboundMessage     // new since the last commit
	wake    chan struct{}         // closed and replaced when messages arrive
	// roster is the ids of the sessions seen in this session's audience,
	// for resolveTarget; ids only, copied out of their frames, so that a
	// worker among 500 keeps kilobytes of them, not every peer's frame.
	roster map[string]struct{}
	// listener is the pid of the process whose listen consumes the
	// session's messages (0: none).
	listener int
	// receipts counts read receipts being sent (Close waits for them);
	// closing (under mu) stops new ones once Close has begun.
	receipts    sync.WaitGroup
	closing     bool
	unreceipted []pendingReceipt // read receipts to send, by sender
	receipting  bool             // sendReceipts runs
	// unlock releases the session's files (lockSession), once.
	unlock func()
}

type askWaiter struct {
	to    string // target session id
	team  string // content.team of the ask: only a reply in it answers
	reply chan *InboundMessage
	fail  chan string // ask_cancelled reason from the broker
}

// OpenSession opens the session's inbox and outbox and registers it.
func OpenSession(ctx context.Context, cfg SessionConfig) (*Session, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.AskTTL == 0 {
		cfg.AskTTL = DefaultAskTTL
	}
	if cfg.AskWait == 0 {
		cfg.AskWait = DefaultAskWait
	}
	// An agent directory whose broker socket cannot be bound is refused
	// before anything is created in it.
	if err := checkEndpoint(cfg.Paths); err != nil {
		return nil, err
	}
	if err := EnsureDir(cfg.Paths.Dir); err != nil {
		return nil, err
	}
	unlock, err := lockSession(ctx, cfg)
	if err != nil {
		return nil, err
	}
	outbox, err := OpenOutbox(cfg.Paths, cfg.Identity.SessionID)
	if err != nil {
		unlock()
		return nil, err
	}
	inbox, err := OpenInbox(cfg.Paths, cfg.Identity.SessionID)
	if err != nil {
		unlock()
		return nil, err
	}
	s := &Session{
		cfg: cfg, log: cfg.Logger, inbox: inbox, outbox: outbox, unlock: sync.OnceFunc(unlock),
		waiters: make(map[string]*askWaiter), claimed: make(map[string]bool),
		wake: make(chan struct{}), roster: make(map[string]struct{}),
	}
	onRegistered := cfg.OnRegistered
	if cfg.Share {
		sh := &sharer{api: LocalAPIClient{Path: cfg.Paths.LocalAPISocket()}, id: cfg.Identity.SessionID, log: cfg.Logger}
		onRegistered = func() {
			sh.registered()
			if cfg.OnRegistered != nil {
				cfg.OnRegistered()
			}
		}
	}
	s.client = NewClient(ClientConfig{
		Paths: cfg.Paths, Identity: cfg.Identity, Logger: cfg.Logger, Start: cfg.Start,
		Outbox: outbox, Handler: s, Reconnect: cfg.Reconnect, Unpaced: cfg.Unpaced, ReplayFilter: cfg.ReplayFilter,
		OnRegistered: onRegistered, InUse: cfg.InUse,
	})
	if err := s.client.Connect(ctx); err != nil {
		s.unlock()
		return nil, err
	}
	return s, nil
}

// sessionLockWait is how long OpenSession waits for another process of
// this machine to release the session's files: as long as a registration
// refused SESSION_ID_IN_USE is retried (ClientConfig.InUseRetry).
const sessionLockWait = 2 * time.Second

// lockSession takes the lock on the session's inbox and outbox files, for
// as long as this process has them open (until Close): another process
// with the same id (two one-shot commands of one shell's id) reads them
// only once this one wrote all it has. Otherwise its copy, read while this
// one still sent, would overwrite this one's last sends on its close — a
// send that exited 8 "will be retried" lost from the outbox. A lock held
// past sessionLockWait is ErrSessionIDInUse, as the broker's refusal; the
// InUse hook, consulted meanwhile, may say why at once.
func lockSession(ctx context.Context, cfg SessionConfig) (unlock func(), err error) {
	path := cfg.Paths.SessionLock(cfg.Identity.SessionID)
	if err := EnsureDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(sessionLockWait)
	for {
		unlock, err := LockFile(ctx, path, 0)
		if err == nil || !errors.Is(err, syscall.EWOULDBLOCK) {
			return unlock, err
		}
		if cfg.InUse != nil {
			if why := cfg.InUse(ctx); why != nil {
				return nil, inUseFinal{why}
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: SESSION_ID_IN_USE: session %q is open in another process of this machine", ErrSessionIDInUse, cfg.Identity.SessionID)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// SwitchScope moves the session to another scope in place, keeping its
// id, inbox, outbox and ask state (Client.SetScope; named teams, spec
// §7.2). The roster cache starts afresh: the new scope sees other sessions.
func (s *Session) SwitchScope(ctx context.Context, scope string) error {
	if err := s.client.SetScope(ctx, scope); err != nil {
		return err
	}
	s.mu.Lock()
	s.roster = make(map[string]struct{})
	s.mu.Unlock()
	return nil
}

// Client is the session's broker connection.
func (s *Session) Client() *Client { return s.client }

// Inbox is the session's durable inbox.
func (s *Session) Inbox() *Inbox { return s.inbox }

// Outbox is the session's durable outbox.
func (s *Session) Outbox() *Outbox { return s.outbox }

// Close unregisters the session, keeping its ask edges (deferred) and its
// outbox for the next registration under the same id, and writes what its
// inbox and outbox have not written yet.
func (s *Session) Close() error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.receipts.Wait()
	err := errors.Join(s.client.Close(true), s.inbox.Close())
	s.unlock() // all written: another process may open the files now
	if s.cfg.History != nil {
		err = errors.Join(err, s.cfg.History.Flush())
	}
	return err
}

// Stage implements InboundHandler.
func (s *Session) Stage(f *wire.BrokerFrame) string {
	msg, err := wire.ParseMessage(f.Message)
	if err != nil {
		return "" // the broker validated it; acknowledge and drop
	}
	if s.cfg.Filter != nil {
		if reason := s.cfg.Filter(f.From, msg); reason != "" {
			return reason
		}
	}
	if msg.HasControl && s.takeReceipt(f.From, msg) {
		return ""
	}
	res := s.inbox.Stage(f.FromRaw, f.From, msg, float64(time.Now().UnixMilli()))
	if res.Conflict {
		return fmt.Sprintf("Conflicting payload for reused message ID %q", msg.ID)
	}
	if !res.Duplicate {
		s.mu.Lock()
		s.staged = append(s.staged, res.Message)
		s.mu.Unlock()
	}
	return ""
}

// Commit implements InboundHandler: the staged messages become durable,
// replies go to the asks waiting for them, and listeners wake.
func (s *Session) Commit() error {
	if err := s.inbox.Flush(); err != nil {
		return err
	}
	s.mu.Lock()
	staged := s.staged
	s.staged = nil
	woke := false
	for _, m := range staged {
		if w := s.waiters[m.Message.ReplyTo]; m.Message.ReplyTo != "" && w != nil && w.to == m.From.ID && w.team == m.Message.Team {
			s.claimed[m.Key] = true
			w.reply <- m
			delete(s.waiters, m.Message.ReplyTo)
			continue
		}
		woke = true
	}
	if woke {
		close(s.wake)
		s.wake = make(chan struct{})
	}
	s.mu.Unlock()
	s.recordReceived(staged)
	if s.cfg.OnMessage != nil {
		for _, m := range staged {
			s.cfg.OnMessage(m)
		}
	}
	return nil
}

// Event implements InboundHandler.
func (s *Session) Event(f *wire.BrokerFrame) {
	switch f.Type {
	case wire.TypeAskCancelled:
		// To us as recipient: the asker withdrew, timed out or left.
		_ = s.inbox.DismissAsk(f.MessageID, f.FromID)
		// To us as asker (the recipient went away for good).
		s.mu.Lock()
		if w := s.waiters[f.MessageID]; w != nil && w.to == f.FromID {
			w.fail <- f.Reason
			delete(s.waiters, f.MessageID)
		}
		s.mu.Unlock()
	case wire.TypeAskDeferred:
		_ = s.inbox.MarkDeferred(f.MessageID, f.FromID, float64(time.Now().UnixMilli()))
	case wire.TypeSessionJoined, wire.TypePresenceUpdate:
		s.mu.Lock()
		if _, ok := s.roster[f.Session.ID]; !ok {
			s.roster[strings.Clone(f.Session.ID)] = struct{}{}
		}
		s.mu.Unlock()
		if f.Type == wire.TypeSessionJoined && s.cfg.OnSessionJoined != nil {
			s.cfg.OnSessionJoined(f.Session.ID)
		}
	case wire.TypeSessionLeft:
		s.mu.Lock()
		delete(s.roster, f.SessionID)
		s.mu.Unlock()
	case wire.TypeError:
		s.log.Warn("intercom broker error", "code", f.Code, "error", f.Error)
	}
	if s.cfg.OnRoster != nil && (f.Type == wire.TypeSessionJoined || f.Type == wire.TypePresenceUpdate || f.Type == wire.TypeSessionLeft) {
		s.cfg.OnRoster()
	}
}

// Whoami implements Ops.
func (s *Session) Whoami(context.Context) (*WhoamiResult, error) {
	id := s.cfg.Identity
	return &WhoamiResult{SessionID: id.SessionID, Name: id.Name, Cwd: id.Cwd, Model: id.Model}, nil
}

// sessions lists the visible sessions and refreshes the roster cache.
func (s *Session) sessions(ctx context.Context) ([]wire.SessionInfo, error) {
	list, err := s.client.List(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.roster = make(map[string]struct{}, len(list))
	for _, si := range list {
		s.roster[strings.Clone(si.ID)] = struct{}{}
	}
	s.mu.Unlock()
	return list, nil
}

// List implements Ops.
func (s *Session) List(ctx context.Context, req ListRequest) (*ListResult, error) {
	list, err := s.sessions(ctx)
	if err != nil {
		return nil, err
	}
	me := s.cfg.Identity
	var repo string
	if req.Where == "repo" {
		repo = gitRoot(me.Cwd)
	}
	out := &ListResult{Sessions: []SessionView{}}
	for _, si := range list {
		self := si.ID == me.SessionID
		if self && !req.IncludeSelf {
			continue
		}
		switch req.Where {
		case "", "machine":
		case "directory":
			if si.Cwd != me.Cwd {
				out.Others++
				continue
			}
		case "repo":
			if repo == "" || gitRoot(si.Cwd) != repo {
				out.Others++
				continue
			}
		default:
			return nil, fmt.Errorf("%w: where must be machine, directory or repo", ErrInvalidInput)
		}
		out.Sessions = append(out.Sessions, viewOf(si, me.SessionID, me.Cwd))
	}
	return out, nil
}

func viewOf(si wire.SessionInfo, selfID, cwd string) SessionView {
	return SessionView{ID: si.ID, Name: si.Name, Cwd: si.Cwd, Model: si.Model, PID: si.PID,
		StartedAt: si.StartedAt, LastActivity: si.LastActivity, Status: si.Status, Origin: si.Origin, RemoteHostID: si.RemoteHostID,
		Self: si.ID == selfID, SameCwd: si.Cwd == cwd}
}

func gitRoot(dir string) string {
	out, err := exec.Command("git", "-C", dir, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return ""
	}
	return filepath.Clean(strings.TrimSpace(string(out)))
}

// resolveTarget pre-resolves a target as the Claude/Codex adapters do
// (spec §8.3): exact id → unique case-insensitive name → unique id prefix
// of ≥4 chars → the raw text, for the broker to resolve.
func (s *Session) resolveTarget(ctx context.Context, to string) (string, error) {
	if err := CheckTarget(to); err != nil {
		return "", err
	}
	to = strings.TrimSpace(to)
	if to == s.cfg.Identity.SessionID {
		return "", ErrSelfTarget
	}
	s.mu.Lock()
	_, known := s.roster[to]
	s.mu.Unlock()
	if known {
		return to, nil
	}
	list, err := s.sessions(ctx)
	if err != nil {
		return "", err
	}
	var byName, byPrefix []string
	for _, si := range list {
		if si.ID == to {
			return to, nil
		}
		if si.HasName && wire.SameName(si.Name, to) {
			byName = append(byName, si.ID)
		}
		if len(to) >= MinTargetPrefix && strings.HasPrefix(si.ID, to) {
			byPrefix = append(byPrefix, si.ID)
		}
	}
	pick := func(ids []string, what string) (string, error) {
		if len(ids) > 1 {
			return "", fmt.Errorf("%w: %d sessions %s %q (%s); use the session id", ErrAmbiguousTarget, len(ids), what, to, strings.Join(ids, ", "))
		}
		if ids[0] == s.cfg.Identity.SessionID {
			return "", ErrSelfTarget
		}
		return ids[0], nil
	}
	if len(byName) > 0 {
		return pick(byName, "are named")
	}
	if len(byPrefix) > 0 {
		return pick(byPrefix, "have ids starting with")
	}
	if n := shortPrefixOf(list, to); n > 0 && !s.connectedElsewhere(ctx, to) {
		// The broker would match it as a prefix (it has no minimum) and
		// call several matches "sessions named" it.
		return "", fmt.Errorf("%w: no session is named %q or has that id; %s with it, but an id prefix needs at least %d characters: give more of the id",
			ErrTargetNotFound, to, pluralIDs(n), MinTargetPrefix)
	}
	return to, nil // exact ids of other scopes are resolved by the broker
}

// MinTargetPrefix is the shortest id prefix a target may be (spec §8.3).
const MinTargetPrefix = 4

// shortPrefixOf counts the sessions whose id starts with to, when to is
// shorter than MinTargetPrefix (0 otherwise).
func shortPrefixOf(list []wire.SessionInfo, to string) int {
	if len(to) >= MinTargetPrefix {
		return 0
	}
	n := 0
	for _, si := range list {
		if strings.HasPrefix(si.ID, to) {
			n++
		}
	}
	return n
}

// pluralIDs is n session ids with the verb that agrees: "1 session id
// starts", "2 session ids start".
func pluralIDs(n int) string {
	if n == 1 {
		return "1 session id starts"
	}
	return fmt.Sprintf("%d session ids start", n)
}

// connectedElsewhere asks the broker's local API whether id is an exact
// session id connected in any scope (one the broker would resolve first);
// without a local API (a TypeScript broker) it says no.
func (s *Session) connectedElsewhere(ctx context.Context, id string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	peer, err := (&LocalAPIClient{Path: s.cfg.Paths.LocalAPISocket()}).Peer(ctx, id)
	return err == nil && peer != nil && peer.Connected
}

// brokerForwardsControls reports whether the serving broker is
// agent-fleet's, which forwards content.control (its local API answers);
// the TypeScript brokers have none, and the strict one refuses controls.
func (s *Session) brokerForwardsControls(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := (&LocalAPIClient{Path: s.cfg.Paths.LocalAPISocket()}).Stats(ctx)
	return err == nil
}

// compose builds a message and checks it against the wire limits.
func compose(id string, text string, att []wire.Attachment, replyTo string, ask bool, team string) (*wire.MessageInfo, error) {
	return composeWith(wire.Message{ID: id, ReplyTo: replyTo, ExpectsReply: ask, Text: text, Team: team, Attachments: att})
}

// composeWith stamps m (a new id when it has none) and checks it against
// the wire limits.
func composeWith(m wire.Message) (*wire.MessageInfo, error) {
	if m.ID == "" {
		m.ID = NewMessageID()
	}
	m.Timestamp = float64(time.Now().UnixMilli())
	text := m.Text
	info, err := wire.ParseMessage(m.AppendJSON(nil))
	if err != nil {
		if len(text) > wire.MaxTextBytes {
			return nil, fmt.Errorf("%w: text is %d bytes, the limit is %d", ErrInvalidInput, len(text), wire.MaxTextBytes)
		}
		return nil, fmt.Errorf("%w: message breaks the protocol limits (at most %d attachments of %d KiB, names of 256 characters, a well-formed control)",
			ErrInvalidInput, wire.MaxAttachments, wire.MaxAttachmentContentBytes>>10)
	}
	return info, nil
}

// SendOutcomeTimeout bounds the wait for a send's outcome (spec §6.5):
// the broker's acknowledgement timeout (8 s) plus room for a busy machine,
// so that a slow recipient comes back as DELIVERY_TIMEOUT, a known
// outcome, rather than as ErrOutcomeUnknown.
const SendOutcomeTimeout = 15 * time.Second

// send delivers msg to target and turns the outcome into a result.
func (s *Session) send(ctx context.Context, to, target string, msg *wire.MessageInfo) (*SendResult, error) {
	out, err := s.client.Send(ctx, target, msg) // bounded by SendOutcomeTimeout from the write
	res := &SendResult{MessageID: msg.ID, To: to, TargetID: target, ReplyTo: msg.ReplyTo, Team: msg.Team}
	if err != nil {
		if errors.Is(err, ErrConnectionLost) || errors.Is(err, context.DeadlineExceeded) {
			return res, fmt.Errorf("%w (message %s)", ErrOutcomeUnknown, msg.ID)
		}
		return res, err
	}
	res.Delivered, res.Accepted, res.DeliveryID = out.Delivered, out.Accepted, out.DeliveryID
	res.OK = out.Delivered
	res.Code, res.Reason = string(out.Code), out.Reason
	return res, nil
}

// Send implements Ops.
func (s *Session) Send(ctx context.Context, req SendRequest) (*SendResult, error) {
	target, err := s.resolveTarget(ctx, req.To)
	if err != nil {
		return nil, err
	}
	m := wire.Message{ID: req.MessageID, Text: req.Text, Team: req.Team, Attachments: req.Attachments}
	if req.Control != nil && s.brokerForwardsControls(ctx) {
		m.Control = req.Control
	}
	msg, err := composeWith(m)
	if err != nil {
		return nil, err
	}
	res, err := s.send(ctx, req.To, target, msg)
	for s.reconnecting(ctx, res, err) {
		res, err = s.send(ctx, req.To, target, msg)
	}
	if err == nil && !res.OK {
		res, err = s.deferSend(ctx, target, msg, res)
	}
	s.recordSent(msg, res, err)
	return res, err
}

// freshBrokerGrace is how long after a broker started a session it does
// not know may still be on its way back: the sessions of the broker it
// replaced reconnect with backoff (250 ms, doubling up to 5 s; spec §6.5).
const freshBrokerGrace = 5 * time.Second

// reconnecting reports, after waiting a moment, whether a send refused as
// SESSION_NOT_FOUND is worth sending again: the broker is younger than
// freshBrokerGrace (its pid file's age) and the target was alive a moment
// ago — this session saw it on the broker before, or its holder still
// listens — so it is most likely reconnecting to the new broker. Past the
// grace, or when ctx ends, the refusal stands.
func (s *Session) reconnecting(ctx context.Context, res *SendResult, err error) bool {
	if err != nil || res == nil || res.OK || res.Accepted || res.Code != string(wire.FailSessionNotFound) {
		return false
	}
	fi, serr := os.Stat(s.cfg.Paths.PIDFile())
	if serr != nil || time.Since(fi.ModTime()) >= freshBrokerGrace {
		return false
	}
	s.mu.Lock()
	_, seen := s.roster[res.TargetID]
	s.mu.Unlock()
	if !seen && !holderListening(ctx, s.cfg.Paths, res.TargetID) {
		return false
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(100 * time.Millisecond):
		return true
	}
}

// Ask implements Ops: send an ask, wait for its reply; when the wait runs
// out, defer it (the late reply lands in the inbox) or cancel it.
func (s *Session) Ask(ctx context.Context, req AskRequest) (*AskResult, error) {
	wait := req.Wait
	if wait <= 0 {
		wait = s.cfg.AskWait
	}
	if wait > MaxAskWait {
		return nil, fmt.Errorf("%w: an ask waits at most %s", ErrInvalidInput, MaxAskWait)
	}
	target, err := s.resolveTarget(ctx, req.To)
	if err != nil {
		return nil, err
	}
	msg, err := compose("", req.Text, req.Attachments, "", true, req.Team)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	w := &askWaiter{to: target, team: req.Team, reply: make(chan *InboundMessage, 1), fail: make(chan string, 1)}
	s.mu.Lock()
	s.waiters[msg.ID] = w
	s.mu.Unlock()
	drop := func() {
		s.mu.Lock()
		delete(s.waiters, msg.ID)
		s.mu.Unlock()
	}
	sent, err := s.send(ctx, req.To, target, msg)
	for s.reconnecting(ctx, sent, err) {
		sent, err = s.send(ctx, req.To, target, msg)
	}
	s.recordSent(msg, sent, err)
	res := &AskResult{}
	if sent != nil {
		res.SendResult = *sent
	}
	if err != nil || !sent.OK {
		drop()
		return res, err
	}
	// The broker may have resolved a name or prefix to another id.
	replied := func(m *InboundMessage) {
		view := s.view(m, true)
		_ = s.inbox.Consume(m.Key)
		s.markedRead([]*InboundMessage{m})
		s.mu.Lock()
		delete(s.claimed, m.Key)
		s.mu.Unlock()
		res.Replied, res.Reply = true, &view
	}
	timer := time.NewTimer(wait - time.Since(start))
	defer timer.Stop()
	select {
	case m := <-w.reply:
		replied(m)
	case reason := <-w.fail:
		res.OK, res.Code, res.Reason = false, "ASK_CANCELLED", "the ask was cancelled: "+reason
	case <-timer.C:
		pending := req.OnTimeout != CancelOnTimeout
		typ := wire.TypeDeferAsk
		if !pending {
			typ = wire.TypeCancelAsk
		}
		// Still waiting while the control goes: a reply that crossed it
		// is this ask's answer, not mail for later.
		applied, _ := s.client.AskControl(context.WithoutCancel(ctx), typ, msg.ID)
		drop()
		select {
		case m := <-w.reply:
			replied(m)
		default:
			res.Pending, res.Cancelled = pending, !pending && applied
			if pending {
				s.mu.Lock()
				res.ListenerPID = s.listener
				s.mu.Unlock()
			}
		}
	case <-s.client.Gone():
		// A one-shot's connection: the reply has nowhere to come now.
		drop()
		return res, fmt.Errorf("%w: while waiting for the reply to an ask that was delivered (message %s); no reply can reach this command now", ErrConnectionLost, msg.ID)
	case <-ctx.Done():
		drop()
		// The caller gave up (e.g. an MCP cancellation): withdraw the ask.
		_, _ = s.client.AskControl(context.WithoutCancel(ctx), wire.TypeCancelAsk, msg.ID)
		return res, ctx.Err()
	}
	res.WaitedMs = time.Since(start).Milliseconds()
	return res, nil
}

// Reply implements Ops.
func (s *Session) Reply(ctx context.Context, req ReplyRequest) (*SendResult, error) {
	_ = s.inbox.PruneAsks(float64(s.cfg.AskTTL.Milliseconds()), float64(time.Now().UnixMilli()))
	asks := s.inbox.PendingAsks()
	var ask *InboundMessage
	var err error
	if req.ContextID != "" {
		ask, err = selectContext(asks, s.inbox.Unread(), req)
	} else {
		ask, err = selectAsk(asks, req)
	}
	if err != nil {
		return nil, err
	}
	if req.Team != "" && req.Team != ask.Message.Team {
		return nil, fmt.Errorf("%w: a reply stays in the original message's team (%s); omit the team to keep it", ErrInvalidInput, teamOrNone(ask.Message.Team))
	}
	replyTo := ""
	if ask.Message.ExpectsReply {
		replyTo = ask.Message.ID
	}
	msg, err := compose("", req.Text, req.Attachments, replyTo, false, ask.Message.Team)
	if err != nil {
		return nil, err
	}
	to := ask.From.Name
	if to == "" {
		to = ask.From.ID
	}
	res, err := s.send(ctx, to, ask.From.ID, msg)
	for s.reconnecting(ctx, res, err) { // the asker may be on its way back to a new broker
		res, err = s.send(ctx, to, ask.From.ID, msg)
	}
	s.recordSent(msg, res, err)
	if res != nil && replyTo != "" {
		res.AskID = ask.AskID()
	}
	if err != nil || replyTo == "" {
		return res, err
	}
	if res.OK || res.Code == string(wire.FailInvalidReplyTarget) {
		// Answered, or the broker no longer has the ask: either way it is
		// not pending any more. Other failures keep it answerable.
		_ = s.inbox.DismissAsk(ask.Message.ID, ask.From.ID)
		if slices.ContainsFunc(s.inbox.Unread(), func(m *InboundMessage) bool { return m.Key == ask.Key }) {
			_ = s.inbox.Consume(ask.Key)
			s.markedRead([]*InboundMessage{ask})
		}
	}
	return res, nil
}

func teamOrNone(team string) string {
	if team == "" {
		return "no team"
	}
	return "team " + team
}

// selectContext picks the message a reply by context id answers: a
// pending ask, or an inbound message still in the inbox.
func selectContext(asks, unread []*InboundMessage, req ReplyRequest) (*InboundMessage, error) {
	if req.AskID != "" || req.Which != "" {
		return nil, fmt.Errorf("%w: a context id selects one message: give no ask id or which with it", ErrInvalidInput)
	}
	for _, list := range [][]*InboundMessage{asks, unread} {
		for _, m := range list {
			if m.ContextID() != req.ContextID {
				continue
			}
			if m.Message.ExpectsReply && !slices.Contains(asks, m) {
				break // an answered ask: not pending any more
			}
			if req.To != "" && m.From.ID != req.To && !(m.From.HasName && wire.SameName(m.From.Name, req.To)) {
				return nil, fmt.Errorf("%w: context %q is not from %q", ErrNoPendingAsk, req.ContextID, req.To)
			}
			return m, nil
		}
	}
	return nil, fmt.Errorf("%w: no unread message or pending ask with context id %q (see pending)", ErrNoPendingAsk, req.ContextID)
}

// selectAsk picks the ask a reply answers (spec §5.8).
func selectAsk(asks []*InboundMessage, req ReplyRequest) (*InboundMessage, error) {
	matches := func(m *InboundMessage, to string) bool {
		return m.From.ID == to || (m.From.HasName && wire.SameName(m.From.Name, to))
	}
	if req.Which != "" && req.Which != "oldest" && req.Which != "latest" {
		return nil, fmt.Errorf("%w: which must be oldest or latest", ErrInvalidInput)
	}
	if req.To != "" {
		if err := CheckTarget(req.To); err != nil {
			return nil, err
		}
	}
	if req.AskID != "" {
		for _, a := range asks {
			if a.AskID() == req.AskID {
				if req.To != "" && !matches(a, req.To) {
					return nil, fmt.Errorf("%w: pending ask %q is not from %q", ErrNoPendingAsk, req.AskID, req.To)
				}
				return a, nil
			}
		}
		return nil, fmt.Errorf("%w: no pending ask with ask id %q", ErrNoPendingAsk, req.AskID)
	}
	if len(asks) == 0 {
		return nil, fmt.Errorf("%w: there are no pending asks", ErrNoPendingAsk)
	}
	candidates := asks
	if req.To != "" {
		candidates = slices.DeleteFunc(slices.Clone(asks), func(m *InboundMessage) bool { return !matches(m, req.To) })
		if len(candidates) == 0 {
			return nil, fmt.Errorf("%w: no pending ask from %q", ErrNoPendingAsk, req.To)
		}
	}
	if len(candidates) == 1 {
		return candidates[0], nil
	}
	senders, teams := map[string]bool{}, map[string]bool{}
	for _, c := range candidates {
		senders[c.From.ID] = true
		teams[c.Message.Team] = true
	}
	if len(teams) > 1 && req.Which == "" {
		return nil, fmt.Errorf("%w: %d pending asks in %d team contexts; choose one with an ask id or a context id", ErrAmbiguousTarget, len(candidates), len(teams))
	}
	if len(senders) > 1 {
		return nil, fmt.Errorf("%w: %d pending asks from %d sessions; choose one with an ask id or the sender (to)", ErrAmbiguousTarget, len(candidates), len(senders))
	}
	switch req.Which {
	case "oldest":
		return candidates[0], nil
	case "latest":
		return candidates[len(candidates)-1], nil
	}
	return nil, fmt.Errorf("%w: %d pending asks from %s; choose oldest or latest (which) or an ask id", ErrAmbiguousTarget, len(candidates), candidates[0].From.ID)
}

func (s *Session) view(m *InboundMessage, read bool) MessageView {
	v := MessageView{
		From:      Sender{ID: m.From.ID, Name: m.From.Name, Origin: m.From.Origin},
		MessageID: m.Message.ID, Text: m.Message.Text, Attachments: m.Message.Attachments,
		ExpectsReply: m.Message.ExpectsReply, ReplyTo: m.Message.ReplyTo, ReceivedAt: m.ReceivedAt, Read: read,
		Control:   m.Message.Control,
		ContextID: m.ContextID(), Team: m.Message.Team,
	}
	if v.Attachments == nil {
		v.Attachments = []wire.Attachment{}
	}
	if m.Message.ExpectsReply {
		v.AskID = m.AskID()
	}
	return v
}

// Pending implements Ops.
func (s *Session) Pending(_ context.Context, req PendingRequest) (*PendingResult, error) {
	now := time.Now()
	_ = s.inbox.PruneAsks(float64(s.cfg.AskTTL.Milliseconds()), float64(now.UnixMilli()))
	res := &PendingResult{Unread: []MessageView{}, Asks: []AskView{}}
	asks := s.inbox.PendingAsks()
	res.Asks = askViews(asks, now)
	if req.AskID != "" {
		for i, a := range asks {
			if a.AskID() == req.AskID {
				v := res.Asks[i]
				v.Text, v.Attachments = a.Message.Text, a.Message.Attachments
				return &PendingResult{Unread: []MessageView{}, Asks: []AskView{v}}, nil
			}
		}
		return nil, fmt.Errorf("%w: no pending ask with ask id %q", ErrNoPendingAsk, req.AskID)
	}
	var keys []string
	var shown []*InboundMessage
	s.mu.Lock()
	claimed := s.claimed
	for _, m := range s.inbox.Unread() {
		if !claimed[m.Key] && (len(req.IDs) == 0 || slices.Contains(req.IDs, m.Message.ID)) {
			res.Unread = append(res.Unread, s.view(m, false))
			keys = append(keys, m.Key)
			shown = append(shown, m)
		}
	}
	s.mu.Unlock()
	if req.MarkRead && len(keys) > 0 {
		if err := s.inbox.Consume(keys...); err != nil {
			return nil, err
		}
		s.markedRead(shown)
		for i := range res.Unread {
			res.Unread[i].Read = true // as they are now
		}
	}
	return res, nil
}

// Take marks the unread messages pick selects read and returns them,
// oldest first: Pending with MarkRead, for some of them (a worker's shim
// takes the messages kept for it into its first turn).
func (s *Session) Take(pick func(MessageView) bool) []MessageView {
	var out []MessageView
	var taken []*InboundMessage
	var keys []string
	s.mu.Lock()
	for _, m := range s.inbox.Unread() {
		if v := s.view(m, true); !s.claimed[m.Key] && pick(v) {
			out, taken, keys = append(out, v), append(taken, m), append(keys, m.Key)
		}
	}
	s.mu.Unlock()
	if len(keys) > 0 {
		_ = s.inbox.Consume(keys...)
		s.markedRead(taken)
	}
	return out
}

// AskViews renders pending asks (oldest first) as Pending lists them, with
// their selectors and ages at now: for a foreign inbox read with
// ReadPendingAsks (manager inspection).
func AskViews(asks []*InboundMessage, now time.Time) []AskView { return askViews(asks, now) }

// askViews renders pending asks, oldest first, with their selectors.
func askViews(asks []*InboundMessage, now time.Time) []AskView {
	out := make([]AskView, 0, len(asks))
	for _, a := range asks {
		var same []*InboundMessage
		for _, b := range asks {
			if b.From.ID == a.From.ID {
				same = append(same, b)
			}
		}
		sel := ""
		if len(same) > 1 {
			switch a {
			case same[0]:
				sel = "oldest"
			case same[len(same)-1]:
				sel = "latest"
			default:
				sel = "queued"
			}
		}
		out = append(out, AskView{
			AskID: a.AskID(), From: Sender{ID: a.From.ID, Name: a.From.Name, Origin: a.From.Origin},
			ReceivedAt: a.ReceivedAt, DeferredAt: a.DeferredAt, Preview: Preview(a.Message.Text, 80),
			ContextID: a.ContextID(), Team: a.Message.Team,
			Selector:       sel,
			ElapsedSeconds: max(0, (now.UnixMilli()-int64(a.ReceivedAt))/1000),
		})
	}
	return out
}

// Status implements Ops.
func (s *Session) Status(ctx context.Context) (*StatusResult, error) {
	res := &StatusResult{SessionID: s.cfg.Identity.SessionID, Connected: s.client.Connected(),
		Unread: s.inbox.Len(), Outbox: s.outbox.Len(), PendingAsks: len(s.inbox.PendingAsks())}
	if res.Connected {
		if list, err := s.sessions(ctx); err == nil {
			res.ActiveSessions = len(list)
		}
	}
	if s.cfg.Deferral != nil {
		d, err := s.cfg.Deferral.From(ctx, s.cfg.Identity.SessionID)
		if err != nil {
			s.log.Warn("could not read the messages kept for workers", "err", err)
		}
		res.Deferred = d
	}
	return res, nil
}

// MaxSummaryChars bounds a status summary (the adapters' intercom_set_summary).
const MaxSummaryChars = 400

// SetSummary implements Ops: publishes the summary as presence status
// ("idle" when blank).
func (s *Session) SetSummary(ctx context.Context, summary string) error {
	summary = strings.TrimSpace(summary)
	if len([]rune(summary)) > MaxSummaryChars {
		return fmt.Errorf("%w: a summary has at most %d characters", ErrInvalidInput, MaxSummaryChars)
	}
	if summary == "" {
		summary = "idle"
	}
	return s.client.Presence(ctx, wire.Presence{Status: summary, HasStatus: true})
}

// Listen implements Ops. A consuming listen (not KeepUnread) takes the
// session's listener slot for as long as it runs; while one runs, another
// is refused with ErrListening naming its process.
func (s *Session) Listen(ctx context.Context, req ListenRequest, emit func(*MessageView) error) error {
	if !req.KeepUnread {
		pid := listenerPID(ctx)
		s.mu.Lock()
		held := s.listener
		if held == 0 {
			s.listener = pid
		}
		s.mu.Unlock()
		if held != 0 {
			return fmt.Errorf("%w: session %q is already being listened to by pid %d, which prints and consumes its messages; "+
				"stop that listen first, or listen under another %s", ErrListening, s.cfg.Identity.SessionID, held, SessionIDEnv)
		}
		defer func() {
			s.mu.Lock()
			s.listener = 0
			s.mu.Unlock()
		}()
	}
	if req.Started != nil {
		req.Started()
	}
	var last int64
	for {
		s.mu.Lock()
		wake := s.wake
		claimed := s.claimed
		var todo []*InboundMessage
		for _, m := range s.inbox.Unread() {
			if m.Sequence > last && !claimed[m.Key] {
				todo = append(todo, m)
			}
		}
		s.mu.Unlock()
		for _, m := range todo {
			v := s.view(m, false)
			if err := emit(&v); err != nil {
				return err
			}
			last = m.Sequence
			if !req.KeepUnread {
				if err := s.inbox.Consume(m.Key); err != nil {
					return err
				}
				s.markedRead([]*InboundMessage{m})
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		}
	}
}
