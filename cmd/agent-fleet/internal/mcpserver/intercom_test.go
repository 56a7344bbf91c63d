//go:build !windows

package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver/mcptest"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// mcpWorld is an in-process broker with sessions and an MCP client
// connected over the SDK's in-memory transport to a server on "alpha".
type mcpWorld struct {
	p     intercom.Paths
	alpha *intercom.Session
	beta  *intercom.Session
	cs    *mcp.ClientSession
}

func sessionFor(t *testing.T, p intercom.Paths, id string) *intercom.Session {
	t.Helper()
	ident, err := intercom.ResolveIdentity(intercom.IdentityOptions{Kind: intercom.OneShot, Cwd: "/work/" + id,
		Getenv: func(k string) string {
			switch k {
			case intercom.SessionIDEnv:
				return id
			case intercom.SessionNameEnv:
				return strings.ToUpper(id[:1]) + id[1:]
			}
			return ""
		}})
	require.NoError(t, err)
	s, err := intercom.OpenSession(context.Background(), intercom.SessionConfig{Paths: p, Identity: ident})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func newMCPWorld(t *testing.T) *mcpWorld {
	t.Helper()
	p := intercom.NewPaths(shortDir(t))
	startTestBroker(t, p)
	w := &mcpWorld{p: p, alpha: sessionFor(t, p, "alpha"), beta: sessionFor(t, p, "beta")}
	server := New(w.alpha, Options{})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := server.Connect(context.Background(), st, nil)
	require.NoError(t, err)
	t.Cleanup(func() { ss.Close() })
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	w.cs, err = client.Connect(context.Background(), ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { w.cs.Close() })
	return w
}

func (w *mcpWorld) call(t *testing.T, name string, args map[string]any) mcptest.Result {
	t.Helper()
	res, err := w.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	return mcptest.Decode(t, res)
}

func TestMCPToolList(t *testing.T) {
	w := newMCPWorld(t)
	var names []string
	schemas := map[string]map[string]any{}
	for tool, err := range w.cs.Tools(context.Background(), nil) {
		require.NoError(t, err)
		names = append(names, tool.Name)
		data, _ := json.Marshal(tool.InputSchema)
		var s map[string]any
		require.NoError(t, json.Unmarshal(data, &s))
		schemas[tool.Name] = s
		require.Equal(t, false, s["additionalProperties"], tool.Name)
		require.NotEmpty(t, tool.Description)
	}
	require.ElementsMatch(t, []string{"intercom_whoami", "intercom_list", "intercom_send", "intercom_ask", "intercom_reply",
		"intercom_pending", "intercom_status", "intercom_set_summary"}, names)
	require.Equal(t, []any{"to", "message"}, schemas["intercom_ask"]["required"])
	timeout := schemas["intercom_ask"]["properties"].(map[string]any)["timeout_ms"].(map[string]any)
	require.EqualValues(t, 120000, timeout["maximum"])
	// One default ask wait, the CLI's too (agent-fleet intercom ask --timeout).
	require.Contains(t, timeout["description"], "(default 45000)")
	require.EqualValues(t, 45000, intercom.AskTimeout.Milliseconds())
	require.Contains(t, w.cs.InitializeResult().Instructions, "timeout_ms (default 45 s, at most 120 s: the same as agent-fleet intercom ask)")
	require.Contains(t, schemas["intercom_reply"]["properties"], "askId")
	require.Contains(t, schemas["intercom_pending"]["properties"], "askId")
}

func TestMCPTools(t *testing.T) {
	w := newMCPWorld(t)
	ctx := context.Background()

	r := w.call(t, "intercom_whoami", nil)
	require.Equal(t, "session_id: alpha\nname: Alpha\ncwd: /work/alpha", r.Text)
	require.Equal(t, "alpha", r.Structured["session_id"])

	r = w.call(t, "intercom_list", map[string]any{})
	require.Contains(t, r.Text, "- Beta (beta) - /work/beta (cli)")
	require.Len(t, r.Structured["sessions"], 1)
	r = w.call(t, "intercom_list", map[string]any{"scope": "directory", "include_self": true})
	require.Contains(t, r.Text, "[self, same cwd]")

	r = w.call(t, "intercom_send", map[string]any{"to": "beta", "message": "hello",
		"attachments": []any{map[string]any{"type": "file", "name": "a.txt", "content": "A"}}})
	require.False(t, r.IsError, r.Text)
	require.Equal(t, "Message sent to beta.", r.Text)
	require.Equal(t, true, r.Structured["ok"])
	pend, _ := w.beta.Pending(ctx, intercom.PendingRequest{})
	require.Equal(t, "hello", pend.Unread[0].Text)

	r = w.call(t, "intercom_send", map[string]any{"to": "nobody", "message": "x"})
	require.True(t, r.IsError)
	require.Equal(t, `Message to "nobody" was not delivered: Session not found — check the target with intercom_list.`, r.Text)
	r = w.call(t, "intercom_send", map[string]any{"to": "alpha", "message": "x"})
	require.True(t, r.IsError)
	require.Contains(t, r.Text, "Cannot message the current session")
	// A bad target is refused naming to, before anything is sent.
	r = w.call(t, "intercom_send", map[string]any{"to": strings.Repeat("x", 1_000_000), "message": "hi"})
	require.True(t, r.IsError)
	require.True(t, strings.HasPrefix(r.Text, "invalid request: to is 1000000 characters long, over the 512 a target may have"), r.Text)
	r = w.call(t, "intercom_send", map[string]any{"to": "beta\n", "message": "hi"})
	require.True(t, r.IsError)
	require.True(t, strings.HasPrefix(r.Text, `invalid request: to "beta\n" holds a control character (U+000A)`), r.Text)
	r = w.call(t, "intercom_ask", map[string]any{"to": "beta\n", "message": "hi?"})
	require.True(t, r.IsError)
	require.Contains(t, r.Text, "holds a control character")
	r = w.call(t, "intercom_send", map[string]any{"to": " beta ", "message": "spaced"})
	require.Equal(t, "Message sent to beta.", r.Text)
	r = w.call(t, "intercom_send", map[string]any{"to": "beta", "message": "x", "extra": 1})
	require.True(t, r.IsError, "strict schemas")
	r = w.call(t, "intercom_set_summary", map[string]any{"summary": strings.Repeat("s", 401)})
	require.True(t, r.IsError, "maxLength 400")
	// What the schema refuses is said for the model: the argument, the
	// rule, bounded, and what to do.
	r = w.call(t, "intercom_set_summary", map[string]any{"summary": strings.Repeat("s", 100_000)})
	require.True(t, r.IsError)
	require.Less(t, len(r.Text), 400, "the value is not repeated whole: %s", r.Text)
	require.Contains(t, r.Text, `Invalid arguments for intercom_set_summary: summary: maxLength: "sssssssssssssssssssssss…" (100000 bytes)`)
	require.Equal(t, false, r.Structured["ok"])
	r = w.call(t, "intercom_ask", map[string]any{"to": "beta", "message": "x", "timeout_ms": -5})
	require.Equal(t, "Invalid arguments for intercom_ask: timeout_ms: minimum: -5 is less than 1. Nothing was done; call it again with arguments that match its input schema.", r.Text)
	r = w.call(t, "intercom_set_summary", map[string]any{"summary": "reviewing"})
	require.Equal(t, "Summary updated.", r.Text)
	require.Eventually(t, func() bool {
		l, _ := w.beta.List(ctx, intercom.ListRequest{})
		return len(l.Sessions) == 1 && l.Sessions[0].Status == "reviewing"
	}, 5*time.Second, 10*time.Millisecond)

	// beta writes to alpha: the footer appears, pending lists it.
	res, err := w.beta.Send(ctx, intercom.SendRequest{To: "alpha", Text: "status please"})
	require.NoError(t, err)
	require.True(t, res.OK)
	r = w.call(t, "intercom_status", nil)
	require.Contains(t, r.Text, "Connected: Yes\nSession ID: alpha\nActive sessions: 2\nUnread messages: 1\nPending asks: 0")
	r = w.call(t, "intercom_whoami", nil)
	require.True(t, strings.HasSuffix(r.Text, "\n\n[1 unread message waiting — call intercom_pending with mark_read: true]"), r.Text)
	r = w.call(t, "intercom_pending", map[string]any{"mark_read": true})
	require.Regexp(t, `^- Beta \[contextId: ctx-[A-Za-z0-9_-]{43}\]: status please$`, r.Text)
	require.Len(t, r.Structured["unread_messages"], 1)
	r = w.call(t, "intercom_pending", nil)
	require.Equal(t, "No unread messages.", r.Text)
	r = w.call(t, "intercom_whoami", nil)
	require.NotContains(t, r.Text, "waiting")

	// beta asks alpha; alpha answers through intercom_reply by askId.
	askDone := make(chan *intercom.AskResult, 1)
	go func() {
		a, _ := w.beta.Ask(ctx, intercom.AskRequest{To: "alpha", Text: "deploy now?", Wait: 10 * time.Second})
		askDone <- a
	}()
	require.Eventually(t, func() bool {
		p, _ := w.alpha.Pending(ctx, intercom.PendingRequest{})
		return len(p.Asks) == 1
	}, 5*time.Second, 10*time.Millisecond)
	// The ask is unread and pending, and counted once, as an ask: marking
	// it read does not answer it.
	r = w.call(t, "intercom_whoami", nil)
	require.True(t, strings.HasSuffix(r.Text, "\n\n[1 pending ask waiting — call intercom_pending to read, then intercom_reply with its askId]"), r.Text)
	r = w.call(t, "intercom_pending", nil)
	require.True(t, strings.HasPrefix(r.Text, "No unread messages besides the asks below.\n\nPending asks:\n- Beta: deploy now? [askId: ask-"), r.Text)
	require.Len(t, r.Structured["unread_messages"], 1, "the adapters' key sets: the ask is an unread message too")
	_, err = w.beta.Send(ctx, intercom.SendRequest{To: "alpha", Text: "and a note"})
	require.NoError(t, err)
	r = w.call(t, "intercom_whoami", nil)
	require.True(t, strings.HasSuffix(r.Text, "\n\n[1 unread message and 1 pending ask waiting — call intercom_pending with mark_read: true, then intercom_reply with an askId]"), r.Text)
	r = w.call(t, "intercom_pending", map[string]any{"mark_read": true})
	require.True(t, strings.HasPrefix(r.Text, "- Beta [contextId: ctx-"), r.Text)
	asks := r.Structured["pending_asks"].([]any)
	entry := asks[0].(map[string]any)
	askID := entry["askId"].(string)
	// The adapters' keys: selector only when the sender has several asks.
	require.NotContains(t, entry, "selector")
	require.Contains(t, entry, "received_at")
	r = w.call(t, "intercom_pending", map[string]any{"askId": askID})
	require.Contains(t, r.Text, "Pending ask "+askID+"\nFrom: Beta\n\ndeploy now?")
	// One ask in full has the keys of a pending_asks entry, not camelCase.
	full := r.Structured["ask"].(map[string]any)
	delete(entry, "text")
	require.Subset(t, full, entry)
	require.Equal(t, "deploy now?", full["text"])
	require.NotContains(t, full, "receivedAt")
	require.NotContains(t, full, "preview")
	r = w.call(t, "intercom_reply", map[string]any{"message": "yes", "askId": "ask-unknown"})
	require.True(t, r.IsError)
	r = w.call(t, "intercom_reply", map[string]any{"message": "yes", "askId": askID})
	require.False(t, r.IsError, r.Text)
	require.Equal(t, "Message sent to Beta.", r.Text)
	select {
	case a := <-askDone:
		require.True(t, a.Replied)
		require.Equal(t, "yes", a.Reply.Text)
	case <-time.After(5 * time.Second):
		t.Fatal("beta's ask never got the reply")
	}
	r = w.call(t, "intercom_reply", map[string]any{"message": "again"})
	require.True(t, r.IsError)
	require.Contains(t, r.Text, "no pending asks")
}

func TestMCPAskRepliedAndTimedOut(t *testing.T) {
	w := newMCPWorld(t)
	ctx := context.Background()
	go func() {
		require.Eventually(t, func() bool {
			p, _ := w.beta.Pending(ctx, intercom.PendingRequest{})
			return len(p.Asks) == 1
		}, 5*time.Second, 10*time.Millisecond)
		_, _ = w.beta.Reply(ctx, intercom.ReplyRequest{Text: "42"})
	}()
	r := w.call(t, "intercom_ask", map[string]any{"to": "beta", "message": "the answer?", "timeout_ms": 10000})
	require.False(t, r.IsError, r.Text)
	require.Equal(t, "Reply from beta:\n42", r.Text)
	require.Equal(t, true, r.Structured["ok"])

	r = w.call(t, "intercom_ask", map[string]any{"to": "beta", "message": "slow?", "timeout_ms": 200})
	require.False(t, r.IsError, "a timed-out ask is a successful pending result")
	require.Contains(t, r.Text, "No reply from \"beta\" within 200 ms. The ask (message ")
	require.Contains(t, r.Text, ") stays open")
	require.Equal(t, true, r.Structured["pending"])
	asked, _ := r.Structured["message_id"].(string)
	_, err := w.beta.Reply(ctx, intercom.ReplyRequest{Text: "late"})
	require.NoError(t, err)
	r = w.call(t, "intercom_pending", nil)
	require.Equal(t, "- Beta (reply to your message "+asked+"): late", r.Text)

	r = w.call(t, "intercom_ask", map[string]any{"to": "beta", "message": "x", "timeout_ms": 200000})
	require.True(t, r.IsError, "timeout_ms is at most 120000")
}

// A client that speaks protocol 2025-06-18 (what Claude Code speaks), over
// raw JSON lines.
func TestMCPProtocol20250618(t *testing.T) {
	w := newMCPWorld(t)
	server := New(w.alpha, Options{})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Run(ctx, &mcp.IOTransport{Reader: inR, Writer: outW}) }()
	defer func() { cancel(); inW.Close(); <-done }()
	lines := bufio.NewScanner(outR)
	send := func(s string) { _, err := inW.Write([]byte(s + "\n")); require.NoError(t, err) }
	recv := func() map[string]any {
		require.True(t, lines.Scan())
		var m map[string]any
		require.NoError(t, json.Unmarshal(lines.Bytes(), &m))
		return m
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"claude-code","version":"2"}}}`)
	init := recv()
	require.Equal(t, "2025-06-18", init["result"].(map[string]any)["protocolVersion"])
	require.Contains(t, init["result"].(map[string]any)["instructions"], "intercom_send")
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"intercom_whoami","arguments":{}}}`)
	resp := recv()
	require.Equal(t, float64(2), resp["id"])
	content := resp["result"].(map[string]any)["content"].([]any)
	require.Equal(t, "session_id: alpha\nname: Alpha\ncwd: /work/alpha", content[0].(map[string]any)["text"])
	send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"nope","arguments":{}}}`)
	resp = recv()
	require.EqualValues(t, -32602, resp["error"].(map[string]any)["code"])
	send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"intercom_list","arguments":null}}`)
	resp = recv()
	require.Equal(t, float64(5), resp["id"], "null arguments are answered, not a crash")
	send(`{"jsonrpc":"2.0","id":4,"method":"ping"}`)
	require.Equal(t, map[string]any{}, recv()["result"])
}

