package modeltest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// API is one model wire API the endpoint speaks.
type API string

const (
	// Anthropic is the Anthropic Messages API: POST /v1/messages, streamed
	// as server-sent events or answered whole (Claude Code).
	Anthropic API = "anthropic-messages"
	// Responses is the OpenAI Responses API: POST /v1/responses, streamed
	// (Codex).
	Responses API = "openai-responses"
	// ChatCompletions is the OpenAI Chat Completions API: POST
	// /v1/chat/completions, streamed or whole (OpenCode and Pi through
	// their OpenAI-compatible providers).
	ChatCompletions API = "openai-chat"
)

// Step is one model call the script expects, and its answer. Steps are
// taken in order; a request that arrives when no step is left, or that the
// next step's Expect refuses, fails the test and is answered with a 500
// so the harness stops instead of waiting.
type Step struct {
	// Name labels the step in failure messages ("" = its position).
	Name string
	// API the request must use ("" = any).
	API API
	// Expect checks the request; an error fails the test. nil accepts any.
	Expect func(*Request) error
	// Reply is what the model answers.
	Reply Reply
	// Respond, when set, makes the answer from the request instead of
	// Reply: a model that answers what it was asked (an ask's id). It
	// runs with the server locked and must not call the Server.
	Respond func(*Request) Reply
	// Times answers this many consecutive requests with Reply (0 = 1):
	// a harness retries a 429 before it gives up.
	Times int
}

// Reply is a model's answer to one call: text, tool calls, or an error.
type Reply struct {
	// Text is the assistant's text (may be "" with ToolCalls).
	Text string
	// ToolCalls are tool calls the model makes; the stop reason is then
	// the API's tool-use one and the harness runs them and calls again.
	ToolCalls []ToolCall
	// Usage is reported with the answer (zero: small defaults).
	Usage Usage
	// Model names the answering model ("" = the request's model).
	Model string
	// Error answers with an HTTP error instead (the rest is ignored).
	Error *Error
}

// Usage is a call's token counts.
type Usage struct {
	Input, Output, CacheRead, CacheWrite int
}

// orDefault gives a reply without figures some plausible ones, so a
// harness that computes cost from usage has something to compute with.
func (u Usage) orDefault() Usage {
	if u == (Usage{}) {
		return Usage{Input: 12, Output: 5}
	}
	return u
}

// ToolCall is one tool call by the model, or one the harness sent back as
// part of the conversation.
type ToolCall struct {
	// ID is the call id ("" in a Reply = generated).
	ID   string
	Name string
	// Input is the JSON object of arguments.
	Input json.RawMessage
}

// Call is a ToolCall of name with args marshalled to JSON (it panics on
// args that cannot be marshalled: a bug in the test).
func Call(name string, args any) ToolCall {
	b, err := json.Marshal(args)
	if err != nil {
		panic(fmt.Sprintf("modeltest.Call(%q): %v", name, err))
	}
	return ToolCall{Name: name, Input: b}
}

// Error is an HTTP error answer in the API's own error shape.
type Error struct {
	// Status is the HTTP status (429, 500, 503, 529).
	Status int
	// Type is the API's error type (rate_limit_error, overloaded_error,
	// api_error; for the OpenAI APIs the error code).
	Type    string
	Message string
	// RetryAfter is sent as the retry-after header (0 = none), in
	// whole seconds.
	RetryAfter time.Duration
}

// RateLimit is a 429 rate_limit_error with a retry-after.
func RateLimit(retryAfter time.Duration) *Error {
	return &Error{Status: http.StatusTooManyRequests, Type: "rate_limit_error",
		Message: "Number of requests has exceeded your rate limit", RetryAfter: retryAfter}
}

// Overloaded is Anthropic's 529 overloaded_error.
func Overloaded() *Error {
	return &Error{Status: 529, Type: "overloaded_error", Message: "Overloaded"}
}

// ServerError is a 500 api_error.
func ServerError() *Error {
	return &Error{Status: http.StatusInternalServerError, Type: "api_error", Message: "Internal server error"}
}

