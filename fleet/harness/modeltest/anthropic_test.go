package modeltest

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// event is one server-sent event.
type event struct {
	Name string
	Data map[string]any
}

func readEvents(t *testing.T, r io.Reader) []event {
	t.Helper()
	var out []event
	var name string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d map[string]any
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d), line)
			require.Equal(t, name, d["type"], "an event's name is its data's type")
			out = append(out, event{Name: name, Data: d})
		case line == "":
		default:
			t.Fatalf("not an SSE line: %q", line)
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// post sends a Messages request the way the Anthropic SDK does.
func post(t *testing.T, url string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	return postJSON(t, url, string(b), "x-api-key", "sk-test", "anthropic-version", "2023-06-01")
}

// A Claude Code request as it comes: system blocks, a string message,
// block messages with tool_use and tool_result (string content, block
// content with a tool_reference, is_error), a mid-conversation system
// message announcing deferred tools, thinking blocks the common shape
// leaves out.
var claudeLikeRequest = map[string]any{
	"model":  "claude-opus-5-5",
	"stream": true,
	"system": []any{
		map[string]any{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332"},
		map[string]any{"type": "text", "text": "You are a Claude agent.", "cache_control": map[string]any{"type": "ephemeral"}},
	},
	"messages": []any{
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "<system-reminder>x</system-reminder>"},
			map[string]any{"type": "text", "text": "read notes.txt"},
		}},
		map[string]any{"role": "system", "content": []any{map[string]any{"type": "text", "text": "# Environment\n\n" +
			"The following deferred tools are now available via ToolSearch. Their schemas are NOT loaded:\n" +
			"WebFetch\nmcp__agent-fleet__intercom_send\n\nAvailable agent types: x"}}},
		map[string]any{"role": "assistant", "content": []any{
			map[string]any{"type": "thinking", "thinking": "hm", "signature": "s"},
			map[string]any{"type": "tool_use", "id": "toolu_1", "name": "ToolSearch", "input": map[string]any{"query": "select:mcp__agent-fleet__intercom_send"}},
		}},
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": []any{
				map[string]any{"type": "tool_reference", "tool_name": "mcp__agent-fleet__intercom_send"}}},
			map[string]any{"type": "text", "text": "Tool loaded."},
		}},
		map[string]any{"role": "assistant", "content": []any{
			map[string]any{"type": "text", "text": "Reading."},
			map[string]any{"type": "tool_use", "id": "toolu_2", "name": "Read", "input": map[string]any{"file_path": "/x/notes.txt"}},
			map[string]any{"type": "tool_use", "id": "toolu_3", "name": "Bash", "input": map[string]any{"command": "false"}},
		}},
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "tool_result", "tool_use_id": "toolu_2", "content": "1\tthe notes"},
			map[string]any{"type": "tool_result", "tool_use_id": "toolu_3", "is_error": true,
				"content": []any{map[string]any{"type": "text", "text": "Exit code 1"}}},
		}},
		map[string]any{"role": "user", "content": "and now?"},
	},
	"tools": []any{
		map[string]any{"name": "Read", "input_schema": map[string]any{"type": "object"}},
		map[string]any{"name": "Bash", "input_schema": map[string]any{"type": "object"}},
		map[string]any{"name": "mcp__agent-fleet__intercom_send", "defer_loading": true, "input_schema": map[string]any{"type": "object"}},
	},
	"max_tokens": 128000,
}

