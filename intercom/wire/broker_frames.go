package wire

import (
	"fmt"
)

// Broker frame types (spec §2.2).
const (
	TypeHealthOK         = "health_ok"
	TypeRegistered       = "registered"
	TypeSessions         = "sessions"
	TypeMessage          = "message"
	TypeDeliveryAccepted = "delivery_accepted"
	TypeDelivered        = "delivered"
	TypeDeliveryFailed   = "delivery_failed"
	TypePresenceUpdate   = "presence_update"
	TypeSessionJoined    = "session_joined"
	TypeSessionLeft      = "session_left"
	TypeAskDeferred      = "ask_deferred"
	TypeAskCancelled     = "ask_cancelled"
	TypeAskControlResult = "ask_control_result"
	TypeError            = "error"
)

// RemoteAccessJSON is the exact `remoteAccess` object of health_ok (spec
// §2.2). Every TypeScript spawner treats a broker whose health_ok differs as
// incompatible, so it is sent even though this broker has no remote gateway.
const RemoteAccessJSON = `{"feature":"remote-access-v1","policySemanticsVersion":2,"policySemanticsHash":"f3b00e503631bc91123aedfbcf1df72cc9913e1893c09728b2c598f3dcdfdfe0"}`

// Remote access contract values inside RemoteAccessJSON.
const (
	RemoteAccessFeature    = "remote-access-v1"
	PolicySemanticsVersion = 2
	PolicySemanticsHash    = "f3b00e503631bc91123aedfbcf1df72cc9913e1893c09728b2c598f3dcdfdfe0"
)

// SessionInfo is a session as the broker describes it (spec §2.3). The
// broker builds it; clients never supply trustedLocal or origin, and the
// runtime instance id and scope are never part of it.
type SessionInfo struct {
	ID           string
	Name         string
	HasName      bool
	Cwd          string
	Model        string
	PID          float64
	StartedAt    float64 // epoch ms, sender clock
	LastActivity float64 // epoch ms
	Status       string
	HasStatus    bool
	TrustedLocal bool
	Origin       string // "local" or "remote"
	// RemoteHostID names the host of a remote session (a federated host's
	// node name); "" for local sessions, and then it is not emitted.
	RemoteHostID string
	// Trailing lists "name" and/or "status" when presence added them after
	// registration, in the order added. The reference broker's objects then
	// carry them after origin (JavaScript property order), and so do we.
	Trailing []string
}

func (s *SessionInfo) trailing(key string) bool {
	for _, k := range s.Trailing {
		if k == key {
			return true
		}
	}
	return false
}

// AppendJSON appends the session in the reference key order:
// id, name?, cwd, model, pid, startedAt, lastActivity, status?, trustedLocal,
// origin, remoteHostId?, then any Trailing keys.
func (s *SessionInfo) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = AppendString(dst, s.ID)
	if s.HasName && !s.trailing("name") {
		dst = append(dst, `,"name":`...)
		dst = AppendString(dst, s.Name)
	}
	dst = append(dst, `,"cwd":`...)
	dst = AppendString(dst, s.Cwd)
	dst = append(dst, `,"model":`...)
	dst = AppendString(dst, s.Model)
	dst = append(dst, `,"pid":`...)
	dst = AppendNumber(dst, s.PID)
	dst = append(dst, `,"startedAt":`...)
	dst = AppendNumber(dst, s.StartedAt)
	dst = append(dst, `,"lastActivity":`...)
	dst = AppendNumber(dst, s.LastActivity)
	if s.HasStatus && !s.trailing("status") {
		dst = append(dst, `,"status":`...)
		dst = AppendString(dst, s.Status)
	}
	if s.TrustedLocal {
		dst = append(dst, `,"trustedLocal":true`...)
	} else {
		dst = append(dst, `,"trustedLocal":false`...)
	}
	dst = append(dst, `,"origin":`...)
	dst = AppendString(dst, s.Origin)
	if s.RemoteHostID != "" {
		dst = append(dst, `,"remoteHostId":`...)
		dst = AppendString(dst, s.RemoteHostID)
	}
	for _, k := range s.Trailing {
		dst = append(dst, ',', '"')
		dst = append(dst, k...)
		dst = append(dst, '"', ':')
		if k == "name" {
			dst = AppendString(dst, s.Name)
		} else {
			dst = AppendString(dst, s.Status)
		}
	}
	return append(dst, '}')
}

// The Append* functions below each append one complete broker frame
// (length prefix included) to dst, with the exact keys and key order of
// spec §2.2. Arguments named info are SessionInfo JSON from AppendJSON;
// message is the raw message JSON a sender supplied.

