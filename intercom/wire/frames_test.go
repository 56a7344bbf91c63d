package wire

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const validSession = `{"cwd":"/repo","model":"m","pid":1,"startedAt":2,"lastActivity":3}`

func register(extra string) string {
	return `{"type":"register","protocol":"pi-intercom","version":4,"session":` + validSession + extra + `}`
}

func envelope(t *testing.T, s string) *Envelope {
	t.Helper()
	env, err := ParseEnvelope([]byte(s))
	require.NoError(t, err)
	return env
}

func protoCode(t *testing.T, err error) (ErrorCode, string) {
	t.Helper()
	var pe *ProtocolError
	require.True(t, errors.As(err, &pe), "want ProtocolError, got %v", err)
	return pe.Code, pe.Message
}

func TestParseEnvelope(t *testing.T) {
	_, err := ParseEnvelope([]byte(`{"type":`))
	require.ErrorIs(t, err, ErrMalformedJSON)
	for _, s := range []string{`[]`, `"x"`, `{}`, `{"type":1}`, `null`, `{"type":null}`} {
		_, err := ParseEnvelope([]byte(s))
		code, msg := protoCode(t, err)
		require.Equal(t, CodeInvalidRequest, code, s)
		require.Equal(t, "Invalid client message", msg, s)
	}
	env := envelope(t, `{"type":"bogus"}`)
	require.Equal(t, "bogus", env.Type)
}

func TestDecodeRegister(t *testing.T) {
	reg, err := envelope(t, register(`,"sessionId":"s1","scopeId":"Scope_AAAAAAAAAA"`)).DecodeRegister()
	require.NoError(t, err)
	require.Equal(t, "s1", reg.SessionID)
	require.True(t, reg.SessionIDValid)
	require.Equal(t, "Scope_AAAAAAAAAA", reg.Scope)
	require.Equal(t, "/repo", reg.Session.Cwd)

	reg, err = envelope(t, register(`,"scopeId":""`)).DecodeRegister()
	require.NoError(t, err)
	require.Empty(t, reg.Scope, `"" is unscoped`)

	cases := []struct {
		name, frame string
		code        ErrorCode
		msg         string
	}{
		{"unknown outer key", register(`,"bogus":1`), CodeInvalidRequest, MsgInvalidRegister},
		{"missing session", `{"type":"register","protocol":"pi-intercom","version":4}`, CodeInvalidRequest, MsgInvalidRegister},
		{"v3", `{"type":"register","protocol":"pi-intercom","version":3,"session":` + validSession + `}`, CodeProtocolMismatch, MsgProtocolMismatch},
		{"v3 with bad scope", `{"type":"register","protocol":"pi-intercom","version":3,"session":` + validSession + `,"scopeId":"x"}`, CodeProtocolMismatch, MsgProtocolMismatch},
		{"other protocol", `{"type":"register","protocol":"other","version":4,"session":` + validSession + `}`, CodeProtocolMismatch, MsgProtocolMismatch},
		{"string version", `{"type":"register","protocol":"pi-intercom","version":"4","session":` + validSession + `}`, CodeProtocolMismatch, MsgProtocolMismatch},
		{"bad scope", register(`,"scopeId":"short"`), CodeInvalidRequest, MsgRegistrationInvalid},
		{"non-string scope", register(`,"scopeId":12345678901234567`), CodeInvalidRequest, MsgRegistrationInvalid},
		{"bad scope and bad session", `{"type":"register","protocol":"pi-intercom","version":4,"session":{},"scopeId":"no"}`, CodeInvalidRequest, MsgRegistrationInvalid},
		{"session peerUid", strings.Replace(register(""), `"lastActivity":3`, `"lastActivity":3,"peerUid":0`, 1), CodeInvalidRequest, MsgInvalidRegister},
		{"session trustedLocal", strings.Replace(register(""), `"lastActivity":3`, `"lastActivity":3,"trustedLocal":true`, 1), CodeInvalidRequest, MsgInvalidRegister},
		{"session groups", strings.Replace(register(""), `"lastActivity":3`, `"lastActivity":3,"groups":[]`, 1), CodeInvalidRequest, MsgInvalidRegister},
		{"empty cwd", strings.Replace(register(""), `"/repo"`, `""`, 1), CodeInvalidRequest, MsgInvalidRegister},
		{"string pid", strings.Replace(register(""), `"pid":1`, `"pid":"1"`, 1), CodeInvalidRequest, MsgInvalidRegister},
		{"null name", strings.Replace(register(""), `"lastActivity":3`, `"lastActivity":3,"name":null`, 1), CodeInvalidRequest, MsgInvalidRegister},
		{"long name", strings.Replace(register(""), `"lastActivity":3`, `"lastActivity":3,"name":"`+strings.Repeat("n", 257)+`"`, 1), CodeInvalidRequest, MsgInvalidRegister},
		{"empty runtime id", strings.Replace(register(""), `"lastActivity":3`, `"lastActivity":3,"runtimeInstanceId":""`, 1), CodeInvalidRequest, MsgInvalidRegister},
		{"session array", `{"type":"register","protocol":"pi-intercom","version":4,"session":[]}`, CodeInvalidRequest, MsgInvalidRegister},
		{"boss", strings.Replace(register(""), `"lastActivity":3`, `"lastActivity":3,"boss":{}`, 1), CodeBossFeatureUnavailable, ""},
	}
	for _, c := range cases {
		_, err := envelope(t, c.frame).DecodeRegister()
		code, msg := protoCode(t, err)
		require.Equal(t, c.code, code, c.name)
		if c.msg != "" {
			require.Equal(t, c.msg, msg, c.name)
		}
		require.NotContains(t, msg, "Scope_", c.name)
		require.NotContains(t, msg, "short", c.name)
	}

	// 256 name chars of astral plane = 512 UTF-16 units: too long.
	_, err = envelope(t, strings.Replace(register(""), `"lastActivity":3`, `"lastActivity":3,"name":"`+strings.Repeat("🚀", 129)+`"`, 1)).DecodeRegister()
	require.Error(t, err)

	for _, id := range []string{`""`, `"   "`, `7`, `null`} {
		reg, err := envelope(t, register(`,"sessionId":`+id)).DecodeRegister()
		require.NoError(t, err, "sessionId %s is refused later, by the broker", id)
		require.True(t, reg.HasSessionID)
		require.False(t, reg.SessionIDValid)
	}
}

