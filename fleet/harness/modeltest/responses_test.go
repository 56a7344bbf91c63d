package modeltest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// postResponses sends a Responses request the way Codex does.
func postResponses(t *testing.T, url, body string) *http.Response {
	t.Helper()
	return postJSON(t, url, body, "accept", "text/event-stream")
}

// respEvent is one server-sent event of a Responses stream.
type respEvent struct {
	Name string
	Data map[string]any
	Raw  string
}

// respItem is an output item as a client decodes it.
type respItem struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	Status    string `json:"status"`
	Role      string `json:"role"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Arguments string `json:"arguments"`
	Input     string `json:"input"`
	Content   []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

type respUsage struct {
	Input   int `json:"input_tokens"`
	Details struct {
		Cached     int `json:"cached_tokens"`
		CacheWrite int `json:"cache_write_tokens"`
	} `json:"input_tokens_details"`
	Output int `json:"output_tokens"`
	Total  int `json:"total_tokens"`
}

type respResponse struct {
	ID     string     `json:"id"`
	Object string     `json:"object"`
	Status string     `json:"status"`
	Model  string     `json:"model"`
	Output []respItem `json:"output"`
	Usage  *respUsage `json:"usage"`
}

// respStream reads named events; every event's data names its own type
// and numbers it in order.
func respStream(t *testing.T, resp *http.Response) []respEvent {
	t.Helper()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("content-type"))
	var out []respEvent
	sc := bufio.NewScanner(resp.Body)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "event: "):
			require.Empty(t, name, "an event without data")
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			require.NotEmpty(t, name, "data without an event name: %q", line)
			raw := strings.TrimPrefix(line, "data: ")
			var d map[string]any
			require.NoError(t, json.Unmarshal([]byte(raw), &d), raw)
			require.Equal(t, name, d["type"])
			require.EqualValues(t, len(out), d["sequence_number"])
			out = append(out, respEvent{Name: name, Data: d, Raw: raw})
			name = ""
		default:
			t.Fatalf("a line that is neither event nor data: %q", line)
		}
	}
	require.NoError(t, sc.Err())
	return out
}

func (e respEvent) decode(t *testing.T, key string, v any) {
	t.Helper()
	b, err := json.Marshal(e.Data[key])
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, v), "%s", b)
}

// respAssembled is what Codex takes from a stream: the text deltas, the
// items as output_item.done gives them, and the completed response.
func respAssembled(t *testing.T, evs []respEvent) (text string, items []respItem, done respResponse) {
	t.Helper()
	require.NotEmpty(t, evs)
	require.Equal(t, "response.created", evs[0].Name)
	require.Equal(t, "response.completed", evs[len(evs)-1].Name)
	var b strings.Builder
	for _, e := range evs {
		switch e.Name {
		case "response.output_text.delta":
			b.WriteString(e.Data["delta"].(string))
		case "response.output_item.done":
			var it respItem
			e.decode(t, "item", &it)
			require.EqualValues(t, len(items), e.Data["output_index"])
			items = append(items, it)
		}
	}
	evs[len(evs)-1].decode(t, "response", &done)
	return b.String(), items, done
}

// codexLikeTools are tools as Codex offers them: functions, a custom tool,
// an MCP server's namespace, a hosted tool.
const codexLikeTools = `"tools":[{"type":"function","name":"exec_command","strict":false,"parameters":{}},
	{"type":"custom","name":"apply_patch","format":{"type":"grammar"}},
	{"type":"namespace","name":"mcp__agent_fleet","description":"intercom","tools":[
		{"type":"function","name":"intercom_send","parameters":{}},{"type":"function","name":"intercom_reply","parameters":{}}]},
	{"type":"web_search","external_web_access":false}]`

func TestResponsesStreamsTextAndUsage(t *testing.T) {
	s := Start(t, Step{Name: "hello", API: Responses, Expect: All(PromptContains("say pong"), Offers("exec_command", "mcp__agent_fleet__intercom_send")),
		Reply: Reply{Text: "pong — done", Usage: Usage{Input: 100, Output: 7, CacheRead: 40, CacheWrite: 3}}})
	resp := postResponses(t, s.URL+"/v1/responses", `{"model":"scripted","stream":true,"instructions":"be brief",`+codexLikeTools+`,
		"input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"you are codex"}]},
		{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context/>"}]},
		{"type":"message","role":"user","content":[{"type":"input_text","text":"say pong"}]}],
		"tool_choice":"auto","parallel_tool_calls":true,"store":false,"include":["reasoning.encrypted_content"]}`)
	evs := respStream(t, resp)
	names := make([]string, len(evs))
	for i, e := range evs {
		names[i] = e.Name
	}
	require.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added",
		"response.content_part.added", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}, names)
	text, items, done := respAssembled(t, evs)
	require.Equal(t, "pong — done", text)
	require.Len(t, items, 1)
	require.Equal(t, "message", items[0].Type)
	require.Equal(t, "assistant", items[0].Role)
	require.Equal(t, "completed", items[0].Status)
	require.Equal(t, "pong — done", items[0].Content[0].Text)
	require.Equal(t, "output_text", items[0].Content[0].Type)
	require.Equal(t, "completed", done.Status)
	require.Equal(t, "scripted", done.Model, "the request's model answers")
	require.Equal(t, "response", done.Object)
	require.NotNil(t, done.Usage)
	require.Equal(t, 143, done.Usage.Input, "input tokens count cached ones")
	require.Equal(t, 40, done.Usage.Details.Cached)
	require.Equal(t, 3, done.Usage.Details.CacheWrite)
	require.Equal(t, 7, done.Usage.Output)
	require.Equal(t, 150, done.Usage.Total)
	var created respResponse
	evs[0].decode(t, "response", &created)
	require.Equal(t, done.ID, created.ID)
	require.Equal(t, "in_progress", created.Status)

	reqs := s.Requests()
	require.Len(t, reqs, 1)
	r := reqs[0]
	require.Equal(t, Responses, r.API)
	require.Equal(t, "be brief\nyou are codex", r.System, "instructions and developer messages")
	require.True(t, r.Stream)
	require.Equal(t, "scripted", r.Model)
	require.Equal(t, []string{"exec_command", "apply_patch", "mcp__agent_fleet__intercom_send", "mcp__agent_fleet__intercom_reply", "web_search"}, r.Tools)
	require.Len(t, r.Messages, 2)
	require.Equal(t, "<environment_context/>\nsay pong", r.Prompt())
}

// A multi-step turn: the model calls an MCP tool (in its namespace) and a
// function that fails; the client sends the calls back with their outputs;
// the model answers.
func TestResponsesToolCallsAndResults(t *testing.T) {
	s := Start(t,
		Step{Name: "call", Expect: Offers("mcp__agent_fleet__intercom_send"),
			Reply: Reply{Text: "Telling boss.", ToolCalls: []ToolCall{
				Call("mcp__agent_fleet__intercom_send", map[string]string{"to": "boss", "message": "héllo"}),
				{ID: "call_fixed", Name: "exec_command", Input: json.RawMessage(`{"cmd":"cat /nope"}`)},
			}}},
		Step{Name: "answer", Expect: ToolResultContains("No such file"), Reply: Reply{Text: "sent"}},
	)
	resp := postResponses(t, s.URL+"/v1/responses", `{"model":"m","stream":true,`+codexLikeTools+`,
		"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"tell boss"}]}]}`)
	evs := respStream(t, resp)
	text, items, done := respAssembled(t, evs)
	require.Equal(t, "Telling boss.", text)
	require.Len(t, items, 3)
	require.Equal(t, "message", items[0].Type)
	send, exec := items[1], items[2]
	require.Equal(t, "function_call", send.Type)
	require.Equal(t, "intercom_send", send.Name, "a namespaced tool is called by its own name")
	require.Equal(t, "mcp__agent_fleet", send.Namespace)
	require.JSONEq(t, `{"to":"boss","message":"héllo"}`, send.Arguments)
	require.True(t, strings.HasPrefix(send.CallID, "call_mt"), send.CallID)
	require.Equal(t, "exec_command", exec.Name)
	require.Empty(t, exec.Namespace)
	require.Equal(t, "call_fixed", exec.CallID)
	require.Len(t, done.Output, 3, "response.completed lists the items")
	var added []respItem
	var argsDone []string
	for _, e := range evs {
		switch e.Name {
		case "response.output_item.added":
			var it respItem
			e.decode(t, "item", &it)
			added = append(added, it)
		case "response.function_call_arguments.done":
			argsDone = append(argsDone, e.Data["arguments"].(string))
		}
	}
	require.Len(t, added, 3)
	require.Equal(t, "in_progress", added[1].Status)
	require.Equal(t, "intercom_send", added[1].Name)
	require.Empty(t, added[1].Arguments, "arguments follow in deltas")
	require.Equal(t, []string{send.Arguments, exec.Arguments}, argsDone)

	// The next request, as Codex sends it: the items, then the outputs.
	cont := fmt.Sprintf(`{"model":"m","stream":true,%s,"input":[
		{"type":"message","role":"user","content":[{"type":"input_text","text":"tell boss"}]},
		{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"xyz"},
		{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Telling boss."}]},
		{"type":"function_call","id":"fc_1","status":"completed","name":"intercom_send","namespace":"mcp__agent_fleet","arguments":%q,"call_id":%q},
		{"type":"function_call","id":"fc_2","status":"completed","name":"exec_command","arguments":%q,"call_id":"call_fixed"},
		{"type":"function_call_output","call_id":%q,"output":"Wall time: 0.0104 seconds\nOutput:\n{\"ok\":true,\"to\":\"boss\"}"},
		{"type":"function_call_output","call_id":"call_fixed","output":[{"type":"input_text","text":"cat: /nope: No such file or directory"}]}]}`,
		codexLikeTools, send.Arguments, send.CallID, exec.Arguments, send.CallID)
	text, _, _ = respAssembled(t, respStream(t, postResponses(t, s.URL+"/v1/responses", cont)))
	require.Equal(t, "sent", text)

	r := s.Requests()[1]
	require.Equal(t, "tell boss", r.Prompt())
	require.Len(t, r.Messages, 4, "user, assistant with its calls, two outputs")
	asst := r.Messages[1]
	require.Equal(t, "assistant", asst.Role)
	require.Equal(t, "Telling boss.", asst.Text)
	require.Len(t, asst.ToolCalls, 2)
	require.Equal(t, "mcp__agent_fleet__intercom_send", asst.ToolCalls[0].Name, "named as the script names it")
	require.Equal(t, send.CallID, asst.ToolCalls[0].ID)
	require.JSONEq(t, `{"to":"boss","message":"héllo"}`, string(asst.ToolCalls[0].Input))
	require.Equal(t, "tool", r.Messages[2].Role)
	require.Equal(t, send.CallID, r.Messages[2].ToolResults[0].CallID)
	require.Contains(t, r.Messages[2].ToolResults[0].Content, `"ok":true`)
	require.Equal(t, &ToolResult{CallID: "call_fixed", Content: "cat: /nope: No such file or directory"}, r.LastToolResult())
}

