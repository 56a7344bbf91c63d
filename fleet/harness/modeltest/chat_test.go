package modeltest

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// postChat sends a Chat Completions request the way an OpenAI client does.
func postChat(t *testing.T, url, body string) *http.Response {
	t.Helper()
	return postJSON(t, url, body, "authorization", "Bearer test")
}

// chunk is one streamed Chat Completions chunk as a client reads it.
type chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role      string  `json:"role"`
			Content   *string `json:"content"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		Prompt     int `json:"prompt_tokens"`
		Completion int `json:"completion_tokens"`
		Total      int `json:"total_tokens"`
		Details    struct {
			Cached int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// stream reads data-only events up to [DONE]; it fails on anything else.
func stream(t *testing.T, resp *http.Response) []chunk {
	t.Helper()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("content-type"))
	var out []chunk
	sc := bufio.NewScanner(resp.Body)
	done := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		require.False(t, done, "an event after [DONE]: %q", line)
		data, ok := strings.CutPrefix(line, "data: ")
		require.True(t, ok, "a line that is not data: %q", line)
		if data == "[DONE]" {
			done = true
			continue
		}
		var c chunk
		require.NoError(t, json.Unmarshal([]byte(data), &c), data)
		require.Equal(t, "chat.completion.chunk", c.Object)
		out = append(out, c)
	}
	require.NoError(t, sc.Err())
	require.True(t, done, "the stream ends with [DONE]")
	return out
}

// assembled is what a client makes of the chunks: text, tool calls by
// index, the finish reason.
func assembled(t *testing.T, cs []chunk) (text string, calls []ToolCall, finish string) {
	t.Helper()
	var b strings.Builder
	for _, c := range cs {
		for _, ch := range c.Choices {
			require.Equal(t, 0, ch.Index)
			if ch.Delta.Content != nil {
				b.WriteString(*ch.Delta.Content)
			}
			for _, tc := range ch.Delta.ToolCalls {
				if tc.Index == len(calls) {
					require.NotEmpty(t, tc.ID, "a tool call's first chunk has its id")
					require.Equal(t, "function", tc.Type)
					calls = append(calls, ToolCall{ID: tc.ID, Name: tc.Function.Name})
				}
				require.Less(t, tc.Index, len(calls))
				calls[tc.Index].Input = append(calls[tc.Index].Input, tc.Function.Arguments...)
			}
			if ch.FinishReason != nil {
				require.Empty(t, finish, "one finish reason")
				finish = *ch.FinishReason
			}
		}
	}
	return b.String(), calls, finish
}

func TestChatStreamsTextAndUsage(t *testing.T) {
	s := Start(t, Step{Name: "hello", API: ChatCompletions, Expect: PromptContains("say pong"),
		Reply: Reply{Text: "pong — done", Usage: Usage{Input: 100, Output: 7, CacheRead: 40}}})
	resp := postChat(t, s.URL+"/v1/chat/completions", `{"model":"scripted","stream":true,"stream_options":{"include_usage":true},
		"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"say pong"}]}`)
	cs := stream(t, resp)
	text, calls, finish := assembled(t, cs)
	require.Equal(t, "pong — done", text)
	require.Empty(t, calls)
	require.Equal(t, "stop", finish)
	require.Equal(t, "assistant", cs[0].Choices[0].Delta.Role)
	require.Equal(t, "scripted", cs[0].Model, "the request's model answers")
	last := cs[len(cs)-1]
	require.Empty(t, last.Choices, "the usage chunk has no choices")
	require.NotNil(t, last.Usage)
	require.Equal(t, 140, last.Usage.Prompt, "prompt tokens count cached ones")
	require.Equal(t, 40, last.Usage.Details.Cached)
	require.Equal(t, 7, last.Usage.Completion)
	require.Equal(t, 147, last.Usage.Total)

	reqs := s.Requests()
	require.Len(t, reqs, 1)
	require.Equal(t, ChatCompletions, reqs[0].API)
	require.Equal(t, "be brief", reqs[0].System)
	require.True(t, reqs[0].Stream)
	require.Equal(t, "scripted", reqs[0].Model)
}