func TestAnthropicDecode(t *testing.T) {
	var got *Request
	s := Start(t, Step{Name: "decode", API: Anthropic, Expect: func(r *Request) error { got = r; return nil }, Reply: Reply{Text: "ok"}})
	resp := post(t, s.URL+"/v1/messages?beta=true", claudeLikeRequest)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, _ = io.Copy(io.Discard, resp.Body)

	require.Equal(t, Anthropic, got.API)
	require.Equal(t, "/v1/messages", got.Path)
	require.Equal(t, "claude-opus-5-5", got.Model)
	require.True(t, got.Stream)
	require.Equal(t, "sk-test", got.Header.Get("x-api-key"))
	require.Equal(t, "x-anthropic-billing-header: cc_version=2.1.332\nYou are a Claude agent.", got.System)
	require.Equal(t, []string{"Read", "Bash", "mcp__agent-fleet__intercom_send", "WebFetch"}, got.Tools,
		"the tools sent, then the deferred ones announced (each once)")
	require.True(t, got.HasTool("WebFetch"))
	require.Len(t, got.Messages, 7)
	require.Equal(t, "system", got.Messages[1].Role)
	require.Equal(t, "<system-reminder>x</system-reminder>\nread notes.txt\nTool loaded.\nand now?", got.Prompt())
	require.Equal(t, []ToolCall{{ID: "toolu_1", Name: "ToolSearch", Input: json.RawMessage(`{"query":"select:mcp__agent-fleet__intercom_send"}`)}}, got.Messages[2].ToolCalls)
	require.Equal(t, "", got.Messages[2].Text, "thinking is not text")
	require.Equal(t, []ToolResult{{CallID: "toolu_1", Content: "tool_reference:mcp__agent-fleet__intercom_send"}}, got.Messages[3].ToolResults)
	require.Equal(t, "Tool loaded.", got.Messages[3].Text)
	require.Equal(t, "Reading.", got.Messages[4].Text)
	require.Len(t, got.Messages[4].ToolCalls, 2)
	require.Equal(t, []ToolResult{{CallID: "toolu_2", Content: "1\tthe notes"}, {CallID: "toolu_3", Content: "Exit code 1", IsError: true}},
		got.Messages[5].ToolResults)
	require.Equal(t, &ToolResult{CallID: "toolu_3", Content: "Exit code 1", IsError: true}, got.LastToolResult())
	require.Equal(t, "and now?", got.Messages[6].Text)
	require.JSONEq(t, string(mustJSON(t, claudeLikeRequest)), string(got.Body))

	// A string system prompt.
	s.Add(Step{Expect: func(r *Request) error { got = r; return nil }, Reply: Reply{Text: "ok"}})
	resp = post(t, s.URL+"/v1/messages", map[string]any{"model": "m", "system": "be brief", "max_tokens": 10,
		"messages": []any{map[string]any{"role": "user", "content": "hi"}}})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "be brief", got.System)
	require.False(t, got.Stream)
	require.Empty(t, got.Tools)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func TestAnthropicStreamText(t *testing.T) {
	s := Start(t, Step{Reply: Reply{Text: "pong ✓", Usage: Usage{Input: 100, Output: 7, CacheRead: 40, CacheWrite: 3}}})
	resp := post(t, s.URL+"/v1/messages?beta=true", map[string]any{"model": "claude-x", "stream": true, "max_tokens": 10,
		"messages": []any{map[string]any{"role": "user", "content": "ping"}}})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("content-type"))
	require.NotEmpty(t, resp.Header.Get("request-id"))
	evs := readEvents(t, resp.Body)
	var names []string
	for _, e := range evs {
		names = append(names, e.Name)
	}
	require.Equal(t, []string{"message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
		"content_block_stop", "message_delta", "message_stop"}, names)
	msg := evs[0].Data["message"].(map[string]any)
	require.Equal(t, "assistant", msg["role"])
	require.Equal(t, "claude-x", msg["model"], "the request's model when the reply names none")
	require.Equal(t, []any{}, msg["content"])
	require.Nil(t, msg["stop_reason"])
	require.Equal(t, map[string]any{"input_tokens": 100.0, "output_tokens": 1.0, "cache_read_input_tokens": 40.0, "cache_creation_input_tokens": 3.0}, msg["usage"])
	require.Equal(t, map[string]any{"type": "text", "text": ""}, evs[2].Data["content_block"])
	text := ""
	for _, e := range evs[3:5] {
		d := e.Data["delta"].(map[string]any)
		require.Equal(t, "text_delta", d["type"])
		require.Equal(t, 0.0, e.Data["index"])
		text += d["text"].(string)
	}
	require.Equal(t, "pong ✓", text)
	delta := evs[6].Data
	require.Equal(t, "end_turn", delta["delta"].(map[string]any)["stop_reason"])
	require.Equal(t, 7.0, delta["usage"].(map[string]any)["output_tokens"])
	require.Equal(t, 100.0, delta["usage"].(map[string]any)["input_tokens"])
}

