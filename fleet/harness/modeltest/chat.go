package modeltest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// chatCodec is the OpenAI Chat Completions API: POST /v1/chat/completions
// (or /chat/completions, for a provider whose base URL has no /v1),
// streamed as data-only server-sent events ending in "data: [DONE]" or
// answered whole. Neither OpenCode nor Pi lists models or counts tokens,
// so there is no housekeeping: any other request fails the test.
type chatCodec struct{}

func (chatCodec) api() API { return ChatCompletions }

func (chatCodec) path(p string) bool {
	switch p {
	case "/v1/chat/completions", "/chat/completions":
		return true
	}
	return false
}

func (chatCodec) housekeeping(http.ResponseWriter, *http.Request, []byte) bool { return false }

// chatBody is the part of a Chat Completions request the endpoint reads.
type chatBody struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages []chatMessage `json:"messages"`
	Tools    []struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []chatToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func (chatCodec) decode(body []byte, req *Request) error {
	var b chatBody
	if err := json.Unmarshal(body, &b); err != nil {
		return err
	}
	if b.Model == "" {
		return fmt.Errorf("no model")
	}
	if len(b.Messages) == 0 {
		return fmt.Errorf("no messages")
	}
	req.Model, req.Stream = b.Model, b.Stream
	var system []string
	for i, m := range b.Messages {
		text, err := chatText(m.Content)
		if err != nil {
			return fmt.Errorf("message %d (%s): %w", i, m.Role, err)
		}
		switch m.Role {
		case "system", "developer":
			if text != "" {
				system = append(system, text)
			}
		case "user":
			req.Messages = append(req.Messages, Message{Role: "user", Text: text})
		case "assistant":
			msg := Message{Role: "assistant", Text: text}
			for _, c := range m.ToolCalls {
				args := json.RawMessage(c.Function.Arguments)
				if strings.TrimSpace(c.Function.Arguments) == "" {
					args = json.RawMessage(`{}`)
				} else if !json.Valid(args) {
					return fmt.Errorf("message %d: tool call %s has arguments that are not JSON: %.100q", i, c.ID, c.Function.Arguments)
				}
				msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: c.ID, Name: c.Function.Name, Input: args})
			}
			req.Messages = append(req.Messages, msg)
		case "tool":
			if m.ToolCallID == "" {
				return fmt.Errorf("message %d: a tool message without tool_call_id", i)
			}
			req.Messages = append(req.Messages, Message{Role: "tool",
				ToolResults: []ToolResult{{CallID: m.ToolCallID, Content: text}}})
		default:
			return fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	req.System = strings.Join(system, "\n")
	for _, t := range b.Tools {
		req.Tools = append(req.Tools, t.Function.Name)
	}
	return nil
}

// contentText is an OpenAI message content or tool output: a string,
// null, or parts of which those of the given text types count (images and
// files are left out), joined by newlines.
func contentText(raw json.RawMessage, textTypes ...string) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("content is neither a string nor parts: %w", err)
	}
	var texts []string
	for _, p := range parts {
		if slices.Contains(textTypes, p.Type) && p.Text != "" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n"), nil
}

// chatText is a Chat Completions message's content: its "text" parts count.
func chatText(raw json.RawMessage) (string, error) { return contentText(raw, "text") }

// chatUsage is OpenAI's usage object: prompt_tokens counts every input
// token, cached ones included.
func chatUsage(u Usage) map[string]any {
	prompt := u.Input + u.CacheRead + u.CacheWrite
	return map[string]any{
		"prompt_tokens": prompt, "completion_tokens": u.Output, "total_tokens": prompt + u.Output,
		"prompt_tokens_details":     map[string]any{"cached_tokens": u.CacheRead},
		"completion_tokens_details": map[string]any{"reasoning_tokens": 0},
	}
}

func (chatCodec) answer(w http.ResponseWriter, req *Request, rep *Reply, seq int) {
	id := fmt.Sprintf("chatcmpl-mt%d", seq)
	created := time.Now().Unix()
	finish := "stop"
	if len(rep.ToolCalls) > 0 {
		finish = "tool_calls"
	}
	if !req.Stream {
		msg := map[string]any{"role": "assistant", "content": rep.Text}
		if rep.Text == "" && len(rep.ToolCalls) > 0 {
			msg["content"] = nil
		}
		if len(rep.ToolCalls) > 0 {
			calls := make([]map[string]any, len(rep.ToolCalls))
			for i, c := range rep.ToolCalls {
				calls[i] = map[string]any{"id": c.ID, "type": "function",
					"function": map[string]any{"name": c.Name, "arguments": string(c.Input)}}
			}
			msg["tool_calls"] = calls
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": rep.Model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
			"usage":   chatUsage(rep.Usage),
		})
		return
	}
	var b chatBody
	_ = json.Unmarshal(req.Body, &b)
	e := newSSE(w)
	chunk := func(delta map[string]any, finish any) {
		e.event("", map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": rep.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}},
		})
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	// Text in two pieces, as a model streams it.
	if t := rep.Text; t != "" {
		cut := len(t) / 2
		for cut > 0 && !isRuneStart(t[cut]) {
			cut--
		}
		for _, piece := range []string{t[:cut], t[cut:]} {
			if piece != "" {
				chunk(map[string]any{"content": piece}, nil)
			}
		}
	}
	for i, c := range rep.ToolCalls {
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": c.ID, "type": "function",
			"function": map[string]any{"name": c.Name, "arguments": ""}}}}, nil)
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i,
			"function": map[string]any{"arguments": string(c.Input)}}}}, nil)
	}
	chunk(map[string]any{}, finish)
	if b.StreamOptions != nil && b.StreamOptions.IncludeUsage {
		e.event("", map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": rep.Model,
			"choices": []any{}, "usage": chatUsage(rep.Usage),
		})
	}
	e.event("", "[DONE]")
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// chatErrorCodes are OpenAI's codes for the endpoint's error types.
var chatErrorCodes = map[string]string{
	"rate_limit_error": "rate_limit_exceeded",
	"overloaded_error": "server_overloaded",
	"api_error":        "server_error",
}

func (chatCodec) fail(w http.ResponseWriter, e *Error) {
	code := e.Type
	if c, ok := chatErrorCodes[e.Type]; ok {
		code = c
	}
	openAIError(w, e, e.Type, code)
}

// openAIError answers e as OpenAI's APIs do: the status, a retry-after,
// and {"error":{"message","type","param","code"}}.
func openAIError(w http.ResponseWriter, e *Error, typ, code string) {
	retryAfter(w, e)
	writeJSON(w, e.Status, map[string]any{"error": map[string]any{
		"message": e.Message, "type": typ, "param": nil, "code": code,
	}})
}