func send(to, msg string) string { return `{"type":"send","to":` + to + `,"message":` + msg + `}` }

func TestDecodeSend(t *testing.T) {
	msg := `{"id":"m1","timestamp":1,"content":{"text":"hi"},"extra":{"kept":true}}`
	s := envelope(t, send(`"beta"`, msg)).DecodeSend()
	require.Empty(t, s.Failure)
	require.Equal(t, "beta", s.To)
	require.Equal(t, msg, string(s.Message), "message kept byte for byte, unknown keys included")
	require.Equal(t, "m1", s.MessageID)

	same := envelope(t, send(`"beta"`, msg)).DecodeSend()
	require.Equal(t, s.Meta.Fingerprint, same.Meta.Fingerprint)
	other := envelope(t, send(`"BETA"`, msg)).DecodeSend()
	require.NotEqual(t, s.Meta.Fingerprint, other.Meta.Fingerprint, "the raw to is part of the fingerprint")
	changed := envelope(t, send(`"beta"`, `{"id":"m1","timestamp":99,"content":{"text":"hi!"}}`)).DecodeSend()
	require.NotEqual(t, s.Meta.Fingerprint, changed.Meta.Fingerprint)
	ts := envelope(t, send(`"beta"`, `{"id":"m1","timestamp":99,"content":{"text":"hi"},"extra":{"kept":true}}`)).DecodeSend()
	require.Equal(t, s.Meta.Fingerprint, ts.Meta.Fingerprint, "timestamp is not part of the fingerprint")

	ask := envelope(t, send(`"b"`, `{"id":"q","timestamp":1,"expectsReply":true,"content":{"text":"?"}}`)).DecodeSend()
	require.True(t, ask.Meta.ExpectsReply)
	reply := envelope(t, send(`"b"`, `{"id":"r","timestamp":1,"replyTo":"q","content":{"text":"!"}}`)).DecodeSend()
	require.Equal(t, "q", reply.Meta.ReplyTo)

	big := strings.Repeat("a", MaxTextBytes)
	require.Empty(t, envelope(t, send(`"b"`, `{"id":"x","timestamp":1,"content":{"text":"`+big+`"}}`)).DecodeSend().Failure)
	require.Empty(t, envelope(t, send(`"b"`, `{"id":"x","timestamp":1,"content":{"text":"`+strings.Repeat("é", MaxTextBytes/2)+`"}}`)).DecodeSend().Failure)

	invalid := map[string]string{
		"text over 256 KiB":       send(`"b"`, `{"id":"x","timestamp":1,"content":{"text":"`+big+`a"}}`),
		"multibyte over 256 KiB":  send(`"b"`, `{"id":"x","timestamp":1,"content":{"text":"`+strings.Repeat("é", MaxTextBytes/2)+`a"}}`),
		"missing to":              `{"type":"send","message":{"id":"x","timestamp":1,"content":{"text":""}}}`,
		"empty to":                send(`""`, `{"id":"x","timestamp":1,"content":{"text":""}}`),
		"long to":                 send(`"`+strings.Repeat("t", 513)+`"`, `{"id":"x","timestamp":1,"content":{"text":""}}`),
		"missing timestamp":       send(`"b"`, `{"id":"x","content":{"text":""}}`),
		"string timestamp":        send(`"b"`, `{"id":"x","timestamp":"1","content":{"text":""}}`),
		"null replyTo":            send(`"b"`, `{"id":"x","timestamp":1,"replyTo":null,"content":{"text":""}}`),
		"empty replyTo":           send(`"b"`, `{"id":"x","timestamp":1,"replyTo":"","content":{"text":""}}`),
		"string expectsReply":     send(`"b"`, `{"id":"x","timestamp":1,"expectsReply":"yes","content":{"text":""}}`),
		"no content":              send(`"b"`, `{"id":"x","timestamp":1}`),
		"content text missing":    send(`"b"`, `{"id":"x","timestamp":1,"content":{}}`),
		"17 attachments":          send(`"b"`, `{"id":"x","timestamp":1,"content":{"text":"","attachments":[`+strings.TrimSuffix(strings.Repeat(`{"type":"file","name":"n","content":""},`, 17), ",")+`]}}`),
		"bad attachment type":     send(`"b"`, `{"id":"x","timestamp":1,"content":{"text":"","attachments":[{"type":"image","name":"n","content":""}]}}`),
		"null attachments":        send(`"b"`, `{"id":"x","timestamp":1,"content":{"text":"","attachments":null}}`),
		"threaded control":        send(`"b"`, `{"id":"x","timestamp":1,"expectsReply":true,"content":{"text":"","control":{"type":"a.b","version":1}}}`),
		"control bad type":        send(`"b"`, `{"id":"x","timestamp":1,"content":{"text":"","control":{"type":"-a","version":1}}}`),
		"control version 0":       send(`"b"`, `{"id":"x","timestamp":1,"content":{"text":"","control":{"type":"a","version":0}}}`),
		"control data over 16KiB": send(`"b"`, `{"id":"x","timestamp":1,"content":{"text":"","control":{"type":"a","version":1,"data":"`+strings.Repeat("d", MaxControlDataBytes)+`"}}}`),
		"message array":           send(`"b"`, `[]`),
	}
	for name, frame := range invalid {
		s := envelope(t, frame).DecodeSend()
		require.Equal(t, FailInvalidMessage, s.Failure, name)
	}
	require.Equal(t, "x", envelope(t, invalid["missing timestamp"]).DecodeSend().MessageID, "a valid id is echoed")
	require.Equal(t, "unknown", envelope(t, send(`"b"`, `{"id":"","timestamp":1,"content":{"text":""}}`)).DecodeSend().MessageID)

	ok := envelope(t, send(`"b"`, `{"id":"x","timestamp":1,"content":{"text":"","control":{"type":"agent-intercom.orchestrator/readiness-probe","version":1,"data":{"requestId":"r"}}}}`)).DecodeSend()
	require.Empty(t, ok.Failure)
	bossEnv := func(id, extra string) string {
		return `{"type":"boss.assignment.created","version":1,"messageId":"` + id + `","bossRunId":"run-1","participantId":"p-1","bindingEpoch":1,"idempotencyKey":"ik","payload":{"n":[1,2]}` + extra + `}`
	}
	boss := envelope(t, send(`"b"`, `{"id":"x","timestamp":1,"content":{"text":"","control":`+bossEnv("x", "")+`}}`)).DecodeSend()
	require.Equal(t, FailControlDispatchUnavailable, boss.Failure)
	for name, ctl := range map[string]string{
		"bare boss type":      `{"type":"boss.assign","version":1}`,
		"uncorrelated":        bossEnv("other", ""),
		"unknown boss key":    bossEnv("x", `,"extra":1`),
		"non-integer payload": strings.Replace(bossEnv("x", ""), `[1,2]`, `[1.5]`, 1),
	} {
		s := envelope(t, send(`"b"`, `{"id":"x","timestamp":1,"content":{"text":"","control":`+ctl+`}}`)).DecodeSend()
		require.Equal(t, FailInvalidMessage, s.Failure, name)
	}
	claude := envelope(t, send(`"b"`, `{"id":"x","timestamp":1,"content":{"text":""},"control":{"kind":"x"}}`)).DecodeSend()
	require.Equal(t, FailControlDispatchUnavailable, claude.Failure)
}