// AppendHealthOK appends a health_ok frame. endpoint is "local" or "remote".
func AppendHealthOK(dst []byte, requestID, endpoint string) []byte {
	dst, start := beginFrame(dst)
	dst = append(dst, `{"type":"health_ok","requestId":`...)
	dst = AppendString(dst, requestID)
	dst = append(dst, `,"protocol":"pi-intercom","version":4,"endpoint":`...)
	dst = AppendString(dst, endpoint)
	dst = append(dst, `,"remoteAccess":`...)
	dst = append(dst, RemoteAccessJSON...)
	dst = append(dst, '}')
	return endFrame(dst, start)
}

// AppendRegistered appends an ordinary registered frame (4 keys).
func AppendRegistered(dst []byte, sessionID string) []byte {
	dst, start := beginFrame(dst)
	dst = append(dst, `{"type":"registered","sessionId":`...)
	dst = AppendString(dst, sessionID)
	dst = append(dst, `,"protocol":"pi-intercom","version":4}`...)
	return endFrame(dst, start)
}

// AppendSessions appends a sessions frame listing infos in order.
func AppendSessions(dst []byte, requestID string, infos [][]byte) []byte {
	dst, start := beginFrame(dst)
	dst = append(dst, `{"type":"sessions","requestId":`...)
	dst = AppendString(dst, requestID)
	dst = append(dst, `,"sessions":[`...)
	for i, info := range infos {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, info...)
	}
	dst = append(dst, "]}"...)
	return endFrame(dst, start)
}

// MessagePayloadSize is the payload size, in bytes, of the frame
// AppendMessage writes for a delivery id of idLen bytes (an id that needs
// no escaping, as the broker's UUIDs), from and message: a delivery whose
// frame would be over MaxFrameBytes cannot reach any reader.
func MessagePayloadSize(idLen int, from, message []byte) int {
	return len(`{"type":"message","deliveryId":"","from":,"message":}`) + idLen + len(from) + len(message)
}

// AppendMessage appends a message delivery frame.
func AppendMessage(dst []byte, deliveryID string, from, message []byte) []byte {
	dst, start := beginFrame(dst)
	dst = append(dst, `{"type":"message","deliveryId":`...)
	dst = AppendString(dst, deliveryID)
	dst = append(dst, `,"from":`...)
	dst = append(dst, from...)
	dst = append(dst, `,"message":`...)
	dst = append(dst, message...)
	dst = append(dst, '}')
	return endFrame(dst, start)
}

func appendDeliveryIDs(dst []byte, typ, messageID, deliveryID string) []byte {
	dst, start := beginFrame(dst)
	dst = append(dst, `{"type":"`...)
	dst = append(dst, typ...)
	dst = append(dst, `","messageId":`...)
	dst = AppendString(dst, messageID)
	dst = append(dst, `,"deliveryId":`...)
	dst = AppendString(dst, deliveryID)
	dst = append(dst, '}')
	return endFrame(dst, start)
}

// AppendDeliveryAccepted appends a delivery_accepted frame.
func AppendDeliveryAccepted(dst []byte, messageID, deliveryID string) []byte {
	return appendDeliveryIDs(dst, TypeDeliveryAccepted, messageID, deliveryID)
}

// AppendDelivered appends a delivered frame.
func AppendDelivered(dst []byte, messageID, deliveryID string) []byte {
	return appendDeliveryIDs(dst, TypeDelivered, messageID, deliveryID)
}

// AppendDeliveryFailed appends a delivery_failed frame. accepted must say
// whether delivery_accepted was sent for this message (spec §2.4).
func AppendDeliveryFailed(dst []byte, messageID string, accepted bool, code FailureCode, reason string) []byte {
	dst, start := beginFrame(dst)
	dst = append(dst, `{"type":"delivery_failed","messageId":`...)
	dst = AppendString(dst, messageID)
	if accepted {
		dst = append(dst, `,"accepted":true,"code":`...)
	} else {
		dst = append(dst, `,"accepted":false,"code":`...)
	}
	dst = AppendString(dst, string(code))
	dst = append(dst, `,"reason":`...)
	dst = AppendString(dst, reason)
	dst = append(dst, '}')
	return endFrame(dst, start)
}

func appendSessionFrame(dst []byte, typ string, info []byte) []byte {
	dst, start := beginFrame(dst)
	dst = append(dst, `{"type":"`...)
	dst = append(dst, typ...)
	dst = append(dst, `","session":`...)
	dst = append(dst, info...)
	dst = append(dst, '}')
	return endFrame(dst, start)
}

