package broker

import (
	"errors"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

func protoErr(code wire.ErrorCode, msg string) *wire.ProtocolError {
	return &wire.ProtocolError{Code: code, Message: msg}
}

// refuse answers a refused frame with an error frame and ends the
// connection (spec §2.0 item 6).
func (b *Broker) refuse(c *conn, err error) {
	var pe *wire.ProtocolError
	if !errors.As(err, &pe) {
		pe = protoErr(wire.CodeInvalidRequest, err.Error())
	}
	b.scratch = wire.AppendError(b.scratch[:0], pe.Code, pe.Message)
	c.send(b.scratch)
	c.end()
}

// handleFrame handles one frame of c in the reference order: JSON (else a
// silent drop) → rate limit → envelope → pre-register gate → replaced-socket
// fence → the frame. It reports whether c should keep reading.
func (b *Broker) handleFrame(c *conn, payload []byte) bool {
	env, err := wire.ParseEnvelope(payload)
	if errors.Is(err, wire.ErrMalformedJSON) {
		return false
	}
	cost := float64(wire.FrameCost(len(payload)))
	if !c.rateAllows(cost) {
		b.mu.Lock()
		b.stats.rateLimited.Add(1)
		if !c.stopped.Load() {
			b.scratch = wire.AppendError(b.scratch[:0], wire.CodeRateLimited, "Intercom broker rate limit exceeded")
			c.send(b.scratch)
			c.end()
		}
		b.mu.Unlock()
		return false
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	if c.stopped.Load() || b.closing {
		return false
	}
	if err != nil {
		b.refuse(c, err)
		return false
	}
	switch env.Type {
	case wire.TypeHealth:
		rid, err := env.DecodeRequestID()
		if err != nil {
			b.refuse(c, err)
			return false
		}
		b.scratch = wire.AppendHealthOK(b.scratch[:0], rid, "local")
		c.send(b.scratch)
		return true
	case wire.TypeAccessControl:
		// The remote gateway and its administration are not offered; answer
		// as the reference does for a request it cannot authenticate.
		msg := "Remote access control credential or request was rejected"
		if c.sessionID != "" {
			msg = "Remote access control requires a short-lived control connection"
		}
		b.refuse(c, protoErr(wire.CodeAccessDenied, msg))
		return false
	}
	if c.sessionID == "" && env.Type != wire.TypeRegister {
		b.refuse(c, protoErr(wire.CodeInvalidRequest, "Received "+env.Type+" before register"))
		return false
	}
	var s *session
	if c.sessionID != "" {
		// A connection replaced by a newer one of its session is fenced:
		// anything it still sends is discarded with the socket (spec §4.4).
		if s = b.bound(c); s == nil {
			c.destroy()
			return false
		}
	}
	switch env.Type {
	case wire.TypeRegister:
		b.handleRegister(c, env)
	case wire.TypeUnregister:
		b.handleUnregister(c, env)
	case wire.TypeList:
		b.handleList(c, s, env)
	case wire.TypeSend:
		b.handleSend(c, s, env)
	case wire.TypeMessageReceived:
		b.handleAck(c, s, env)
	case wire.TypeMessageRejected:
		b.handleReject(c, s, env)
	case wire.TypeDeferAsk:
		b.handleDeferAsk(c, s, env)
	case wire.TypeCancelAsk:
		b.handleCancelAsk(c, s, env)
	case wire.TypePresence:
		b.handlePresence(c, s, env)
	default:
		b.refuse(c, protoErr(wire.CodeInvalidRequest, "Unknown client message type: "+env.Type))
	}
	return !c.stopped.Load()
}