// Request is one model call as the endpoint decoded it, the same shape for
// every API.
type Request struct {
	API    API
	Path   string
	Header http.Header
	Model  string
	Stream bool
	// System is the system prompt or instructions, parts joined by "\n".
	System string
	// Messages is the conversation so far, oldest first.
	Messages []Message
	// Tools are the names of the tools the harness offers.
	Tools []string
	// Body is the request body as sent.
	Body json.RawMessage
}

// Message is one turn of the conversation in a Request.
type Message struct {
	// Role is user, assistant, or tool (a tool result on its own).
	Role string
	// Text is the message's text parts joined by "\n".
	Text        string
	ToolCalls   []ToolCall
	ToolResults []ToolResult
}

// ToolResult is the harness's answer to a tool call.
type ToolResult struct {
	CallID  string
	Content string
	IsError bool
}

// HasTool reports whether the harness offered a tool of that name.
func (r *Request) HasTool(name string) bool {
	for _, t := range r.Tools {
		if t == name {
			return true
		}
	}
	return false
}

// Prompt is all user text of the conversation, joined by "\n".
func (r *Request) Prompt() string {
	var parts []string
	for _, m := range r.Messages {
		if m.Role == "user" && m.Text != "" {
			parts = append(parts, m.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// LastToolResult is the newest tool result in the conversation, nil if none.
func (r *Request) LastToolResult() *ToolResult {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if n := len(r.Messages[i].ToolResults); n > 0 {
			return &r.Messages[i].ToolResults[n-1]
		}
	}
	return nil
}

// summary is the request in one line for failure messages.
func (r *Request) summary() string {
	last := ""
	if n := len(r.Messages); n > 0 {
		m := r.Messages[n-1]
		last = fmt.Sprintf(", last %s message %.80q", m.Role, m.Text)
		if len(m.ToolResults) > 0 {
			last += fmt.Sprintf(" + %d tool results", len(m.ToolResults))
		}
	}
	return fmt.Sprintf("%s %s model %q, %d messages%s, %d tools", r.API, r.Path, r.Model, len(r.Messages), last, len(r.Tools))
}

// Expectations that tests combine.

// Offers is an Expect that the harness offered every named tool.
func Offers(names ...string) func(*Request) error {
	return func(r *Request) error {
		for _, n := range names {
			if !r.HasTool(n) {
				return fmt.Errorf("tool %q not offered (offered: %s)", n, strings.Join(r.Tools, ", "))
			}
		}
		return nil
	}
}

// Lacks is an Expect that the harness offered none of the named tools (a
// permission mode that takes them away).
func Lacks(names ...string) func(*Request) error {
	return func(r *Request) error {
		for _, n := range names {
			if r.HasTool(n) {
				return fmt.Errorf("tool %q offered (offered: %s)", n, strings.Join(r.Tools, ", "))
			}
		}
		return nil
	}
}

// PromptContains is an Expect that the user text holds every substring.
func PromptContains(subs ...string) func(*Request) error {
	return func(r *Request) error {
		p := r.Prompt()
		for _, s := range subs {
			if !strings.Contains(p, s) {
				return fmt.Errorf("prompt does not contain %q: %.300q", s, p)
			}
		}
		return nil
	}
}

// SystemContains is an Expect that the system prompt (or instructions)
// holds every substring.
func SystemContains(subs ...string) func(*Request) error {
	return func(r *Request) error {
		for _, s := range subs {
			if !strings.Contains(r.System, s) {
				return fmt.Errorf("system prompt does not contain %q: %.300q", s, r.System)
			}
		}
		return nil
	}
}

// ToolResultContains is an Expect that the newest tool result holds sub.
func ToolResultContains(sub string) func(*Request) error {
	return func(r *Request) error {
		res := r.LastToolResult()
		if res == nil {
			return fmt.Errorf("no tool result in the conversation")
		}
		if !strings.Contains(res.Content, sub) {
			return fmt.Errorf("tool result %q does not contain %q", res.Content, sub)
		}
		return nil
	}
}

// All is an Expect that every one of checks passes.
func All(checks ...func(*Request) error) func(*Request) error {
	return func(r *Request) error {
		for _, c := range checks {
			if c == nil {
				continue
			}
			if err := c(r); err != nil {
				return err
			}
		}
		return nil
	}
}