func TestDecodeSmallFrames(t *testing.T) {
	_, err := envelope(t, `{"type":"list"}`).DecodeRequestID()
	_, msg := protoCode(t, err)
	require.Equal(t, "Invalid list message", msg)
	rid, err := envelope(t, `{"type":"list","requestId":"r1"}`).DecodeRequestID()
	require.NoError(t, err)
	require.Equal(t, "r1", rid)

	_, err = envelope(t, `{"type":"message_rejected","deliveryId":"d","code":"OTHER","reason":""}`).DecodeMessageRejected()
	_, msg = protoCode(t, err)
	require.Equal(t, "Invalid message_rejected message", msg)
	_, err = envelope(t, `{"type":"message_rejected","deliveryId":"d","code":"CONFLICTING_MESSAGE_ID","reason":"`+strings.Repeat("r", 1025)+`"}`).DecodeMessageRejected()
	require.Error(t, err)
	rej, err := envelope(t, `{"type":"message_rejected","deliveryId":"d","code":"CONFLICTING_MESSAGE_ID","reason":"dup"}`).DecodeMessageRejected()
	require.NoError(t, err)
	require.Equal(t, Reject{DeliveryID: "d", Reason: "dup"}, rej)

	_, err = envelope(t, `{"type":"defer_ask","requestId":"r"}`).DecodeAskControl()
	_, msg = protoCode(t, err)
	require.Equal(t, "Invalid defer_ask message", msg)

	p, err := envelope(t, `{"type":"presence","status":"busy"}`).DecodePresence()
	require.NoError(t, err)
	require.Equal(t, Presence{Status: "busy", HasStatus: true}, p)
	_, err = envelope(t, `{"type":"presence","name":null}`).DecodePresence()
	_, msg = protoCode(t, err)
	require.Equal(t, "Invalid presence name", msg)

	keep, err := envelope(t, `{"type":"unregister","preserveAsks":true}`).DecodeUnregister()
	require.NoError(t, err)
	require.True(t, keep)
	_, err = envelope(t, `{"type":"unregister","preserveAsks":1}`).DecodeUnregister()
	require.Error(t, err)
}

