package wire

// Encoders for client frames (spec §2.1), used by the Go client, the
// benchmarks and raw-frame tests. Key order follows the Pi client.

// Attachment is one message attachment (spec §2.1).
type Attachment struct {
	Type     string `json:"type"` // "file", "snippet" or "context"
	Name     string `json:"name"`
	Content  string `json:"content"`
	Language string `json:"language,omitempty"`
}

// Message is an intercom message as a client composes it.
type Message struct {
	ID           string
	Timestamp    float64 // epoch ms
	ReplyTo      string  // "" = not a reply
	ExpectsReply bool    // true = an ask
	Text         string
	Attachments  []Attachment
	// Control is content.control as raw JSON ({type, version, data?},
	// spec §2.5); nil for none. A control message is never threaded.
	Control []byte
}

// AppendJSON appends the message object:
// {id, timestamp, replyTo?, expectsReply?, content:{text, attachments?, control?}}.
func (m *Message) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = AppendString(dst, m.ID)
	dst = append(dst, `,"timestamp":`...)
	dst = AppendNumber(dst, m.Timestamp)
	if m.ReplyTo != "" {
		dst = append(dst, `,"replyTo":`...)
		dst = AppendString(dst, m.ReplyTo)
	}
	if m.ExpectsReply {
		dst = append(dst, `,"expectsReply":true`...)
	}
	dst = append(dst, `,"content":{"text":`...)
	dst = AppendString(dst, m.Text)
	if len(m.Attachments) > 0 {
		dst = append(dst, `,"attachments":[`...)
		for i, a := range m.Attachments {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"type":`...)
			dst = AppendString(dst, a.Type)
			dst = append(dst, `,"name":`...)
			dst = AppendString(dst, a.Name)
			dst = append(dst, `,"content":`...)
			dst = AppendString(dst, a.Content)
			if a.Language != "" {
				dst = append(dst, `,"language":`...)
				dst = AppendString(dst, a.Language)
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if len(m.Control) > 0 {
		dst = append(dst, `,"control":`...)
		dst = append(dst, m.Control...)
	}
	return append(dst, "}}"...)
}

// RegisterRequest is what a client registers with (spec §2.1).
type RegisterRequest struct {
	SessionID         string // "" = let the broker assign one
	Scope             string // "" = unscoped
	Cwd               string
	Model             string
	PID               int
	StartedAt         float64 // epoch ms
	LastActivity      float64 // epoch ms
	Name              string
	HasName           bool
	Status            string
	HasStatus         bool
	RuntimeInstanceID string
}

// AppendRegisterFrame appends a register frame.
func AppendRegisterFrame(dst []byte, r *RegisterRequest) []byte {
	dst, start := beginFrame(dst)
	dst = append(dst, `{"type":"register","protocol":"pi-intercom","version":4,"session":{"cwd":`...)
	dst = AppendString(dst, r.Cwd)
	dst = append(dst, `,"model":`...)
	dst = AppendString(dst, r.Model)
	dst = append(dst, `,"pid":`...)
	dst = AppendNumber(dst, float64(r.PID))
	dst = append(dst, `,"startedAt":`...)
	dst = AppendNumber(dst, r.StartedAt)
	dst = append(dst, `,"lastActivity":`...)
	dst = AppendNumber(dst, r.LastActivity)
	if r.HasName {
		dst = append(dst, `,"name":`...)
		dst = AppendString(dst, r.Name)
	}
	if r.HasStatus {
		dst = append(dst, `,"status":`...)
		dst = AppendString(dst, r.Status)
	}
	if r.RuntimeInstanceID != "" {
		dst = append(dst, `,"runtimeInstanceId":`...)
		dst = AppendString(dst, r.RuntimeInstanceID)
	}
	dst = append(dst, '}')
	if r.SessionID != "" {
		dst = append(dst, `,"sessionId":`...)
		dst = AppendString(dst, r.SessionID)
	}
	if r.Scope != "" {
		dst = append(dst, `,"scopeId":`...)
		dst = AppendString(dst, r.Scope)
	}
	dst = append(dst, '}')
	return endFrame(dst, start)
}

func appendTypeAndString(dst []byte, typ, key, value string) []byte {
	dst, start := beginFrame(dst)
	dst = append(dst, `{"type":"`...)
	dst = append(dst, typ...)
	dst = append(dst, `","`...)
	dst = append(dst, key...)
	dst = append(dst, `":`...)
	dst = AppendString(dst, value)
	dst = append(dst, '}')
	return endFrame(dst, start)
}

// AppendHealthRequest appends a health frame.
func AppendHealthRequest(dst []byte, requestID string) []byte {
	return appendTypeAndString(dst, TypeHealth, "requestId", requestID)
}

// AppendListRequest appends a list frame.
func AppendListRequest(dst []byte, requestID string) []byte {
	return appendTypeAndString(dst, TypeList, "requestId", requestID)
}

// AppendSendFrame appends a send frame; message is the message JSON.
func AppendSendFrame(dst []byte, to string, message []byte) []byte {
	dst, start := beginFrame(dst)
	dst = append(dst, `{"type":"send","to":`...)
	dst = AppendString(dst, to)
	dst = append(dst, `,"message":`...)
	dst = append(dst, message...)
	dst = append(dst, '}')
	return endFrame(dst, start)
}

// AppendMessageReceived appends a message_received acknowledgement.
func AppendMessageReceived(dst []byte, deliveryID string) []byte {
	return appendTypeAndString(dst, TypeMessageReceived, "deliveryId", deliveryID)
}

// AppendMessageRejected appends a message_rejected frame (always
// CONFLICTING_MESSAGE_ID, the only code a receiver may send).
func AppendMessageRejected(dst []byte, deliveryID, reason string) []byte {
	dst, start := beginFrame(dst)
	dst = append(dst, `{"type":"message_rejected","deliveryId":`...)
	dst = AppendString(dst, deliveryID)
	dst = append(dst, `,"code":"CONFLICTING_MESSAGE_ID","reason":`...)
	dst = AppendString(dst, reason)
	dst = append(dst, '}')
	return endFrame(dst, start)
}

// AppendAskControl appends a defer_ask or cancel_ask frame.
func AppendAskControl(dst []byte, typ, requestID, messageID string) []byte {
	dst, start := beginFrame(dst)
	dst = append(dst, `{"type":"`...)
	dst = append(dst, typ...)
	dst = append(dst, `","requestId":`...)
	dst = AppendString(dst, requestID)
	dst = append(dst, `,"messageId":`...)
	dst = AppendString(dst, messageID)
	dst = append(dst, '}')
	return endFrame(dst, start)
}

// AppendPresenceFrame appends a presence frame with the fields that are set.
func AppendPresenceFrame(dst []byte, p *Presence) []byte {
	dst, start := beginFrame(dst)
	dst = append(dst, `{"type":"presence"`...)
	if p.HasName {
		dst = append(dst, `,"name":`...)
		dst = AppendString(dst, p.Name)
	}
	if p.HasStatus {
		dst = append(dst, `,"status":`...)
		dst = AppendString(dst, p.Status)
	}
	if p.HasModel {
		dst = append(dst, `,"model":`...)
		dst = AppendString(dst, p.Model)
	}
	dst = append(dst, '}')
	return endFrame(dst, start)
}

// AppendUnregisterFrame appends an unregister frame.
func AppendUnregisterFrame(dst []byte, preserveAsks bool) []byte {
	dst, start := beginFrame(dst)
	if preserveAsks {
		dst = append(dst, `{"type":"unregister","preserveAsks":true}`...)
	} else {
		dst = append(dst, `{"type":"unregister"}`...)
	}
	return endFrame(dst, start)
}