func TestAnthropicStreamToolCalls(t *testing.T) {
	s := Start(t, Step{Reply: Reply{Text: "Let me look.", ToolCalls: []ToolCall{
		Call("Read", map[string]any{"file_path": "/tmp/a"}),
		{ID: "toolu_fixed", Name: "mcp__agent-fleet__intercom_send", Input: json.RawMessage(`{"to":"boss","message":"hi"}`)},
	}}})
	resp := post(t, s.URL+"/v1/messages", map[string]any{"model": "m", "stream": true, "max_tokens": 10,
		"messages": []any{map[string]any{"role": "user", "content": "go"}}})
	evs := readEvents(t, resp.Body)
	type block struct {
		start map[string]any
		input string
		text  string
		stop  bool
	}
	blocks := map[int]*block{}
	var stop string
	for _, e := range evs {
		switch e.Name {
		case "content_block_start":
			blocks[int(e.Data["index"].(float64))] = &block{start: e.Data["content_block"].(map[string]any)}
		case "content_block_delta":
			b := blocks[int(e.Data["index"].(float64))]
			d := e.Data["delta"].(map[string]any)
			switch d["type"] {
			case "input_json_delta":
				b.input += d["partial_json"].(string)
			case "text_delta":
				b.text += d["text"].(string)
			}
		case "content_block_stop":
			blocks[int(e.Data["index"].(float64))].stop = true
		case "message_delta":
			stop = e.Data["delta"].(map[string]any)["stop_reason"].(string)
		}
	}
	require.Equal(t, "tool_use", stop)
	require.Len(t, blocks, 3)
	require.Equal(t, "Let me look.", blocks[0].text)
	require.Equal(t, "tool_use", blocks[1].start["type"])
	require.Equal(t, "Read", blocks[1].start["name"])
	require.Equal(t, map[string]any{}, blocks[1].start["input"], "the input comes in deltas")
	require.Regexp(t, `^call_mt1_0$`, blocks[1].start["id"], "a generated id")
	require.JSONEq(t, `{"file_path":"/tmp/a"}`, blocks[1].input)
	require.Equal(t, "toolu_fixed", blocks[2].start["id"])
	require.JSONEq(t, `{"to":"boss","message":"hi"}`, blocks[2].input)
	for i, b := range blocks {
		require.True(t, b.stop, "block %d stopped", i)
	}

	// A call with no arguments still streams a JSON object.
	s.Add(Step{Reply: Reply{ToolCalls: []ToolCall{{Name: "mcp__agent-fleet__intercom_whoami"}}}})
	resp = post(t, s.URL+"/v1/messages", map[string]any{"model": "m", "stream": true, "max_tokens": 10,
		"messages": []any{map[string]any{"role": "user", "content": "who"}}})
	input := ""
	for _, e := range readEvents(t, resp.Body) {
		if d, ok := e.Data["delta"].(map[string]any); ok && d["type"] == "input_json_delta" {
			input += d["partial_json"].(string)
		}
	}
	require.Equal(t, "{}", input)
}

func TestAnthropicWholeMessage(t *testing.T) {
	s := Start(t, Step{Reply: Reply{Text: "here", Model: "claude-haiku-9", Usage: Usage{Input: 9, Output: 4},
		ToolCalls: []ToolCall{Call("Bash", map[string]any{"command": "ls"})}}})
	resp := post(t, s.URL+"/v1/messages", map[string]any{"model": "m", "max_tokens": 10,
		"messages": []any{map[string]any{"role": "user", "content": "go"}}})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("content-type"))
	var msg map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&msg))
	require.Equal(t, "message", msg["type"])
	require.Equal(t, "claude-haiku-9", msg["model"])
	require.Equal(t, "tool_use", msg["stop_reason"])
	require.Equal(t, []any{
		map[string]any{"type": "text", "text": "here"},
		map[string]any{"type": "tool_use", "id": "call_mt1_0", "name": "Bash", "input": map[string]any{"command": "ls"}},
	}, msg["content"])
	require.Equal(t, map[string]any{"input_tokens": 9.0, "output_tokens": 4.0, "cache_read_input_tokens": 0.0, "cache_creation_input_tokens": 0.0}, msg["usage"])

	s.Add(Step{Reply: Reply{Text: "plain"}})
	resp = post(t, s.URL+"/v1/messages", map[string]any{"model": "m", "max_tokens": 10,
		"messages": []any{map[string]any{"role": "user", "content": "go"}}})
	msg = nil
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&msg))
	require.Equal(t, "end_turn", msg["stop_reason"])
	require.Equal(t, map[string]any{"input_tokens": 12.0, "output_tokens": 5.0, "cache_read_input_tokens": 0.0, "cache_creation_input_tokens": 0.0},
		msg["usage"], "default figures")
}