// Broker frames must carry exactly the keys of spec §2.2 in the reference
// order; each is checked byte for byte and through the strict decoder.
func TestBrokerFramesExactBytes(t *testing.T) {
	info := SessionInfo{ID: "aaaa-1111", Name: "alpha", HasName: true, Cwd: "/r", Model: "m", PID: 7,
		StartedAt: 1760000000000, LastActivity: 1760000000001, TrustedLocal: true, Origin: "local"}
	infoRaw := info.AppendJSON(nil)
	require.Equal(t, `{"id":"aaaa-1111","name":"alpha","cwd":"/r","model":"m","pid":7,"startedAt":1760000000000,"lastActivity":1760000000001,"trustedLocal":true,"origin":"local"}`, string(infoRaw))
	withStatus := info
	withStatus.HasName, withStatus.Status, withStatus.HasStatus = false, "busy", true
	require.Equal(t, `{"id":"aaaa-1111","cwd":"/r","model":"m","pid":7,"startedAt":1760000000000,"lastActivity":1760000000001,"status":"busy","trustedLocal":true,"origin":"local"}`, string(withStatus.AppendJSON(nil)))

	late := withStatus
	late.HasName, late.Name, late.Trailing = true, "later", []string{"status", "name"}
	require.Equal(t, `{"id":"aaaa-1111","cwd":"/r","model":"m","pid":7,"startedAt":1760000000000,"lastActivity":1760000000001,"trustedLocal":true,"origin":"local","status":"busy","name":"later"}`, string(late.AppendJSON(nil)),
		"keys added by presence follow origin, in the order added")

	remote := info
	remote.TrustedLocal, remote.Origin, remote.RemoteHostID = false, "remote", "build-1"
	remoteRaw := remote.AppendJSON(nil)
	require.Equal(t, `{"id":"aaaa-1111","name":"alpha","cwd":"/r","model":"m","pid":7,"startedAt":1760000000000,"lastActivity":1760000000001,"trustedLocal":false,"origin":"remote","remoteHostId":"build-1"}`, string(remoteRaw))
	joined, err := DecodeBrokerFrame(AppendSessionJoined(nil, remoteRaw)[HeaderBytes:])
	require.NoError(t, err, "the strict decoder accepts remoteHostId")
	require.Equal(t, "build-1", joined.Session.RemoteHostID)
	require.Equal(t, "remote", joined.Session.Origin)

	msg := []byte(`{"id":"m1","timestamp":1,"content":{"text":"<&>"},"x":1}`)
	cases := []struct {
		frame []byte
		want  string
	}{
		{AppendHealthOK(nil, "h1", "local"), `{"type":"health_ok","requestId":"h1","protocol":"pi-intercom","version":4,"endpoint":"local","remoteAccess":{"feature":"remote-access-v1","policySemanticsVersion":2,"policySemanticsHash":"f3b00e503631bc91123aedfbcf1df72cc9913e1893c09728b2c598f3dcdfdfe0"}}`},
		{AppendRegistered(nil, "s1"), `{"type":"registered","sessionId":"s1","protocol":"pi-intercom","version":4}`},
		{AppendSessions(nil, "r", [][]byte{infoRaw}), `{"type":"sessions","requestId":"r","sessions":[` + string(infoRaw) + `]}`},
		{AppendSessions(nil, "r", nil), `{"type":"sessions","requestId":"r","sessions":[]}`},
		{AppendMessage(nil, "d1", infoRaw, msg), `{"type":"message","deliveryId":"d1","from":` + string(infoRaw) + `,"message":` + string(msg) + `}`},
		{AppendDeliveryAccepted(nil, "m1", "d1"), `{"type":"delivery_accepted","messageId":"m1","deliveryId":"d1"}`},
		{AppendDelivered(nil, "m1", "d1"), `{"type":"delivered","messageId":"m1","deliveryId":"d1"}`},
		{AppendDeliveryFailed(nil, "m1", false, FailSessionNotFound, "Session not found"), `{"type":"delivery_failed","messageId":"m1","accepted":false,"code":"SESSION_NOT_FOUND","reason":"Session not found"}`},
		{AppendDeliveryFailed(nil, "m1", true, FailDeliveryTimeout, "t"), `{"type":"delivery_failed","messageId":"m1","accepted":true,"code":"DELIVERY_TIMEOUT","reason":"t"}`},
		{AppendPresenceUpdate(nil, infoRaw), `{"type":"presence_update","session":` + string(infoRaw) + `}`},
		{AppendSessionJoined(nil, infoRaw), `{"type":"session_joined","session":` + string(infoRaw) + `}`},
		{AppendSessionLeft(nil, "s1"), `{"type":"session_left","sessionId":"s1"}`},
		{AppendAskDeferred(nil, "q1", "a"), `{"type":"ask_deferred","messageId":"q1","fromSessionId":"a"}`},
		{AppendAskCancelled(nil, "q1", "a", AskExpired), `{"type":"ask_cancelled","messageId":"q1","fromSessionId":"a","reason":"expired"}`},
		{AppendAskControlResult(nil, "r", "defer", "q1", true), `{"type":"ask_control_result","requestId":"r","action":"defer","messageId":"q1","applied":true}`},
		{AppendError(nil, CodeRateLimited, "Intercom broker rate limit exceeded"), `{"type":"error","code":"RATE_LIMITED","error":"Intercom broker rate limit exceeded"}`},
	}
	for _, c := range cases {
		payload := c.frame[HeaderBytes:]
		require.Equal(t, c.want, string(payload))
		require.Equal(t, len(payload), int(uint32(c.frame[0])<<24|uint32(c.frame[1])<<16|uint32(c.frame[2])<<8|uint32(c.frame[3])))
		f, err := DecodeBrokerFrame(payload)
		require.NoError(t, err, c.want)
		require.NotEmpty(t, f.Type)
	}
	f, err := DecodeBrokerFrame(AppendMessage(nil, "d1", infoRaw, msg)[HeaderBytes:])
	require.NoError(t, err)
	require.Equal(t, string(msg), string(f.Message))
	require.Equal(t, info, f.From)
}

