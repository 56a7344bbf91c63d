package modeltest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// responsesCodec is the OpenAI Responses API: POST /v1/responses (or
// /responses, for a provider whose base URL has no /v1), streamed as named
// server-sent events (response.created … response.completed) or answered
// whole. Codex sends nothing else to a custom provider: no model listing,
// no token counting, no websocket unless the provider asks for one.
//
// Tool names: a function tool is its name; a tool inside a namespace tool
// (Codex puts each MCP server's tools in one, "mcp__agent_fleet" for the
// server agent-fleet) is NAMESPACE__NAME, "mcp__agent_fleet__intercom_send",
// and a reply's tool call of that name is sent back as name + namespace, the
// form Codex runs; a custom (free-form) tool such as apply_patch is its
// name, and a call to it carries the input as text. Hosted tools without a
// name (web_search, tool_search) are listed by their type.
type responsesCodec struct{}

func (responsesCodec) api() API { return Responses }

func (responsesCodec) path(p string) bool {
	switch p {
	case "/v1/responses", "/responses":
		return true
	}
	return false
}

func (responsesCodec) housekeeping(http.ResponseWriter, *http.Request, []byte) bool { return false }

// responsesBody is the part of a Responses request the endpoint reads.
type responsesBody struct {
	Model        string          `json:"model"`
	Stream       bool            `json:"stream"`
	Instructions string          `json:"instructions"`
	Input        json.RawMessage `json:"input"`
	Tools        []responsesTool `json:"tools"`
}

type responsesTool struct {
	Type  string          `json:"type"`
	Name  string          `json:"name"`
	Tools []responsesTool `json:"tools"` // a namespace's
}

// responsesItem is one input item: a message, a tool call the model made
// earlier, or the harness's output for one.
type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Name      string          `json:"name"`
	Namespace string          `json:"namespace"`
	Arguments string          `json:"arguments"`
	Input     string          `json:"input"` // custom_tool_call
	CallID    string          `json:"call_id"`
	Output    json.RawMessage `json:"output"`
	Success   *bool           `json:"success"`
}

// responsesIgnored are input item types that are not conversation text or
// tool calls: the model's reasoning, hosted tool calls, compaction
// summaries.
var responsesIgnored = map[string]bool{
	"reasoning": true, "web_search_call": true, "tool_search_call": true, "tool_search_output": true,
	"image_generation_call": true, "compaction": true, "item_reference": true,
}

// toolName is the name a script uses for a tool in namespace ns.
func toolName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "__" + name
}

func (responsesCodec) decode(body []byte, req *Request) error {
	var b responsesBody
	if err := json.Unmarshal(body, &b); err != nil {
		return err
	}
	if b.Model == "" {
		return fmt.Errorf("no model")
	}
	req.Model, req.Stream = b.Model, b.Stream
	var system []string
	if b.Instructions != "" {
		system = append(system, b.Instructions)
	}
	items, err := responsesInput(b.Input)
	if err != nil {
		return err
	}
	if len(items) == 0 {
		return fmt.Errorf("no input")
	}
	last := func(role string) *Message {
		if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == role {
			return &req.Messages[n-1]
		}
		return nil
	}
	for i, it := range items {
		if it.Type == "" && it.Role != "" {
			it.Type = "message"
		}
		switch {
		case it.Type == "message":
			text, err := responsesText(it.Content)
			if err != nil {
				return fmt.Errorf("input item %d (%s message): %w", i, it.Role, err)
			}
			switch it.Role {
			case "system", "developer":
				if text != "" {
					system = append(system, text)
				}
			case "user", "assistant":
				req.Messages = append(req.Messages, Message{Role: it.Role, Text: text})
			default:
				return fmt.Errorf("input item %d: a message of unknown role %q", i, it.Role)
			}
		case it.Type == "function_call" || it.Type == "custom_tool_call":
			if it.CallID == "" || it.Name == "" {
				return fmt.Errorf("input item %d: a %s without call_id or name", i, it.Type)
			}
			var args json.RawMessage
			if it.Type == "custom_tool_call" {
				args, _ = json.Marshal(it.Input)
			} else if args = json.RawMessage(it.Arguments); strings.TrimSpace(it.Arguments) == "" {
				args = json.RawMessage(`{}`)
			} else if !json.Valid(args) {
				return fmt.Errorf("input item %d: call %s has arguments that are not JSON: %.100q", i, it.CallID, it.Arguments)
			}
			m := last("assistant")
			if m == nil {
				req.Messages = append(req.Messages, Message{Role: "assistant"})
				m = &req.Messages[len(req.Messages)-1]
			}
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: it.CallID, Name: toolName(it.Namespace, it.Name), Input: args})
		case it.Type == "function_call_output" || it.Type == "custom_tool_call_output":
			if it.CallID == "" {
				return fmt.Errorf("input item %d: a %s without call_id", i, it.Type)
			}
			out, err := responsesText(it.Output)
			if err != nil {
				return fmt.Errorf("input item %d (%s): %w", i, it.Type, err)
			}
			req.Messages = append(req.Messages, Message{Role: "tool",
				ToolResults: []ToolResult{{CallID: it.CallID, Content: out, IsError: it.Success != nil && !*it.Success}}})
		case responsesIgnored[it.Type]:
		default:
			return fmt.Errorf("input item %d: unknown type %q", i, it.Type)
		}
	}
	req.System = strings.Join(system, "\n")
	for _, t := range b.Tools {
		switch {
		case t.Type == "namespace":
			for _, inner := range t.Tools {
				req.Tools = append(req.Tools, toolName(t.Name, inner.Name))
			}
		case t.Name != "":
			req.Tools = append(req.Tools, t.Name)
		default:
			req.Tools = append(req.Tools, t.Type)
		}
	}
	return nil
}

