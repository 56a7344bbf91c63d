package modeltest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
)

// anthropicCodec is the Anthropic Messages API as Claude Code calls it:
// POST /v1/messages (Claude Code adds ?beta=true), streamed as server-sent
// events or answered whole; POST /v1/messages/count_tokens; and the
// connectivity probe HEAD /api/hello that Claude Code sends to its base URL
// before the first call.
//
// Claude Code defers most tools, MCP tools included: the request's tools
// carry only their names' announcement in a system message ("The following
// deferred tools are now available via ToolSearch…"), and a model loads
// one with Claude Code's ToolSearch tool before it calls it (a call
// without loading works too). The decoded Request's Tools count the
// announced ones as offered.
type anthropicCodec struct{}

const (
	anthropicMessages    = "/v1/messages"
	anthropicCountTokens = "/v1/messages/count_tokens"
	anthropicHello       = "/api/hello"
)

func (anthropicCodec) api() API { return Anthropic }

func (anthropicCodec) path(p string) bool {
	return p == anthropicMessages || p == anthropicCountTokens || p == anthropicHello
}

// housekeeping answers the probe (any body, 200) and token counting
// ({"input_tokens": N}, N estimated as a quarter of the body's bytes, the
// rough figure for English text and JSON).
func (anthropicCodec) housekeeping(w http.ResponseWriter, r *http.Request, body []byte) bool {
	switch r.URL.Path {
	case anthropicHello:
		if r.Method != http.MethodHead && r.Method != http.MethodGet {
			http.Error(w, "modeltest: "+anthropicHello+" is HEAD or GET", http.StatusMethodNotAllowed)
			return true
		}
		w.WriteHeader(http.StatusOK)
		return true
	case anthropicCountTokens:
		if r.Method != http.MethodPost {
			http.Error(w, "modeltest: count_tokens is POST", http.StatusMethodNotAllowed)
			return true
		}
		var v struct {
			Messages json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal(body, &v); err != nil || len(v.Messages) == 0 {
			anthropicCodec{}.fail(w, &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: "modeltest: count_tokens needs messages"})
			return true
		}
		writeJSON(w, http.StatusOK, map[string]int{"input_tokens": max(1, len(body)/4)})
		return true
	}
	return false
}

// anthropicBlock is one content block of a request message. Blocks of
// other types (thinking, image, document, …) are kept out of the common
// shape.
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	// ToolName is a tool_reference block's tool (what Claude Code's
	// ToolSearch answers with).
	ToolName string `json:"tool_name"`
}

// anthropicBlocks reads content that is a string or an array of blocks.
func anthropicBlocks(raw json.RawMessage) ([]anthropicBlock, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []anthropicBlock{{Type: "text", Text: s}}, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, fmt.Errorf("content is neither a string nor an array of blocks: %w", err)
	}
	return blocks, nil
}

// blocksText joins the text of text blocks, and names tool_reference
// blocks as "tool_reference:NAME", by "\n".
func blocksText(blocks []anthropicBlock) string {
	var parts []string
	for _, b := range blocks {
		switch b.Type {
		case "text":
			parts = append(parts, b.Text)
		case "tool_reference":
			parts = append(parts, "tool_reference:"+b.ToolName)
		}
	}
	return strings.Join(parts, "\n")
}