func TestDecodeBrokerFrameIsStrict(t *testing.T) {
	bad := []string{
		`{"type":"registered","sessionId":"s","protocol":"pi-intercom","version":4,"extra":1}`,
		`{"type":"delivered","messageId":"m"}`,
		`{"type":"sessions","requestId":"r","sessions":[{"id":"a","cwd":"/","model":"m","pid":1,"startedAt":1,"lastActivity":1,"scope":"x"}]}`,
		`{"type":"session_left","sessionId":null}`,
		`{"type":"brand_new","x":1}`,
	}
	for _, s := range bad {
		_, err := DecodeBrokerFrame([]byte(s))
		require.Error(t, err, s)
	}
}

func TestClientEncodersParse(t *testing.T) {
	m := Message{ID: "m1", Timestamp: 5, ReplyTo: "q", ExpectsReply: true, Text: "hi",
		Attachments: []Attachment{{Type: "file", Name: "a", Content: "c", Language: "go"}}}
	raw := m.AppendJSON(nil)
	require.Equal(t, `{"id":"m1","timestamp":5,"replyTo":"q","expectsReply":true,"content":{"text":"hi","attachments":[{"type":"file","name":"a","content":"c","language":"go"}]}}`, string(raw))
	frames := [][]byte{
		AppendRegisterFrame(nil, &RegisterRequest{SessionID: "s", Scope: "Scope_AAAAAAAAAA", Cwd: "/", Model: "m", PID: 1, StartedAt: 2, LastActivity: 3, Name: "n", HasName: true, RuntimeInstanceID: "rt"}),
		AppendSendFrame(nil, "b", raw),
		AppendHealthRequest(nil, "h"), AppendListRequest(nil, "l"), AppendMessageReceived(nil, "d"),
		AppendMessageRejected(nil, "d", "r"), AppendAskControl(nil, TypeDeferAsk, "r", "m"),
		AppendPresenceFrame(nil, &Presence{Status: "s", HasStatus: true}), AppendUnregisterFrame(nil, true),
	}
	env := envelope(t, string(frames[0][HeaderBytes:]))
	reg, err := env.DecodeRegister()
	require.NoError(t, err)
	require.Equal(t, "Scope_AAAAAAAAAA", reg.Scope)
	require.Equal(t, "rt", reg.Session.RuntimeInstanceID)
	s := envelope(t, string(frames[1][HeaderBytes:])).DecodeSend()
	require.Empty(t, s.Failure)
	require.Equal(t, string(raw), string(s.Message))
	for _, f := range frames[2:] {
		_, err := ParseEnvelope(f[HeaderBytes:])
		require.NoError(t, err)
	}
}