// responsesInput is the input: a string (one user message) or items.
func responsesInput(raw json.RawMessage) ([]responsesItem, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []responsesItem{{Type: "message", Role: "user", Content: raw}}, nil
	}
	var items []responsesItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("input is neither a string nor items: %w", err)
	}
	return items, nil
}

// responsesText is a Responses content or output: its input_text,
// output_text and text parts count.
func responsesText(raw json.RawMessage) (string, error) {
	return contentText(raw, "input_text", "output_text", "text")
}

// responsesUsage is the Responses usage object: input_tokens counts every
// input token, cached ones included.
func responsesUsage(u Usage) map[string]any {
	in := u.Input + u.CacheRead + u.CacheWrite
	return map[string]any{
		"input_tokens":          in,
		"input_tokens_details":  map[string]any{"cached_tokens": u.CacheRead, "cache_write_tokens": u.CacheWrite},
		"output_tokens":         u.Output,
		"output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens":          in + u.Output,
	}
}

// responsesCallee is how a reply's tool call goes out: its type, name and
// namespace, from the tools the request offered.
func responsesCallee(body json.RawMessage) func(name string) (typ, ns, short string) {
	var b responsesBody
	_ = json.Unmarshal(body, &b)
	custom := map[string]bool{}
	inner := map[string][2]string{}
	for _, t := range b.Tools {
		switch t.Type {
		case "custom":
			custom[t.Name] = true
		case "namespace":
			for _, f := range t.Tools {
				inner[toolName(t.Name, f.Name)] = [2]string{t.Name, f.Name}
			}
		}
	}
	return func(name string) (string, string, string) {
		if custom[name] {
			return "custom_tool_call", "", name
		}
		if n, ok := inner[name]; ok {
			return "function_call", n[0], n[1]
		}
		return "function_call", "", name
	}
}

// responsesItems are the output items of rep: a message with its text,
// then one item per tool call; done gives their final form, else the form
// output_item.added announces.
func responsesItems(req *Request, rep *Reply, seq int, done bool) []map[string]any {
	var items []map[string]any
	status := "in_progress"
	if done {
		status = "completed"
	}
	if rep.Text != "" {
		content := []any{}
		if done {
			content = []any{map[string]any{"type": "output_text", "text": rep.Text, "annotations": []any{}}}
		}
		items = append(items, map[string]any{"id": fmt.Sprintf("msg_mt%d", seq), "type": "message",
			"status": status, "role": "assistant", "content": content})
	}
	callee := responsesCallee(req.Body)
	for i, c := range rep.ToolCalls {
		typ, ns, name := callee(c.Name)
		it := map[string]any{"id": fmt.Sprintf("fc_mt%d_%d", seq, i), "type": typ, "status": status,
			"call_id": c.ID, "name": name}
		if ns != "" {
			it["namespace"] = ns
		}
		args := ""
		if done {
			args = string(c.Input)
		}
		if typ == "custom_tool_call" {
			if done {
				args = customInput(c.Input)
			}
			it["input"] = args
		} else {
			it["arguments"] = args
		}
		items = append(items, it)
	}
	return items
}