func TestAnthropicErrors(t *testing.T) {
	s := Start(t,
		Step{Name: "limited", Reply: Reply{Error: RateLimit(1500 * time.Millisecond)}, Times: 2},
		Step{Name: "overloaded", Reply: Reply{Error: Overloaded()}},
		Step{Name: "broken", Reply: Reply{Error: ServerError()}},
	)
	body := map[string]any{"model": "m", "stream": true, "max_tokens": 10, "messages": []any{map[string]any{"role": "user", "content": "go"}}}
	for _, want := range []struct {
		status           int
		kind, retryAfter string
	}{{429, "rate_limit_error", "2"}, {429, "rate_limit_error", "2"}, {529, "overloaded_error", ""}, {500, "api_error", ""}} {
		resp := post(t, s.URL+"/v1/messages?beta=true", body)
		require.Equal(t, want.status, resp.StatusCode)
		require.Equal(t, want.retryAfter, resp.Header.Get("retry-after"), "retry-after in whole seconds, rounded up")
		require.Equal(t, "application/json", resp.Header.Get("content-type"))
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
		require.Equal(t, "error", e.Type)
		require.Equal(t, want.kind, e.Error.Type)
		require.NotEmpty(t, e.Error.Message)
	}
	require.Zero(t, s.Remaining())
}

func TestAnthropicHousekeeping(t *testing.T) {
	s := Start(t)
	resp, err := http.Head(s.URL + "/api/hello")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "Claude Code's connectivity probe")

	resp = post(t, s.URL+"/v1/messages/count_tokens?beta=true", map[string]any{"model": "m",
		"messages": []any{map[string]any{"role": "user", "content": strings.Repeat("word ", 100)}}})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var n map[string]int
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&n))
	require.Len(t, n, 1)
	require.Greater(t, n["input_tokens"], 100)
	require.Empty(t, s.Requests(), "housekeeping takes no step and is not a model call")

	resp = post(t, s.URL+"/v1/messages/count_tokens", map[string]any{"model": "m"})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

// What the script did not expect fails the test and gets an error the
// harness stops on.
func TestAnthropicUnexpected(t *testing.T) {
	rec := &recordingTB{TB: t}
	s := Start(rec, Step{Name: "only", Expect: PromptContains("hello"), Reply: Reply{Text: "hi"}})
	good := map[string]any{"model": "m", "max_tokens": 10, "messages": []any{map[string]any{"role": "user", "content": "hello"}}}

	resp := post(t, s.URL+"/v1/messages", map[string]any{"model": "m", "max_tokens": 10, "messages": []any{map[string]any{"role": "user", "content": "bye"}}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "Expect refused it")
	require.Len(t, rec.errs(), 1)
	require.Contains(t, rec.errs()[0], `step 1 "only" refused the request`)

	resp = post(t, s.URL+"/v1/messages", map[string]any{"model": "m", "messages": "not a list"})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	var e struct{ Error struct{ Type string } }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	require.Equal(t, "invalid_request_error", e.Error.Type)
	resp = post(t, s.URL+"/v1/messages", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hello"}}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "no model")
	require.Len(t, rec.errs(), 3)
	require.Contains(t, rec.errs()[2], "undecodable request: model: field required")

	resp = post(t, s.URL+"/v1/messages", good)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp = post(t, s.URL+"/v1/messages", good)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, rec.errs()[3], "request after the script ended")

	r, err := http.Get(s.URL + "/v1/models")
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, http.StatusNotFound, r.StatusCode)
	require.Contains(t, rec.errs()[4], "unexpected GET /v1/models")
	require.Len(t, rec.errs(), 5)
}

func TestDeferredTools(t *testing.T) {
	require.Nil(t, deferredTools("no list here"))
	require.Equal(t, []string{"A", "mcp__x__y"}, deferredTools("intro\nThe following deferred tools are now available via ToolSearch. Load them:\nA\nmcp__x__y\n\nB"))
	require.Equal(t, []string{"A"}, deferredTools("The following deferred tools are now available via ToolSearch:\nA\n- not a name"))
	require.Equal(t, ToolCall{Name: "ToolSearch", Input: json.RawMessage(`{"query":"select:a,b"}`)}, ToolSearch("a", "b"))
}