// AppendPresenceUpdate appends a presence_update frame.
func AppendPresenceUpdate(dst []byte, info []byte) []byte {
	return appendSessionFrame(dst, TypePresenceUpdate, info)
}

// AppendSessionJoined appends a session_joined frame.
func AppendSessionJoined(dst []byte, info []byte) []byte {
	return appendSessionFrame(dst, TypeSessionJoined, info)
}

// AppendSessionLeft appends a session_left frame.
func AppendSessionLeft(dst []byte, sessionID string) []byte {
	dst, start := beginFrame(dst)
	dst = append(dst, `{"type":"session_left","sessionId":`...)
	dst = AppendString(dst, sessionID)
	dst = append(dst, '}')
	return endFrame(dst, start)
}

// AppendAskDeferred appends an ask_deferred frame; fromSessionID is the other
// party of the edge (spec §2.2).
func AppendAskDeferred(dst []byte, messageID, fromSessionID string) []byte {
	dst, start := beginFrame(dst)
	dst = append(dst, `{"type":"ask_deferred","messageId":`...)
	dst = AppendString(dst, messageID)
	dst = append(dst, `,"fromSessionId":`...)
	dst = AppendString(dst, fromSessionID)
	dst = append(dst, '}')
	return endFrame(dst, start)
}

// AppendAskCancelled appends an ask_cancelled frame.
func AppendAskCancelled(dst []byte, messageID, fromSessionID string, reason AskCancelReason) []byte {
	dst, start := beginFrame(dst)
	dst = append(dst, `{"type":"ask_cancelled","messageId":`...)
	dst = AppendString(dst, messageID)
	dst = append(dst, `,"fromSessionId":`...)
	dst = AppendString(dst, fromSessionID)
	dst = append(dst, `,"reason":`...)
	dst = AppendString(dst, string(reason))
	dst = append(dst, '}')
	return endFrame(dst, start)
}

// AppendAskControlResult appends an ask_control_result frame; action is
// "defer" or "cancel".
func AppendAskControlResult(dst []byte, requestID, action, messageID string, applied bool) []byte {
	dst, start := beginFrame(dst)
	dst = append(dst, `{"type":"ask_control_result","requestId":`...)
	dst = AppendString(dst, requestID)
	dst = append(dst, `,"action":`...)
	dst = AppendString(dst, action)
	dst = append(dst, `,"messageId":`...)
	dst = AppendString(dst, messageID)
	if applied {
		dst = append(dst, `,"applied":true}`...)
	} else {
		dst = append(dst, `,"applied":false}`...)
	}
	return endFrame(dst, start)
}

// AppendError appends an error frame.
func AppendError(dst []byte, code ErrorCode, text string) []byte {
	dst, start := beginFrame(dst)
	dst = append(dst, `{"type":"error","code":`...)
	dst = AppendString(dst, string(code))
	dst = append(dst, `,"error":`...)
	dst = AppendString(dst, text)
	dst = append(dst, '}')
	return endFrame(dst, start)
}

// BrokerFrame is a decoded broker frame. Only the fields of its Type are set.
type BrokerFrame struct {
	Type string

	RequestID string // health_ok, sessions, ask_control_result
	SessionID string // registered, session_left

	// health_ok and registered.
	Protocol     string
	Version      float64
	Endpoint     string // health_ok
	RemoteAccess []byte // health_ok, raw

	Sessions []SessionInfo // sessions
	Session  SessionInfo   // presence_update, session_joined

	DeliveryID string      // message, delivery_accepted, delivered
	MessageID  string      // delivery frames and ask frames
	From       SessionInfo // message
	FromRaw    []byte      // message: the from object as received
	Message    []byte      // message, raw as received

	Accepted bool   // delivery_failed
	Code     string // delivery_failed (FailureCode), error (ErrorCode)
	Reason   string // delivery_failed, ask_cancelled
	Error    string // error
	Action   string // ask_control_result
	Applied  bool   // ask_control_result
	FromID   string // ask_deferred, ask_cancelled: the other party
}

// FrameSchemaError reports a broker frame that breaks its exact schema.
type FrameSchemaError struct {
	Type   string
	Reason string
}

func (e *FrameSchemaError) Error() string {
	return fmt.Sprintf("invalid %s frame from broker: %s", e.Type, e.Reason)
}