// A message's control is written as content.control, after the text and
// attachments, and read back as sent; one the broker would refuse (a bad
// type) does not parse.
func TestMessageControlRoundTrip(t *testing.T) {
	m := Message{ID: "m1", Timestamp: 5, Text: "w1 ended", Control: &Control{Type: "agent-fleet.worker.ended", Version: 1, Data: []byte(`{"id":"w1"}`)}}
	raw := m.AppendJSON(nil)
	require.Equal(t, `{"id":"m1","timestamp":5,"content":{"text":"w1 ended","control":{"type":"agent-fleet.worker.ended","version":1,"data":{"id":"w1"}}}}`, string(raw))
	info, err := ParseMessage(raw)
	require.NoError(t, err)
	require.True(t, info.HasControl)
	require.Equal(t, "agent-fleet.worker.ended", info.ControlType)
	require.JSONEq(t, `{"type":"agent-fleet.worker.ended","version":1,"data":{"id":"w1"}}`, string(info.Control))

	m.Control = &Control{Type: "-bad", Version: 1}
	_, err = ParseMessage(m.AppendJSON(nil))
	require.ErrorIs(t, err, ErrInvalidMessage)
}

// MessagePayloadSize counts what AppendMessage writes, byte for byte: the
// broker refuses a send by it before building the frame.
func TestMessagePayloadSize(t *testing.T) {
	from := []byte(`{"id":"a","name":"A"}`)
	msg := []byte(`{"id":"m1","timestamp":1,"content":{"text":"hi"}}`)
	id := "0f8fad5b-d9cb-469f-a165-70867728950e"
	require.Equal(t, len(AppendMessage(nil, id, from, msg))-HeaderBytes, MessagePayloadSize(len(id), from, msg))
}
