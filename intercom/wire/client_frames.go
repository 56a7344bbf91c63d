package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"unicode/utf8"
)

// Client frame types (spec §2.1).
const (
	TypeHealth          = "health"
	TypeRegister        = "register"
	TypeList            = "list"
	TypeSend            = "send"
	TypeMessageReceived = "message_received"
	TypeMessageRejected = "message_rejected"
	TypeDeferAsk        = "defer_ask"
	TypeCancelAsk       = "cancel_ask"
	TypePresence        = "presence"
	TypeUnregister      = "unregister"
	TypeAccessControl   = "access_control"
)

// Envelope is a client frame whose JSON is valid and whose `type` is known
// to be a string; its other members are decoded on demand by the Decode*
// methods, so that a broker can apply its checks in the order the reference
// broker does (spec §2.0: "Received X before register" precedes field errors).
type Envelope struct {
	Type   string
	fields []field
	raw    []byte
}

// Raw is the frame's JSON payload. It aliases the reader's buffer.
func (e *Envelope) Raw() []byte { return e.raw }

func (e *Envelope) get(key string) ([]byte, bool) {
	for i := range e.fields {
		if e.fields[i].key == key {
			return e.fields[i].raw, true
		}
	}
	return nil, false
}

// ParseEnvelope checks that payload is JSON and an object with a string
// `type`. Malformed JSON yields ErrMalformedJSON (drop the connection without
// an error frame); anything else that is not a typed object yields an
// INVALID_REQUEST "Invalid client message" ProtocolError (spec §1.3).
// The envelope aliases payload.
func ParseEnvelope(payload []byte) (*Envelope, error) {
	if !validJSON(payload) {
		return nil, ErrMalformedJSON
	}
	fields, ok := objectFields(payload, make([]field, 0, 8))
	if !ok {
		return nil, invalidRequest("Invalid client message")
	}
	env := &Envelope{fields: fields, raw: payload}
	t, present := env.get("type")
	if !present {
		return nil, invalidRequest("Invalid client message")
	}
	s, ok := asString(t)
	if !ok {
		return nil, invalidRequest("Invalid client message")
	}
	env.Type = s
	return env, nil
}

// DecodeRequestID returns the string `requestId` of a health or list frame.
// Its error is INVALID_REQUEST "Invalid <type> message".
func (e *Envelope) DecodeRequestID() (string, error) {
	raw, _ := e.get("requestId")
	id, ok := asString(raw)
	if !ok {
		return "", invalidRequest("Invalid %s message", e.Type)
	}
	return id, nil
}

// Registration is the `session` object of a register frame (spec §2.1),
// validated with its exact key set and limits.
type Registration struct {
	Cwd               string
	Model             string
	PID               float64
	StartedAt         float64 // epoch ms, sender clock
	LastActivity      float64 // epoch ms, sender clock
	Name              string
	HasName           bool
	Status            string
	HasStatus         bool
	RuntimeInstanceID string // "" when absent
	HasBoss           bool
}

// Register is a decoded register frame.
type Register struct {
	SessionID    string // requested stable id, as sent
	HasSessionID bool
	// SessionIDValid is false for a sessionId that is not a string or is
	// blank after trimming; the broker refuses it only after its own
	// duplicate-register check, as the reference does.
	SessionIDValid bool
	Scope          string // "" = unscoped; private, never echo it
	Session        Registration
}

var registerOuterKeys = []string{"type", "protocol", "version", "session", "sessionId", "stateId", "access", "scopeId"}
var sessionKeys = []string{"cwd", "model", "pid", "startedAt", "lastActivity", "name", "status", "runtimeInstanceId", "boss"}