// A message without text is refused by intercom_send, intercom_ask and
// intercom_reply with an isError result that says why, and nothing is
// sent: not "", not whitespace alone.
func TestMCPRefusesEmptyMessages(t *testing.T) {
	w := newMCPWorld(t)
	ctx := context.Background()
	askDone := make(chan struct{})
	go func() {
		defer close(askDone)
		_, _ = w.beta.Ask(ctx, intercom.AskRequest{To: "alpha", Text: "ready?", Wait: 10 * time.Second, OnTimeout: intercom.DeferOnTimeout})
	}()
	require.Eventually(t, func() bool {
		p, _ := w.alpha.Pending(ctx, intercom.PendingRequest{})
		return len(p.Asks) == 1
	}, 5*time.Second, 10*time.Millisecond)
	for _, text := range []string{"", " \n\t "} {
		problem := "the message is empty"
		if text != "" {
			problem = "the message is only whitespace"
		}
		for _, c := range []struct {
			tool string
			args map[string]any
		}{
			{"intercom_send", map[string]any{"to": "beta", "message": text}},
			{"intercom_ask", map[string]any{"to": "beta", "message": text, "timeout_ms": 100}},
			{"intercom_reply", map[string]any{"message": text}},
		} {
			r := w.call(t, c.tool, c.args)
			require.True(t, r.IsError, "%s %q: %s", c.tool, text, r.Text)
			require.Equal(t, "Nothing sent: "+problem+". Call "+c.tool+" again with the text to send in message.", r.Text)
			require.Equal(t, false, r.Structured["ok"])
		}
	}
	p, err := w.beta.Pending(ctx, intercom.PendingRequest{})
	require.NoError(t, err)
	require.Empty(t, p.Unread, "nothing reached beta")
	require.Empty(t, p.Asks)
	p, err = w.alpha.Pending(ctx, intercom.PendingRequest{})
	require.NoError(t, err)
	require.Len(t, p.Asks, 1, "beta's ask is still unanswered")
	r := w.call(t, "intercom_reply", map[string]any{"message": "yes"})
	require.False(t, r.IsError, r.Text)
	<-askDone
}

// A call the client cancelled (notifications/cancelled) still gets an
// answer from the SDK: it says what became of the work, not "context
// canceled".
func TestCancelledCallSaysWhatBecameOfIt(t *testing.T) {
	r := failure(fmt.Errorf("ask beta: %w", context.Canceled))
	require.True(t, r.IsError)
	text := r.Content[0].(*mcp.TextContent).Text
	require.True(t, strings.HasPrefix(text, "Cancelled by the client before the call finished"), text)
	require.Contains(t, text, "an ask it waited on was withdrawn")
	require.NotContains(t, text, "context canceled")
}