func TestChatStreamWithoutUsageOption(t *testing.T) {
	s := Start(t, Step{Reply: Reply{Text: "x"}})
	cs := stream(t, postChat(t, s.URL+"/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	for _, c := range cs {
		require.Nil(t, c.Usage, "usage only when stream_options.include_usage")
		require.Len(t, c.Choices, 1)
	}
	require.Equal(t, "/chat/completions", s.Requests()[0].Path, "the path without /v1 is the same API")
}

// A multi-step turn: the model calls two tools (one fails), the client
// sends the results with the tool_call_ids it was given, the model answers.
func TestChatToolCallsAndResults(t *testing.T) {
	var firstIDs []string
	s := Start(t,
		Step{Name: "call", Expect: Offers("read", "agent-fleet_intercom_send"),
			Reply: Reply{ToolCalls: []ToolCall{
				Call("agent-fleet_intercom_send", map[string]string{"to": "boss", "message": "héllo"}),
				{ID: "call_fixed", Name: "read", Input: json.RawMessage(`{"filePath":"/nope"}`)},
			}}},
		Step{Name: "answer", Expect: All(ToolResultContains("no such file"), func(r *Request) error {
			m := r.Messages[len(r.Messages)-3]
			if m.Role != "assistant" || len(m.ToolCalls) != 2 {
				return errors.New("the assistant's tool calls are in the conversation")
			}
			firstIDs = []string{m.ToolCalls[0].ID, m.ToolCalls[1].ID}
			return nil
		}), Reply: Reply{Text: "sent"}},
	)
	tools := `"tools":[{"type":"function","function":{"name":"read","parameters":{}}},{"type":"function","function":{"name":"agent-fleet_intercom_send","parameters":{}}}]`
	cs := stream(t, postChat(t, s.URL+"/v1/chat/completions", `{"model":"m","stream":true,`+tools+`,"messages":[{"role":"user","content":[{"type":"text","text":"tell boss"}]}]}`))
	text, calls, finish := assembled(t, cs)
	require.Empty(t, text)
	require.Equal(t, "tool_calls", finish)
	require.Len(t, calls, 2)
	require.Equal(t, "agent-fleet_intercom_send", calls[0].Name)
	require.JSONEq(t, `{"to":"boss","message":"héllo"}`, string(calls[0].Input))
	require.True(t, strings.HasPrefix(calls[0].ID, "call_mt"), calls[0].ID)
	require.Equal(t, "call_fixed", calls[1].ID)

	asst, err := json.Marshal(map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{
		map[string]any{"id": calls[0].ID, "type": "function", "function": map[string]any{"name": calls[0].Name, "arguments": string(calls[0].Input)}},
		map[string]any{"id": calls[1].ID, "type": "function", "function": map[string]any{"name": calls[1].Name, "arguments": string(calls[1].Input)}},
	}})
	require.NoError(t, err)
	cs = stream(t, postChat(t, s.URL+"/v1/chat/completions", `{"model":"m","stream":true,`+tools+`,"messages":[
		{"role":"user","content":[{"type":"text","text":"tell boss"}]},`+string(asst)+`,
		{"role":"tool","tool_call_id":"`+calls[0].ID+`","content":"sent to boss"},
		{"role":"tool","tool_call_id":"call_fixed","content":[{"type":"text","text":"Error: no such file"}]}]}`))
	text, _, finish = assembled(t, cs)
	require.Equal(t, "sent", text)
	require.Equal(t, "stop", finish)
	require.Equal(t, []string{calls[0].ID, "call_fixed"}, firstIDs)

	r := s.Requests()[1]
	require.Equal(t, "tell boss", r.Prompt())
	require.Len(t, r.Messages, 4)
	require.Equal(t, ToolResult{CallID: calls[0].ID, Content: "sent to boss"}, r.Messages[2].ToolResults[0])
	require.Equal(t, "tool", r.Messages[3].Role)
	require.Equal(t, &ToolResult{CallID: "call_fixed", Content: "Error: no such file"}, r.LastToolResult())
}