// A custom tool (Codex's apply_patch for models that take a grammar) is
// called with free-form input, and its output comes back the same way.
func TestResponsesCustomToolCall(t *testing.T) {
	patch := "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch"
	s := Start(t,
		Step{Reply: Reply{ToolCalls: []ToolCall{Call("apply_patch", patch)}}},
		Step{Expect: ToolResultContains("Success"), Reply: Reply{Text: "patched"}},
	)
	evs := respStream(t, postResponses(t, s.URL+"/v1/responses", `{"model":"m","stream":true,`+codexLikeTools+`,"input":"add a.txt"}`))
	text, items, _ := respAssembled(t, evs)
	require.Empty(t, text)
	require.Len(t, items, 1)
	require.Equal(t, "custom_tool_call", items[0].Type)
	require.Equal(t, "apply_patch", items[0].Name)
	require.Equal(t, patch, items[0].Input)
	require.Contains(t, evs[3].Raw, `"type":"response.custom_tool_call_input.delta"`)

	cont, err := json.Marshal(map[string]any{"model": "m", "stream": true, "input": []any{
		map[string]any{"role": "user", "content": "add a.txt"},
		map[string]any{"type": "custom_tool_call", "call_id": items[0].CallID, "name": "apply_patch", "input": patch},
		map[string]any{"type": "custom_tool_call_output", "call_id": items[0].CallID, "output": "Success. Updated: A a.txt"},
	}})
	require.NoError(t, err)
	respAssembled(t, respStream(t, postResponses(t, s.URL+"/responses", string(cont))))
	r := s.Requests()[1]
	require.Equal(t, "/responses", r.Path, "the path without /v1 is the same API")
	require.Equal(t, "add a.txt", r.Prompt(), "a message without a type is a message")
	call := r.Messages[1].ToolCalls[0]
	require.Equal(t, "apply_patch", call.Name)
	var in string
	require.NoError(t, json.Unmarshal(call.Input, &in))
	require.Equal(t, patch, in, "free-form input is a JSON string")
	require.Nil(t, r.Tools, "no tools offered")
}