func exactKeys(fields []field, allowed []string, required []string) bool {
	for _, f := range fields {
		found := false
		for _, a := range allowed {
			if f.key == a {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	for _, r := range required {
		found := false
		for _, f := range fields {
			if f.key == r {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func lookup(fields []field, key string) ([]byte, bool) {
	for i := range fields {
		if fields[i].key == key {
			return fields[i].raw, true
		}
	}
	return nil, false
}

// Register error texts (spec §3.1), shared with tests and clients.
const (
	MsgInvalidRegister     = "Invalid register message"
	MsgRegistrationInvalid = "Registration metadata is invalid"
	MsgProtocolMismatch    = "Unsupported intercom protocol; expected pi-intercom v4"
)

// DecodeRegister validates a register frame in the reference order (spec
// §2.1): exact outer keys → protocol and version (PROTOCOL_MISMATCH) → scope
// (INVALID_REQUEST "Registration metadata is invalid", never echoing it) →
// exact session schema → Boss metadata (BOSS_FEATURE_UNAVAILABLE).
func (e *Envelope) DecodeRegister() (*Register, error) {
	if !exactKeys(e.fields, registerOuterKeys, registerOuterKeys[:4]) {
		return nil, invalidRequest(MsgInvalidRegister)
	}
	proto, _ := e.get("protocol")
	ver, _ := e.get("version")
	if p, ok := asString(proto); !ok || p != ProtocolName {
		return nil, &ProtocolError{Code: CodeProtocolMismatch, Message: MsgProtocolMismatch}
	}
	if v, ok := asNumber(ver); !ok || v != ProtocolVersion {
		return nil, &ProtocolError{Code: CodeProtocolMismatch, Message: MsgProtocolMismatch}
	}
	reg := &Register{}
	if raw, ok := e.get("scopeId"); ok {
		s, isStr := asString(raw)
		if !isStr || ValidateScope(s) != nil {
			return nil, invalidRequest(MsgRegistrationInvalid)
		}
		reg.Scope = s
	}
	sessRaw, _ := e.get("session")
	sess, ok := objectFields(sessRaw, nil)
	if !ok || !exactKeys(sess, sessionKeys, sessionKeys[:5]) || !decodeRegistration(sess, &reg.Session) {
		return nil, invalidRequest(MsgInvalidRegister)
	}
	if reg.Session.HasBoss {
		return nil, &ProtocolError{Code: CodeBossFeatureUnavailable, Message: "Boss registration is unavailable on this broker"}
	}
	if raw, ok := e.get("sessionId"); ok {
		reg.HasSessionID = true
		if s, isStr := asString(raw); isStr && trimJS(s) != "" {
			reg.SessionID = s
			reg.SessionIDValid = true
		}
	}
	return reg, nil
}

func decodeRegistration(sess []field, r *Registration) bool {
	var ok bool
	raw, _ := lookup(sess, "cwd")
	if r.Cwd, ok = asString(raw); !ok || r.Cwd == "" || utf16Len(r.Cwd) > MaxCwdChars {
		return false
	}
	raw, _ = lookup(sess, "model")
	if r.Model, ok = asString(raw); !ok || r.Model == "" || utf16Len(r.Model) > MaxModelChars {
		return false
	}
	raw, _ = lookup(sess, "pid")
	if r.PID, ok = asNumber(raw); !ok {
		return false
	}
	raw, _ = lookup(sess, "startedAt")
	if r.StartedAt, ok = asNumber(raw); !ok {
		return false
	}
	raw, _ = lookup(sess, "lastActivity")
	if r.LastActivity, ok = asNumber(raw); !ok {
		return false
	}
	if raw, present := lookup(sess, "name"); present {
		if r.Name, ok = asString(raw); !ok || utf16Len(r.Name) > MaxNameChars {
			return false
		}
		r.HasName = true
	}
	if raw, present := lookup(sess, "status"); present {
		if r.Status, ok = asString(raw); !ok || utf16Len(r.Status) > MaxStatusChars {
			return false
		}
		r.HasStatus = true
	}
	if raw, present := lookup(sess, "runtimeInstanceId"); present {
		if r.RuntimeInstanceID, ok = asString(raw); !ok || r.RuntimeInstanceID == "" || utf16Len(r.RuntimeInstanceID) > MaxRuntimeInstanceIDChars {
			return false
		}
	}
	if raw, present := lookup(sess, "boss"); present {
		if kindOf(raw) != kindObject {
			return false
		}
		r.HasBoss = true
	}
	return true
}

// trimJS trims what JavaScript's String.prototype.trim trims.
func trimJS(s string) string {
	return strings.TrimFunc(s, func(r rune) bool {
		switch r {
		case '\t', '\n', '\v', '\f', '\r', ' ', 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff:
			return true
		}
		return r >= 0x2000 && r <= 0x200a
	})
}

// Send is a decoded send frame. A send with an invalid body is not a
// protocol error: the broker answers it with delivery_failed (spec §3.2).
type Send struct {
	To string
	// Message is the raw `message` JSON, forwarded to the recipient byte for
	// byte (spec §9.3). It aliases the frame buffer.
	Message []byte
	// MessageID is message.id when it is a valid id, else "unknown": the id
	// a delivery_failed for this send must carry.
	MessageID string
	Meta      MessageMeta
	// Failure is non-empty when the send must be refused before routing:
	// INVALID_MESSAGE or CONTROL_DISPATCH_UNAVAILABLE.
	Failure FailureCode
	Reason  string
}

// MessageMeta is what the broker needs to know of a valid message.
type MessageMeta struct {
	ID           string
	ReplyTo      string // "" when absent
	ExpectsReply bool   // true only when expectsReply is literally true
	// Fingerprint identifies the payload for deduplication (spec §5.2): a
	// digest of {to, replyTo, expectsReply, content} as sent.
	Fingerprint [32]byte
}

// DecodeSend validates a send frame's target and message (spec §2.1, §2.5).
func (e *Envelope) DecodeSend() *Send {
	s := &Send{MessageID: "unknown"}
	msgRaw, _ := e.get("message")
	s.Message = msgRaw
	msg, isObj := objectFields(msgRaw, make([]field, 0, 6))
	if isObj {
		if raw, ok := lookup(msg, "id"); ok {
			if id, ok := asString(raw); ok && id != "" && utf16Len(id) <= MaxMessageIDChars {
				s.MessageID = id
			}
		}
	}
	invalid := func() *Send {
		s.Failure, s.Reason = FailInvalidMessage, "Invalid message format"
		return s
	}
	toRaw, _ := e.get("to")
	to, ok := asString(toRaw)
	if !ok || to == "" || utf16Len(to) > MaxTargetChars || !isObj {
		return invalid()
	}
	s.To = to
	boss, valid := validateMessage(msg, &s.Meta)
	if !valid {
		return invalid()
	}
	if boss {
		s.Failure = FailControlDispatchUnavailable
		s.Reason = "Boss typed control is unavailable until the durable Controller delivery authority is installed"
		return s
	}
	s.Meta.Fingerprint = fingerprint(to, true, msg)
	return s
}

// fingerprint digests what identifies a message's payload for
// deduplication (spec §5.2): {to, replyTo, expectsReply, content} as sent
// for the broker and the sender's outbox, or without to for a receiver.
func fingerprint(to string, withTo bool, msg []field) [32]byte {
	fp := sha256.New()
	var scratch [64]byte
	if withTo {
		fp.Write(AppendString(scratch[:0], to))
	}
	if raw, ok := lookup(msg, "replyTo"); ok {
		fp.Write([]byte{0, 'r'})
		fp.Write(raw)
	}
	if raw, ok := lookup(msg, "expectsReply"); ok {
		fp.Write([]byte{0, 'e'})
		fp.Write(raw)
	}
	content, _ := lookup(msg, "content")
	fp.Write([]byte{0, 'c'})
	fp.Write(content)
	var sum [32]byte
	fp.Sum(sum[:0])
	return sum
}

// MessageInfo is a message as a client reads it: the fields it acts on,
// decoded, and the raw JSON kept for storage and forwarding.
type MessageInfo struct {
	ID           string
	Timestamp    float64
	ReplyTo      string
	ExpectsReply bool
	Text         string
	Team         string // content.team when it is a string ("" = none)
	Attachments  []Attachment
	HasControl   bool   // content.control or a top-level control is present
	ControlType  string // content.control.type, if any
	// Control is content.control as sent (nil without one).
	Control json.RawMessage
	Raw     []byte
	fields  []field
}

// Fingerprint is the sender-side payload digest of the message sent to to
// (what the broker and the outbox compare).
func (m *MessageInfo) Fingerprint(to string) [32]byte { return fingerprint(to, true, m.fields) }

// ContentFingerprint is the receiver-side digest: {replyTo, expectsReply,
// content} (spec §5.2, last items).
func (m *MessageInfo) ContentFingerprint() [32]byte { return fingerprint("", false, m.fields) }

// PiFingerprint is the receiver-side fingerprint exactly as the Pi inbox
// stores it: JSON.stringify({replyTo, expectsReply, content}).
func (m *MessageInfo) PiFingerprint() string {
	out := []byte{'{'}
	sep := false
	for _, key := range []string{"replyTo", "expectsReply", "content"} {
		if raw, ok := lookup(m.fields, key); ok {
			if sep {
				out = append(out, ',')
			}
			out = append(out, '"')
			out = append(out, key...)
			out = append(out, '"', ':')
			out = append(out, raw...)
			sep = true
		}
	}
	return string(append(out, '}'))
}

// ErrInvalidMessage is returned by ParseMessage for JSON that is not a valid
// intercom message (spec §2.1).
var ErrInvalidMessage = errors.New("invalid intercom message")

// ParseMessage validates a message object with the broker's rules and
// decodes it. raw is copied.
func ParseMessage(raw []byte) (*MessageInfo, error) {
	if !validJSON(raw) {
		return nil, ErrInvalidMessage
	}
	raw = append([]byte(nil), trimSpace(raw)...)
	fields, ok := objectFields(raw, nil)
	if !ok {
		return nil, ErrInvalidMessage
	}
	var meta MessageMeta
	if _, valid := validateMessage(fields, &meta); !valid {
		return nil, ErrInvalidMessage
	}
	m := &MessageInfo{ID: meta.ID, ReplyTo: meta.ReplyTo, ExpectsReply: meta.ExpectsReply, Raw: raw, fields: fields}
	ts, _ := lookup(fields, "timestamp")
	m.Timestamp, _ = asNumber(ts)
	contentRaw, _ := lookup(fields, "content")
	content, _ := objectFields(contentRaw, nil)
	text, _ := lookup(content, "text")
	m.Text = decodeStringRaw(text)
	if team, ok := lookup(content, "team"); ok && kindOf(team) == kindString {
		m.Team = decodeStringRaw(team)
	}
	if att, ok := lookup(content, "attachments"); ok {
		_ = json.Unmarshal(att, &m.Attachments)
	}
	if ctl, ok := lookup(content, "control"); ok {
		m.HasControl = true
		m.Control = json.RawMessage(ctl)
		cf, _ := objectFields(ctl, nil)
		t, _ := lookup(cf, "type")
		m.ControlType, _ = asString(t)
	}
	if _, ok := lookup(fields, "control"); ok {
		m.HasControl = true
	}
	return m, nil
}

// validateMessage applies the reference broker's message rules (spec §2.1,
// §2.5, §6.7). boss reports a Boss typed control, which is valid but never
// dispatched. Unknown keys are allowed and forwarded, as the Pi broker does.
func validateMessage(msg []field, m *MessageMeta) (boss, ok bool) {
	raw, _ := lookup(msg, "id")
	if m.ID, ok = asString(raw); !ok || m.ID == "" || utf16Len(m.ID) > MaxMessageIDChars {
		return false, false
	}
	raw, _ = lookup(msg, "timestamp")
	if _, ok = asNumber(raw); !ok {
		return false, false
	}
	if raw, present := lookup(msg, "replyTo"); present {
		if m.ReplyTo, ok = asString(raw); !ok || m.ReplyTo == "" || utf16Len(m.ReplyTo) > MaxMessageIDChars {
			return false, false
		}
	}
	if raw, present := lookup(msg, "expectsReply"); present {
		v, isBool := asBool(raw)
		if !isBool {
			return false, false
		}
		m.ExpectsReply = v
	}
	contentRaw, _ := lookup(msg, "content")
	content, isObj := objectFields(contentRaw, make([]field, 0, 3))
	if !isObj {
		return false, false
	}
	raw, _ = lookup(content, "text")
	if kindOf(raw) != kindString || stringBytes(raw) > MaxTextBytes {
		return false, false
	}
	if raw, present := lookup(content, "attachments"); present {
		if !validAttachments(raw) {
			return false, false
		}
	}
	if raw, present := lookup(content, "control"); present {
		ctl, isCtl := objectFields(raw, nil)
		if !isCtl {
			return false, false
		}
		if m.ReplyTo != "" || m.ExpectsReply {
			return false, false // controls are never threaded (§2.5)
		}
		t, _ := lookup(ctl, "type")
		if ts, isStr := asString(t); isStr && strings.HasPrefix(ts, "boss.") {
			// A Boss control is refused as undispatchable only when it is a
			// well-formed envelope correlated to this message; anything else
			// under the boss. prefix is an invalid message (reference broker).
			if !validBossEnvelope(ctl, m.ID) {
				return false, false
			}
			boss = true
		} else if !validControl(ctl) {
			return false, false
		}
	}

	// The Claude shape carries Boss control at the top level (spec §9.5).
	if _, present := lookup(msg, "control"); present {
		boss = true
	}
	return boss, true
}

func validAttachments(raw []byte) bool {
	elems, ok := arrayElems(raw)
	if !ok || len(elems) > MaxAttachments {
		return false
	}
	for _, el := range elems {
		a, ok := objectFields(el, nil)
		if !ok {
			return false
		}
		t, _ := lookup(a, "type")
		switch ts, _ := asString(t); ts {
		case "file", "snippet", "context":
		default:
			return false
		}
		n, _ := lookup(a, "name")
		if name, ok := asString(n); !ok || utf16Len(name) > MaxAttachmentNameChars {
			return false
		}
		c, _ := lookup(a, "content")
		if kindOf(c) != kindString || stringBytes(c) > MaxAttachmentContentBytes {
			return false
		}
		if l, present := lookup(a, "language"); present && kindOf(l) != kindString {
			return false
		}
	}
	return true
}

// bossControlTypes are the Boss control envelope types of the core
// contract (boss-wire BOSS_CONTROL_TYPES).
var bossControlTypes = map[string]bool{
	"boss.assignment.created": true, "boss.assignment.accepted": true, "boss.assignment.checkpoint": true,
	"boss.assignment.submitted": true, "boss.assignment.rejected": true, "boss.assignment.cancelled": true,
	"boss.staffing.requested": true, "boss.staffing.resolved": true, "boss.review.requested": true,
	"boss.review.submitted": true, "boss.council.requested": true, "boss.council.submitted": true,
	"boss.proof.submitted": true, "boss.worker.health": true, "boss.worker.blocked": true,
	"boss.worker.failed": true, "boss.worker.notice": true, "boss.worker.notice_delivery_failed": true,
	"boss.decision.required": true,
}

var bossEnvelopeKeys = []string{"type", "version", "messageId", "bossRunId", "participantId",
	"bindingEpoch", "idempotencyKey", "payload", "causationId", "replyTo"}

// validBossEnvelope checks a Boss control envelope (exact keys, known type,
// version 1, non-empty ids, integral epoch, canonical payload) and its
// correlation with the carrying message's id.
func validBossEnvelope(ctl []field, messageID string) bool {
	if !exactKeys(ctl, bossEnvelopeKeys, bossEnvelopeKeys[:8]) {
		return false
	}
	t, _ := lookup(ctl, "type")
	if ts, _ := asString(t); !bossControlTypes[ts] {
		return false
	}
	if v, _ := lookup(ctl, "version"); string(v) != "1" {
		return false
	}
	for _, key := range []string{"messageId", "bossRunId", "participantId", "idempotencyKey", "causationId", "replyTo"} {
		raw, present := lookup(ctl, key)
		if !present && (key == "causationId" || key == "replyTo") {
			continue
		}
		if s, ok := asString(raw); !ok || s == "" {
			return false
		}
	}
	if id, _ := lookup(ctl, "messageId"); decodeStringRaw(id) != messageID {
		return false
	}
	epoch, _ := lookup(ctl, "bindingEpoch")
	if !safeInteger(epoch) {
		return false
	}
	payload, _ := lookup(ctl, "payload")
	return canonicalValue(payload)
}

func safeInteger(raw []byte) bool {
	f, ok := asNumber(raw)
	return ok && f == math.Trunc(f) && math.Abs(f) <= 1<<53-1 && !(f == 0 && math.Signbit(f)) && f >= 0
}

// canonicalValue reports whether raw is a canonical wire value of the core
// contract: numbers are safe integers and never -0.
func canonicalValue(raw []byte) bool {
	switch kindOf(raw) {
	case kindNumber:
		f, ok := asNumber(raw)
		return ok && f == math.Trunc(f) && math.Abs(f) <= 1<<53-1 && !(f == 0 && raw[0] == '-')
	case kindObject:
		fields, _ := objectFields(raw, nil)
		for _, f := range fields {
			if !canonicalValue(f.raw) {
				return false
			}
		}
	case kindArray:
		elems, _ := arrayElems(raw)
		for _, e := range elems {
			if !canonicalValue(e) {
				return false
			}
		}
	}
	return true
}

// validControl checks a generic (non-Boss) control envelope (spec §2.5).
func validControl(ctl []field) bool {
	t, _ := lookup(ctl, "type")
	ts, ok := asString(t)
	if !ok || ts == "" || utf16Len(ts) > MaxControlTypeChars || !controlTypeSyntax(ts) {
		return false
	}
	v, _ := lookup(ctl, "version")
	ver, ok := asNumber(v)
	if !ok || ver < 1 || ver != math.Trunc(ver) || ver > 1<<53-1 {
		return false
	}
	if d, present := lookup(ctl, "data"); present {
		if len(d) > MaxControlDataBytes && compactLen(d) > MaxControlDataBytes {
			return false
		}
	}
	return true
}

// compactLen is the length of raw without insignificant whitespace, which
// is what JSON.stringify of the parsed value would measure.
func compactLen(raw []byte) int {
	var out bytes.Buffer
	if err := json.Compact(&out, raw); err != nil {
		return len(raw)
	}
	return out.Len()
}

func controlTypeSyntax(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if i == 0 && !alnum {
			return false
		}
		if !alnum && c != '.' && c != '_' && c != ':' && c != '/' && c != '-' {
			return false
		}
	}
	return true
}

// stringBytes is the UTF-8 length of a JSON string literal's decoded value:
// its own length when it holds no escape and is valid UTF-8 (invalid bytes
// decode to U+FFFD).
func stringBytes(raw []byte) int {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return len(inner)
	}
	return len(decodeStringRaw(raw))
}

// Ack is a decoded message_received frame.
type Ack struct{ DeliveryID string }

// DecodeMessageReceived validates a message_received frame.
func (e *Envelope) DecodeMessageReceived() (Ack, error) {
	raw, _ := e.get("deliveryId")
	id, ok := asString(raw)
	if !ok {
		return Ack{}, invalidRequest("Invalid message_received message")
	}
	return Ack{DeliveryID: id}, nil
}

// Reject is a decoded message_rejected frame.
type Reject struct {
	DeliveryID string
	Reason     string
}

// DecodeMessageRejected validates a message_rejected frame: the only code a
// receiver may send is CONFLICTING_MESSAGE_ID (spec §2.1).
func (e *Envelope) DecodeMessageRejected() (Reject, error) {
	bad := invalidRequest("Invalid message_rejected message")
	raw, _ := e.get("deliveryId")
	id, ok := asString(raw)
	if !ok {
		return Reject{}, bad
	}
	raw, _ = e.get("code")
	if code, ok := asString(raw); !ok || code != string(FailConflictingMessageID) {
		return Reject{}, bad
	}
	raw, _ = e.get("reason")
	reason, ok := asString(raw)
	if !ok || utf16Len(reason) > MaxRejectReasonChars {
		return Reject{}, bad
	}
	return Reject{DeliveryID: id, Reason: reason}, nil
}

// AskControl is a decoded defer_ask or cancel_ask frame.
type AskControl struct {
	RequestID string
	MessageID string
}

// DecodeAskControl validates a defer_ask or cancel_ask frame.
func (e *Envelope) DecodeAskControl() (AskControl, error) {
	bad := invalidRequest("Invalid %s message", e.Type)
	raw, _ := e.get("messageId")
	mid, ok := asString(raw)
	if !ok || utf16Len(mid) > MaxMessageIDChars {
		return AskControl{}, bad
	}
	raw, _ = e.get("requestId")
	rid, ok := asString(raw)
	if !ok || utf16Len(rid) > MaxMessageIDChars {
		return AskControl{}, bad
	}
	return AskControl{RequestID: rid, MessageID: mid}, nil
}

// Presence is a decoded presence frame; each field is applied only when set.
type Presence struct {
	Name, Status, Model          string
	HasName, HasStatus, HasModel bool
}

// DecodePresence validates a presence frame.
func (e *Envelope) DecodePresence() (Presence, error) {
	var p Presence
	var ok bool
	if raw, present := e.get("name"); present {
		if p.Name, ok = asString(raw); !ok || utf16Len(p.Name) > MaxNameChars {
			return p, invalidRequest("Invalid presence name")
		}
		p.HasName = true
	}
	if raw, present := e.get("status"); present {
		if p.Status, ok = asString(raw); !ok || utf16Len(p.Status) > MaxStatusChars {
			return p, invalidRequest("Invalid presence status")
		}
		p.HasStatus = true
	}
	if raw, present := e.get("model"); present {
		if p.Model, ok = asString(raw); !ok || utf16Len(p.Model) > MaxModelChars {
			return p, invalidRequest("Invalid presence model")
		}
		p.HasModel = true
	}
	return p, nil
}

// DecodeUnregister returns the preserveAsks flag of an unregister frame.
func (e *Envelope) DecodeUnregister() (preserveAsks bool, err error) {
	raw, present := e.get("preserveAsks")
	if !present {
		return false, nil
	}
	v, ok := asBool(raw)
	if !ok {
		return false, invalidRequest("Invalid unregister preserveAsks value")
	}
	return v, nil
}