func TestChatWholeAnswer(t *testing.T) {
	s := Start(t,
		Step{Reply: Reply{Text: "whole", Model: "other-model", Usage: Usage{Input: 3, Output: 2}}},
		Step{Reply: Reply{ToolCalls: []ToolCall{Call("bash", map[string]string{"command": "ls"})}}},
	)
	var v struct {
		Object  string `json:"object"`
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Role      string  `json:"role"`
				Content   *string `json:"content"`
				ToolCalls []struct {
					ID       string `json:"id"`
					Type     string `json:"type"`
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
		} `json:"usage"`
	}
	resp := postChat(t, s.URL+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("content-type"))
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	require.Equal(t, "chat.completion", v.Object)
	require.Equal(t, "other-model", v.Model)
	require.Equal(t, "whole", *v.Choices[0].Message.Content)
	require.Equal(t, "stop", v.Choices[0].FinishReason)
	require.Equal(t, 3, v.Usage.Prompt)
	require.Equal(t, 2, v.Usage.Completion)

	v.Choices = nil
	resp = postChat(t, s.URL+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	m := v.Choices[0].Message
	require.Nil(t, m.Content, "no text: content is null")
	require.Equal(t, "tool_calls", v.Choices[0].FinishReason)
	require.Equal(t, "bash", m.ToolCalls[0].Function.Name)
	require.Equal(t, "function", m.ToolCalls[0].Type)
	require.JSONEq(t, `{"command":"ls"}`, m.ToolCalls[0].Function.Arguments)
	require.False(t, s.Requests()[1].Stream)
}

func TestChatErrors(t *testing.T) {
	s := Start(t,
		Step{Name: "limited", Reply: Reply{Error: RateLimit(3 * time.Second)}, Times: 2},
		Step{Reply: Reply{Error: ServerError()}},
		Step{Reply: Reply{Text: "ok"}},
	)
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for range 2 {
		resp := postChat(t, s.URL+"/v1/chat/completions", body)
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		require.Equal(t, "3", resp.Header.Get("retry-after"))
		var e struct {
			Error struct {
				Message, Type, Code string
				Param               *string
			}
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
		require.Equal(t, "rate_limit_exceeded", e.Error.Code)
		require.Equal(t, "rate_limit_error", e.Error.Type)
		require.NotEmpty(t, e.Error.Message)
	}
	resp := postChat(t, s.URL+"/v1/chat/completions", body)
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	require.Empty(t, resp.Header.Get("retry-after"))
	b, _ := io.ReadAll(resp.Body)
	require.Contains(t, string(b), `"code":"server_error"`)
	text, _, _ := assembled(t, stream(t, postChat(t, s.URL+"/v1/chat/completions", body)))
	require.Equal(t, "ok", text)
}

// A request the script did not expect fails the test (checked on a
// stand-in testing.TB), and is answered with an error the client sees.
func TestChatUnexpectedRequestFails(t *testing.T) {
	rec := &recordingTB{TB: t}
	s := Start(rec, Step{Expect: PromptContains("the task"), Reply: Reply{Text: "x"}})
	s.AllowLeftover()
	resp := postChat(t, s.URL+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"something else"}]}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp = postChat(t, s.URL+"/v1/chat/completions", `{"model":"m","messages":[{"role":"wizard","content":"x"}]}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	b, _ := io.ReadAll(resp.Body)
	require.Contains(t, string(b), `"type":"invalid_request_error"`)
	errs := rec.errs()
	require.Len(t, errs, 2)
	require.Contains(t, errs[0], "refused the request")
	require.Contains(t, errs[1], `unknown role "wizard"`)
}

// Respond answers from the request: the model echoes what it was asked.
func TestChatRespondFromRequest(t *testing.T) {
	s := Start(t, Step{Respond: func(r *Request) Reply {
		return Reply{ToolCalls: []ToolCall{Call("reply", map[string]string{"message": "re: " + r.Prompt()})}}
	}})
	_, calls, _ := assembled(t, stream(t, postChat(t, s.URL+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"ask 42"}]}`)))
	require.Len(t, calls, 1)
	require.JSONEq(t, `{"message":"re: ask 42"}`, string(calls[0].Input))
	require.NotEmpty(t, calls[0].ID, "ids are made up for a Respond's calls too")
}