var brokerFrameKeys = map[string][]string{
	TypeHealthOK:         {"type", "requestId", "protocol", "version", "endpoint", "remoteAccess"},
	TypeRegistered:       {"type", "sessionId", "protocol", "version"},
	TypeSessions:         {"type", "requestId", "sessions"},
	TypeMessage:          {"type", "deliveryId", "from", "message"},
	TypeDeliveryAccepted: {"type", "messageId", "deliveryId"},
	TypeDelivered:        {"type", "messageId", "deliveryId"},
	TypeDeliveryFailed:   {"type", "messageId", "accepted", "code", "reason"},
	TypePresenceUpdate:   {"type", "session"},
	TypeSessionJoined:    {"type", "session"},
	TypeSessionLeft:      {"type", "sessionId"},
	TypeAskDeferred:      {"type", "messageId", "fromSessionId"},
	TypeAskCancelled:     {"type", "messageId", "fromSessionId", "reason"},
	TypeAskControlResult: {"type", "requestId", "action", "messageId", "applied"},
	TypeError:            {"type", "code", "error"},
}

// KeyOrder returns the member names of a JSON object in document order; it
// lets tests and clients check exact key sets and order.
func KeyOrder(payload []byte) ([]string, error) {
	if !validJSON(payload) {
		return nil, ErrMalformedJSON
	}
	fields, ok := objectFields(payload, nil)
	if !ok {
		return nil, fmt.Errorf("not a JSON object")
	}
	keys := make([]string, len(fields))
	for i, f := range fields {
		keys[i] = f.key
	}
	return keys, nil
}

// DecodeBrokerFrame decodes a broker frame as strictly as the Claude/Codex
// client does (spec §1.3, §2.2): exactly the keys of its type, every value
// of the right type. Unknown frame types are errors.
func DecodeBrokerFrame(payload []byte) (*BrokerFrame, error) {
	if !validJSON(payload) {
		return nil, ErrMalformedJSON
	}
	fields, ok := objectFields(payload, make([]field, 0, 8))
	if !ok {
		return nil, &FrameSchemaError{Type: "?", Reason: "not an object"}
	}
	f := &BrokerFrame{}
	raw, _ := lookup(fields, "type")
	if f.Type, ok = asString(raw); !ok {
		return nil, &FrameSchemaError{Type: "?", Reason: "missing type"}
	}
	keys, known := brokerFrameKeys[f.Type]
	if !known {
		return nil, &FrameSchemaError{Type: f.Type, Reason: "unknown frame type"}
	}
	if len(fields) != len(keys) || !exactKeys(fields, keys, keys) {
		return nil, &FrameSchemaError{Type: f.Type, Reason: "unexpected key set"}
	}
	bad := func(key string) (*BrokerFrame, error) {
		return nil, &FrameSchemaError{Type: f.Type, Reason: "bad " + key}
	}
	str := func(key string, dst *string) bool {
		raw, _ := lookup(fields, key)
		s, ok := asString(raw)
		*dst = s
		return ok
	}
	switch f.Type {
	case TypeHealthOK, TypeRegistered:
		if f.Type == TypeHealthOK {
			if !str("requestId", &f.RequestID) {
				return bad("requestId")
			}
			if !str("endpoint", &f.Endpoint) {
				return bad("endpoint")
			}
			f.RemoteAccess, _ = lookup(fields, "remoteAccess")
			if kindOf(f.RemoteAccess) != kindObject {
				return bad("remoteAccess")
			}
		} else if !str("sessionId", &f.SessionID) {
			return bad("sessionId")
		}
		if !str("protocol", &f.Protocol) {
			return bad("protocol")
		}
		raw, _ := lookup(fields, "version")
		if f.Version, ok = asNumber(raw); !ok {
			return bad("version")
		}
	case TypeSessions:
		if !str("requestId", &f.RequestID) {
			return bad("requestId")
		}
		raw, _ := lookup(fields, "sessions")
		elems, ok := arrayElems(raw)
		if !ok {
			return bad("sessions")
		}
		f.Sessions = make([]SessionInfo, len(elems))
		for i, el := range elems {
			if err := decodeSessionInfo(el, &f.Sessions[i]); err != nil {
				return bad("sessions: " + err.Error())
			}
		}
	case TypeMessage:
		if !str("deliveryId", &f.DeliveryID) {
			return bad("deliveryId")
		}
		raw, _ := lookup(fields, "from")
		if err := decodeSessionInfo(raw, &f.From); err != nil {
			return bad("from: " + err.Error())
		}
		f.FromRaw = raw
		f.Message, _ = lookup(fields, "message")
		msg, ok := objectFields(f.Message, nil)
		if !ok {
			return bad("message")
		}
		var meta MessageMeta
		if _, valid := validateMessage(msg, &meta); !valid {
			return bad("message")
		}
		f.MessageID = meta.ID
	case TypeDeliveryAccepted, TypeDelivered:
		if !str("messageId", &f.MessageID) || !str("deliveryId", &f.DeliveryID) {
			return bad("ids")
		}
	case TypeDeliveryFailed:
		raw, _ := lookup(fields, "accepted")
		if f.Accepted, ok = asBool(raw); !ok {
			return bad("accepted")
		}
		if !str("messageId", &f.MessageID) || !str("code", &f.Code) || !str("reason", &f.Reason) {
			return bad("fields")
		}
	case TypePresenceUpdate, TypeSessionJoined:
		raw, _ := lookup(fields, "session")
		if err := decodeSessionInfo(raw, &f.Session); err != nil {
			return bad("session: " + err.Error())
		}
	case TypeSessionLeft:
		if !str("sessionId", &f.SessionID) {
			return bad("sessionId")
		}
	case TypeAskDeferred, TypeAskCancelled:
		if !str("messageId", &f.MessageID) || !str("fromSessionId", &f.FromID) {
			return bad("ids")
		}
		if f.Type == TypeAskCancelled && !str("reason", &f.Reason) {
			return bad("reason")
		}
	case TypeAskControlResult:
		if !str("requestId", &f.RequestID) || !str("action", &f.Action) || !str("messageId", &f.MessageID) {
			return bad("fields")
		}
		if f.Action != "defer" && f.Action != "cancel" {
			return bad("action")
		}
		raw, _ := lookup(fields, "applied")
		if f.Applied, ok = asBool(raw); !ok {
			return bad("applied")
		}
	case TypeError:
		if !str("code", &f.Code) || !str("error", &f.Error) {
			return bad("fields")
		}
	}
	return f, nil
}