func TestResponsesWholeAnswer(t *testing.T) {
	s := Start(t, Step{Reply: Reply{Text: "whole", Model: "other-model", Usage: Usage{Input: 3, Output: 2},
		ToolCalls: []ToolCall{Call("mcp__agent_fleet__intercom_reply", map[string]string{"message": "yes"})}}})
	resp := postResponses(t, s.URL+"/v1/responses", `{"model":"m",`+codexLikeTools+`,"input":"hi"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("content-type"))
	var v respResponse
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	require.Equal(t, "response", v.Object)
	require.Equal(t, "completed", v.Status)
	require.Equal(t, "other-model", v.Model)
	require.Len(t, v.Output, 2)
	require.Equal(t, "whole", v.Output[0].Content[0].Text)
	require.Equal(t, "intercom_reply", v.Output[1].Name)
	require.Equal(t, "mcp__agent_fleet", v.Output[1].Namespace)
	require.Equal(t, 3, v.Usage.Input)
	require.Equal(t, 5, v.Usage.Total)
	require.False(t, s.Requests()[0].Stream)
}

func TestResponsesErrors(t *testing.T) {
	s := Start(t,
		Step{Name: "limited", Reply: Reply{Error: RateLimit(3 * time.Second)}, Times: 2},
		Step{Reply: Reply{Error: ServerError()}},
		Step{Reply: Reply{Error: &Error{Status: http.StatusTooManyRequests, Type: "insufficient_quota", Message: "You exceeded your current quota"}}},
		Step{Reply: Reply{Text: "ok"}},
	)
	body := `{"model":"m","stream":true,"input":"hi"}`
	type openAIError struct {
		Error struct {
			Message, Type string
			Code          *string
			Param         *string
		}
	}
	for range 2 {
		resp := postResponses(t, s.URL+"/v1/responses", body)
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		require.Equal(t, "3", resp.Header.Get("retry-after"))
		require.Equal(t, "application/json", resp.Header.Get("content-type"))
		var e openAIError
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
		require.Equal(t, "rate_limit_exceeded", *e.Error.Code)
		require.Equal(t, "requests", e.Error.Type)
		require.NotEmpty(t, e.Error.Message)
	}
	resp := postResponses(t, s.URL+"/v1/responses", body)
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	require.Empty(t, resp.Header.Get("retry-after"))
	var e openAIError
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	require.Equal(t, "server_error", e.Error.Type)
	resp = postResponses(t, s.URL+"/v1/responses", body)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	require.Equal(t, "insufficient_quota", *e.Error.Code, "OpenAI's own code passes through")
	text, _, _ := respAssembled(t, respStream(t, postResponses(t, s.URL+"/v1/responses", body)))
	require.Equal(t, "ok", text)
}

// A request the script did not expect, or that cannot be read, fails the
// test (checked on a stand-in testing.TB) and is answered with an error the
// client sees.
func TestResponsesUnexpectedRequestFails(t *testing.T) {
	rec := &recordingTB{TB: t}
	s := Start(rec, Step{Expect: PromptContains("the task"), Reply: Reply{Text: "x"}})
	s.AllowLeftover()
	resp := postResponses(t, s.URL+"/v1/responses", `{"model":"m","input":"something else"}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp = postResponses(t, s.URL+"/v1/responses", `{"model":"m","input":[{"type":"hologram"}]}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	b, _ := io.ReadAll(resp.Body)
	require.Contains(t, string(b), `"type":"invalid_request_error"`)
	resp = postResponses(t, s.URL+"/v1/responses", `{"model":"m","input":[{"type":"function_call","call_id":"c","name":"x","arguments":"{not json"}]}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, err := http.Get(s.URL + "/v1/models")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "Codex lists no models from a custom provider: not answered")
	errs := rec.errs()
	require.Len(t, errs, 4)
	require.Contains(t, errs[0], "refused the request")
	require.Contains(t, errs[1], `unknown type "hologram"`)
	require.Contains(t, errs[2], "not JSON")
	require.Contains(t, errs[3], "unexpected GET /v1/models")
}
