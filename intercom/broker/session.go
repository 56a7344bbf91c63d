package broker

import (
	"sort"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// session is a registered session bound to its current connection.
type session struct {
	info      wire.SessionInfo
	infoRaw   []byte // info as JSON, rebuilt whenever info changes
	nameLower string // info.Name lowercased (target resolution), "" without a name
	// scope groups sessions (spec §4.3): the raw scope without
	// federation, its Scoper token with it (a proxy's announced token), so
	// a proxy shares its scope with the local sessions of the same one.
	// Private: never in a frame, log, error or file (spec §4.2).
	scope         string
	proxyHost     string // a proxy session's host (proxy.go); "" for a local session
	runtime       string // runtimeInstanceId, "" for legacy clients
	conn          *conn
	order         uint64 // list position: insertion order, kept on replacement
	lastBroadcast time.Time
}

func (s *session) refreshInfo() {
	s.infoRaw = s.info.AppendJSON(s.infoRaw[:0])
	s.nameLower = ""
	if s.info.HasName {
		s.nameLower = wire.LowerName(s.info.Name)
	}
}

// sameRuntime is the ownership test of spec §4.5: runtime instance ids
// decide when either side has one; otherwise pid and startedAt do.
func sameRuntime(prev *session, reg *wire.Registration) bool {
	if prev.runtime != "" || reg.RuntimeInstanceID != "" {
		return prev.runtime != "" && prev.runtime == reg.RuntimeInstanceID
	}
	return prev.info.PID == reg.PID && prev.info.StartedAt == reg.StartedAt
}

// scopeGroup is the sessions of one scope in list order.
type scopeGroup struct {
	members []*session
}

func (b *Broker) joinScope(s *session) {
	g := b.scopes[s.scope]
	if g == nil {
		g = &scopeGroup{}
		b.scopes[s.scope] = g
	}
	i := sort.Search(len(g.members), func(i int) bool { return g.members[i].order >= s.order })
	g.members = append(g.members, nil)
	copy(g.members[i+1:], g.members[i:])
	g.members[i] = s
}

func (b *Broker) leaveScope(s *session) {
	g := b.scopes[s.scope]
	if g == nil {
		return
	}
	for i, m := range g.members {
		if m == s {
			g.members = append(g.members[:i], g.members[i+1:]...)
			break
		}
	}
	if len(g.members) == 0 {
		delete(b.scopes, s.scope)
	}
}

// broadcast sends frame to the audience of subject (spec §4.3): sessions
// of the subject's scope, excluding the subject's id itself.
func (b *Broker) broadcast(subject *session, frame []byte) {
	g := b.scopes[subject.scope]
	if g == nil {
		return
	}
	for _, m := range g.members {
		if m.info.ID != subject.info.ID {
			m.conn.send(frame)
		}
	}
}

// resolve finds the targets of a send (spec §4.3): a global exact id, else
// same-scope names (case-insensitive), else same-scope id prefixes.
func (b *Broker) resolve(from *session, to string) []*session {
	if s := b.sessions[to]; s != nil {
		return []*session{s}
	}
	g := b.scopes[from.scope]
	if g == nil {
		return nil
	}
	var out []*session
	lower := wire.LowerName(to)
	for _, m := range g.members {
		if m.info.HasName && m.nameLower == lower {
			out = append(out, m)
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, m := range g.members {
		if strings.HasPrefix(m.info.ID, to) {
			out = append(out, m)
		}
	}
	return out
}

// armRegistration puts c among the unregistered connections, evicting the
// oldest beyond the cap, and starts its registration timer (spec §2.0).
// Called with mu held.
func (b *Broker) armRegistration(c *conn) {
	if c.regTimer != nil {
		c.regTimer.Stop()
	}
	if c.unregElem != nil {
		b.unregistered.Remove(c.unregElem)
	}
	c.unregElem = b.unregistered.PushBack(c)
	for b.unregistered.Len() > b.cfg.MaxUnregistered {
		oldest := b.unregistered.Front()
		old := oldest.Value.(*conn)
		b.unregistered.Remove(oldest)
		old.unregElem = nil
		old.destroy()
	}
	c.regTimer = time.AfterFunc(b.cfg.RegistrationTimeout, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if c.sessionID == "" {
			c.destroy()
		}
	})
}

func (b *Broker) disarmRegistration(c *conn) {
	if c.regTimer != nil {
		c.regTimer.Stop()
		c.regTimer = nil
	}
	if c.unregElem != nil {
		b.unregistered.Remove(c.unregElem)
		c.unregElem = nil
	}
}

// bound returns c's session if c is still that session's connection.
func (b *Broker) bound(c *conn) *session {
	if c.sessionID == "" {
		return nil
	}
	if s := b.sessions[c.sessionID]; s != nil && s.conn == c {
		return s
	}
	return nil
}

// removeSession unbinds s after its connection closed or it unregistered:
// the audience hears session_left, its pending deliveries on that
// connection fail, and its ask edges are deferred or cancelled.
// Called with mu held.
func (b *Broker) removeSession(s *session, preserveAsks bool) {
	b.broadcast(s, wire.AppendSessionLeft(b.scratch[:0], s.info.ID))
	delete(b.sessions, s.info.ID)
	if s.proxyHost != "" {
		b.unindexProxy(s)
	} else if b.fed != nil {
		b.fed.LocalLeft(s.info.ID, !preserveAsks)
	}
	if d := b.keys.session(s.info.ID); b.sessionDigests[d] > 1 {
		b.sessionDigests[d]--
	} else {
		delete(b.sessionDigests, d)
	}
	b.leaveScope(s)
	b.failDeliveriesOf(s.info.ID, s.conn)
	if preserveAsks {
		b.deferAsksOf(s.info.ID)
	} else {
		b.cancelAsksOf(s.info.ID, wire.AskSessionDisconnected)
	}
	if s.proxyHost == "" {
		b.scheduleIdleCheck()
	}
}

// connClosed runs once when a connection's reader stops.
func (b *Broker) connClosed(c *conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.disarmRegistration(c)
	delete(b.conns, c)
	if s := b.bound(c); s != nil {
		// A closed socket defers its edges (spec §5.7), unlike unregister.
		b.removeSession(s, true)
	}
}

func (b *Broker) handleRegister(c *conn, env *wire.Envelope) {
	reg, err := env.DecodeRegister()
	if err != nil {
		b.refuse(c, err)
		return
	}
	if c.sessionID != "" {
		b.refuse(c, protoErr(wire.CodeInvalidRequest, "Received duplicate register message"))
		return
	}
	id := reg.SessionID
	if reg.HasSessionID {
		if !reg.SessionIDValid {
			b.refuse(c, protoErr(wire.CodeInvalidRequest, "Invalid register sessionId"))
			return
		}
	} else {
		id = b.ids.next().String()
	}
	prev := b.sessions[id]
	var proxy *session
	if prev != nil && prev.proxyHost != "" {
		proxy, prev = prev, nil // the local session wins the id
	}
	if prev == nil && len(b.sessions)-b.proxyCount >= b.cfg.MaxSessions {
		c.send(wire.AppendError(b.scratch[:0], wire.CodeTooManySessions, "Too many registered intercom sessions"))
		c.end()
		return
	}
	if prev != nil && !sameRuntime(prev, &reg.Session) {
		b.refuse(c, protoErr(wire.CodeSessionIDInUse,
			`Session ID "`+id+`" is already active in another local runtime; close the existing session or use a different session ID`))
		return
	}
	r := &reg.Session
	s := &session{
		info: wire.SessionInfo{
			ID: id, Name: r.Name, HasName: r.HasName, Cwd: r.Cwd, Model: r.Model,
			PID: r.PID, StartedAt: r.StartedAt, LastActivity: r.LastActivity,
			Status: r.Status, HasStatus: r.HasStatus,
			TrustedLocal: b.cfg.TrustedLocal, Origin: "local",
		},
		scope:         b.scopeKey(reg.Scope),
		runtime:       r.RuntimeInstanceID,
		conn:          c,
		lastBroadcast: time.Now(),
	}
	s.refreshInfo()
	c.sessionID = id
	b.disarmRegistration(c)
	if proxy != nil {
		// The remote session of that id leaves as a closed socket: its
		// deliveries fail and its edges defer.
		b.removeSession(proxy, true)
	}
	if prev != nil {
		// Replacement (spec §4.4): the old scope hears left, the old
		// connection's deliveries fail and its edges defer, before the new
		// binding exists.
		b.broadcast(prev, wire.AppendSessionLeft(b.scratch[:0], id))
		b.failDeliveriesOf(id, prev.conn)
		b.deferAsksOf(id)
		b.leaveScope(prev)
		s.order = prev.order
	} else {
		b.nextOrder++
		s.order = b.nextOrder
		b.sessionDigests[b.keys.session(id)]++
	}
	b.sessions[id] = s
	b.joinScope(s)
	b.cancelIdleCheck()
	c.send(wire.AppendRegistered(b.scratch[:0], id))
	b.broadcast(s, wire.AppendSessionJoined(b.scratch[:0], s.infoRaw))
	if b.fed != nil {
		b.fed.LocalJoined(b.localSession(s))
	}
	if prev != nil {
		prev.conn.end()
	}
	b.log.Debug("session registered", "session", id, "pid", c.peerPID, "replaced", prev != nil)
}

func (b *Broker) handleUnregister(c *conn, env *wire.Envelope) {
	preserve, err := env.DecodeUnregister()
	if err != nil {
		b.refuse(c, err)
		return
	}
	if s := b.bound(c); s != nil {
		b.removeSession(s, preserve)
	}
	c.sessionID = ""
	b.armRegistration(c)
}

func (b *Broker) handleList(c *conn, s *session, env *wire.Envelope) {
	rid, err := env.DecodeRequestID()
	if err != nil {
		b.refuse(c, err)
		return
	}
	var infos [][]byte
	if g := b.scopes[s.scope]; g != nil {
		infos = make([][]byte, len(g.members))
		for i, m := range g.members {
			infos[i] = m.infoRaw
		}
	}
	b.scratch = wire.AppendSessions(b.scratch[:0], rid, infos)
	c.send(b.scratch)
}

func (b *Broker) handlePresence(c *conn, s *session, env *wire.Envelope) {
	p, err := env.DecodePresence()
	if err != nil {
		b.refuse(c, err)
		return
	}
	changed := false
	if p.HasName && (!s.info.HasName || s.info.Name != p.Name) {
		if !s.info.HasName {
			s.info.Trailing = append(s.info.Trailing, "name")
		}
		s.info.Name, s.info.HasName = p.Name, true
		changed = true
	}
	if p.HasStatus && (!s.info.HasStatus || s.info.Status != p.Status) {
		if !s.info.HasStatus {
			s.info.Trailing = append(s.info.Trailing, "status")
		}
		s.info.Status, s.info.HasStatus = p.Status, true
		changed = true
	}
	if p.HasModel && s.info.Model != p.Model {
		s.info.Model = p.Model
		changed = true
	}
	now := time.Now()
	s.info.LastActivity = float64(now.UnixMilli())
	s.refreshInfo()
	// Coalesce: identical updates within a second are not rebroadcast (§6.9).
	if changed || now.Sub(s.lastBroadcast) >= presenceHeartbeat {
		s.lastBroadcast = now
		b.broadcast(s, wire.AppendPresenceUpdate(b.scratch[:0], s.infoRaw))
		if b.fed != nil {
			b.fed.LocalPresence(b.localSession(s))
		}
	}
}