var sessionInfoKeys = []string{"id", "cwd", "model", "pid", "startedAt", "lastActivity",
	"name", "status", "peerUid", "trustedLocal", "origin", "remoteHostId", "parentSessionId",
	"rootSessionId", "generation", "canDelegate", "depth", "maxDepth", "maxChildren", "boss"}

// DecodeSessionInfo decodes a SessionInfo object as strictly as
// DecodeBrokerFrame does inside a frame. Trailing stays empty: name and
// status are emitted again in their reference positions.
func DecodeSessionInfo(raw []byte) (SessionInfo, error) {
	var s SessionInfo
	if !validJSON(raw) {
		return s, ErrMalformedJSON
	}
	err := decodeSessionInfo(raw, &s)
	return s, err
}

func decodeSessionInfo(raw []byte, s *SessionInfo) error {
	fields, ok := objectFields(raw, nil)
	if !ok {
		return fmt.Errorf("not an object")
	}
	if !exactKeys(fields, sessionInfoKeys, sessionInfoKeys[:6]) {
		return fmt.Errorf("unexpected key set")
	}
	strField := func(key string, dst *string) bool {
		r, _ := lookup(fields, key)
		v, ok := asString(r)
		*dst = v
		return ok
	}
	numField := func(key string, dst *float64) bool {
		r, _ := lookup(fields, key)
		v, ok := asNumber(r)
		*dst = v
		return ok
	}
	if !strField("id", &s.ID) || !strField("cwd", &s.Cwd) || !strField("model", &s.Model) ||
		!numField("pid", &s.PID) || !numField("startedAt", &s.StartedAt) || !numField("lastActivity", &s.LastActivity) {
		return fmt.Errorf("bad required field")
	}
	if _, present := lookup(fields, "name"); present {
		if !strField("name", &s.Name) {
			return fmt.Errorf("bad name")
		}
		s.HasName = true
	}
	if _, present := lookup(fields, "status"); present {
		if !strField("status", &s.Status) {
			return fmt.Errorf("bad status")
		}
		s.HasStatus = true
	}
	if r, present := lookup(fields, "trustedLocal"); present {
		if s.TrustedLocal, ok = asBool(r); !ok {
			return fmt.Errorf("bad trustedLocal")
		}
	}
	if _, present := lookup(fields, "origin"); present {
		if !strField("origin", &s.Origin) || (s.Origin != "local" && s.Origin != "remote") {
			return fmt.Errorf("bad origin")
		}
	}
	if _, present := lookup(fields, "remoteHostId"); present {
		if !strField("remoteHostId", &s.RemoteHostID) {
			return fmt.Errorf("bad remoteHostId")
		}
	}
	return nil
}