// customInput is a custom tool call's text: Input as a JSON string, else
// Input itself.
func customInput(in json.RawMessage) string {
	var s string
	if json.Unmarshal(in, &s) == nil {
		return s
	}
	return string(in)
}

func (responsesCodec) answer(w http.ResponseWriter, req *Request, rep *Reply, seq int) {
	created := time.Now().Unix()
	response := func(status string, output []map[string]any, usage any) map[string]any {
		r := map[string]any{"id": fmt.Sprintf("resp_mt%d", seq), "object": "response", "created_at": created,
			"status": status, "model": rep.Model, "output": output}
		if usage != nil {
			r["usage"] = usage
		}
		return r
	}
	final := responsesItems(req, rep, seq, true)
	if !req.Stream {
		writeJSON(w, http.StatusOK, response("completed", final, responsesUsage(rep.Usage)))
		return
	}
	e := newSSE(w)
	n := 0
	event := func(typ string, fields map[string]any) {
		fields["type"], fields["sequence_number"] = typ, n
		n++
		e.event(typ, fields)
	}
	event("response.created", map[string]any{"response": response("in_progress", []map[string]any{}, nil)})
	event("response.in_progress", map[string]any{"response": response("in_progress", []map[string]any{}, nil)})
	for i, added := range responsesItems(req, rep, seq, false) {
		id := added["id"]
		event("response.output_item.added", map[string]any{"output_index": i, "item": added})
		switch added["type"] {
		case "message":
			part := func(text string) map[string]any {
				return map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
			}
			at := map[string]any{"item_id": id, "output_index": i, "content_index": 0}
			with := func(k string, v any) map[string]any {
				m := map[string]any{k: v}
				for k, v := range at {
					m[k] = v
				}
				return m
			}
			event("response.content_part.added", with("part", part("")))
			// The text in two pieces, as a model streams it.
			t := rep.Text
			cut := len(t) / 2
			for cut > 0 && t[cut]&0xC0 == 0x80 {
				cut--
			}
			for _, piece := range []string{t[:cut], t[cut:]} {
				if piece != "" {
					event("response.output_text.delta", with("delta", piece))
				}
			}
			event("response.output_text.done", with("text", t))
			event("response.content_part.done", with("part", part(t)))
		case "function_call":
			args := final[i]["arguments"]
			event("response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": i, "delta": args})
			event("response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": i, "arguments": args})
		case "custom_tool_call":
			input := final[i]["input"]
			event("response.custom_tool_call_input.delta", map[string]any{"item_id": id, "output_index": i, "delta": input})
			event("response.custom_tool_call_input.done", map[string]any{"item_id": id, "output_index": i, "input": input})
		}
		event("response.output_item.done", map[string]any{"output_index": i, "item": final[i]})
	}
	event("response.completed", map[string]any{"response": response("completed", final, responsesUsage(rep.Usage))})
}

// responsesErrors are OpenAI's error type and code for the endpoint's
// error types.
var responsesErrors = map[string][2]string{
	"rate_limit_error": {"requests", "rate_limit_exceeded"},
	"overloaded_error": {"server_error", "server_is_overloaded"},
	"api_error":        {"server_error", "server_error"},
}

// fail answers e as OpenAI does (openAIError). A type the table does not
// know is sent as both type and code (a script naming OpenAI's own code,
// "insufficient_quota").
func (responsesCodec) fail(w http.ResponseWriter, e *Error) {
	typ, code := e.Type, e.Type
	if tc, ok := responsesErrors[e.Type]; ok {
		typ, code = tc[0], tc[1]
	}
	openAIError(w, e, typ, code)
}