func (anthropicCodec) decode(body []byte, req *Request) error {
	var v struct {
		Model    string          `json:"model"`
		Stream   bool            `json:"stream"`
		System   json.RawMessage `json:"system"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return err
	}
	if v.Model == "" {
		return errors.New("model: field required")
	}
	if len(v.Messages) == 0 {
		return errors.New("messages: at least one message is required")
	}
	req.Model, req.Stream = v.Model, v.Stream
	sys, err := anthropicBlocks(v.System)
	if err != nil {
		return fmt.Errorf("system: %w", err)
	}
	req.System = blocksText(sys)
	for i, m := range v.Messages {
		blocks, err := anthropicBlocks(m.Content)
		if err != nil {
			return fmt.Errorf("messages[%d]: %w", i, err)
		}
		msg := Message{Role: m.Role, Text: blocksText(blocks)}
		for _, b := range blocks {
			switch b.Type {
			case "tool_use":
				msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Input: b.Input})
			case "tool_result":
				content, err := anthropicBlocks(b.Content)
				if err != nil {
					return fmt.Errorf("messages[%d] tool_result %s: %w", i, b.ToolUseID, err)
				}
				msg.ToolResults = append(msg.ToolResults, ToolResult{CallID: b.ToolUseID, Content: blocksText(content), IsError: b.IsError})
			}
		}
		req.Messages = append(req.Messages, msg)
	}
	for _, t := range v.Tools {
		if t.Name != "" {
			req.Tools = append(req.Tools, t.Name)
		}
	}
	for _, m := range req.Messages {
		for _, name := range deferredTools(m.Text) {
			if !slices.Contains(req.Tools, name) {
				req.Tools = append(req.Tools, name)
			}
		}
	}
	return nil
}

// deferredAnnouncement opens Claude Code's list of deferred tools, one name
// a line after it, up to a blank line.
const deferredAnnouncement = "deferred tools are now available via ToolSearch"

var toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]+$`)

// deferredTools are the tool names text announces as deferred.
func deferredTools(text string) []string {
	_, rest, ok := strings.Cut(text, deferredAnnouncement)
	if !ok {
		return nil
	}
	_, rest, _ = strings.Cut(rest, "\n") // the rest of the announcement's line
	var names []string
	for _, line := range strings.Split(rest, "\n") {
		if !toolNameRE.MatchString(line) {
			break
		}
		names = append(names, line)
	}
	return names
}

// ToolSearch is Claude Code's call that loads deferred tools (its MCP
// tools among them) by name, as a model makes it before calling them:
// ToolSearch {"query": "select:NAME,…"}. Claude Code answers with a
// tool_result of tool_reference blocks (read as "tool_reference:NAME"
// lines) and offers the tools from its next request on.
func ToolSearch(names ...string) ToolCall {
	return Call("ToolSearch", map[string]any{"query": "select:" + strings.Join(names, ",")})
}

// anthropicUsage is the usage object of message_start, message_delta and a
// whole message (the API repeats the input figures in message_delta).
func anthropicUsage(u Usage, output int) map[string]int {
	return map[string]int{"input_tokens": u.Input, "output_tokens": output,
		"cache_creation_input_tokens": u.CacheWrite, "cache_read_input_tokens": u.CacheRead}
}

// anthropicContent is rep's content blocks: its text (if any), then one
// tool_use block per call.
func anthropicContent(rep *Reply) []map[string]any {
	var blocks []map[string]any
	if rep.Text != "" {
		blocks = append(blocks, map[string]any{"type": "text", "text": rep.Text})
	}
	for _, c := range rep.ToolCalls {
		blocks = append(blocks, map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": c.Input})
	}
	return blocks
}

func anthropicStop(rep *Reply) string {
	if len(rep.ToolCalls) > 0 {
		return "tool_use"
	}
	return "end_turn"
}

// halves splits s in two at a rune boundary so that a client must join
// deltas ("" and one-rune strings stay whole).
func halves(s string) []string {
	r := []rune(s)
	if len(r) < 2 {
		return []string{s}
	}
	return []string{string(r[:len(r)/2]), string(r[len(r)/2:])}
}

func (anthropicCodec) answer(w http.ResponseWriter, req *Request, rep *Reply, seq int) {
	id := fmt.Sprintf("msg_mt%d", seq)
	w.Header().Set("request-id", fmt.Sprintf("req_mt%d", seq))
	content := anthropicContent(rep)
	if !req.Stream {
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "type": "message", "role": "assistant", "model": rep.Model,
			"content": content, "stop_reason": anthropicStop(rep), "stop_sequence": nil,
			"usage": anthropicUsage(rep.Usage, rep.Usage.Output)})
		return
	}
	e := newSSE(w)
	e.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": rep.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": anthropicUsage(rep.Usage, min(1, rep.Usage.Output))}})
	e.event("ping", map[string]any{"type": "ping"})
	for i, b := range content {
		start := map[string]any{"type": b["type"]}
		var deltas []map[string]any
		switch b["type"] {
		case "text":
			start["text"] = ""
			for _, part := range halves(b["text"].(string)) {
				deltas = append(deltas, map[string]any{"type": "text_delta", "text": part})
			}
		case "tool_use":
			start["id"], start["name"], start["input"] = b["id"], b["name"], map[string]any{}
			for _, part := range halves(string(b["input"].(json.RawMessage))) {
				deltas = append(deltas, map[string]any{"type": "input_json_delta", "partial_json": part})
			}
		}
		e.event("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": start})
		for _, d := range deltas {
			e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": d})
		}
		e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	e.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": anthropicStop(rep), "stop_sequence": nil},
		"usage": anthropicUsage(rep.Usage, rep.Usage.Output)})
	e.event("message_stop", map[string]any{"type": "message_stop"})
}

// fail writes {"type":"error","error":{"type":…,"message":…}} with the
// status and retry-after of e.
func (anthropicCodec) fail(w http.ResponseWriter, e *Error) {
	retryAfter(w, e)
	writeJSON(w, e.Status, map[string]any{"type": "error", "error": map[string]string{"type": e.Type, "message": e.Message}})
}
