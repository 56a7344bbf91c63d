//go:build !windows

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

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
	server := newMCPServer(w.alpha, newLogger(io.Discard, "error"))
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

type toolResult struct {
	text       string
	structured map[string]any
	isError    bool
}

func (w *mcpWorld) call(t *testing.T, name string, args map[string]any) toolResult {
	t.Helper()
	res, err := w.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	return decodeResult(t, res)
}

func decodeResult(t *testing.T, res *mcp.CallToolResult) toolResult {
	t.Helper()
	r := toolResult{isError: res.IsError}
	require.Len(t, res.Content, 1)
	r.text = res.Content[0].(*mcp.TextContent).Text
	if res.StructuredContent != nil {
		data, _ := json.Marshal(res.StructuredContent)
		require.NoError(t, json.Unmarshal(data, &r.structured))
	}
	return r
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
	require.Contains(t, schemas["intercom_reply"]["properties"], "askId")
	require.Contains(t, schemas["intercom_pending"]["properties"], "askId")
}

func TestMCPTools(t *testing.T) {
	w := newMCPWorld(t)
	ctx := context.Background()

	r := w.call(t, "intercom_whoami", nil)
	require.Equal(t, "session_id: alpha\nname: Alpha\ncwd: /work/alpha", r.text)
	require.Equal(t, "alpha", r.structured["session_id"])

	r = w.call(t, "intercom_list", map[string]any{})
	require.Contains(t, r.text, "- Beta (beta) - /work/beta (cli)")
	require.Len(t, r.structured["sessions"], 1)
	r = w.call(t, "intercom_list", map[string]any{"scope": "directory", "include_self": true})
	require.Contains(t, r.text, "[self, same cwd]")

	r = w.call(t, "intercom_send", map[string]any{"to": "beta", "message": "hello",
		"attachments": []any{map[string]any{"type": "file", "name": "a.txt", "content": "A"}}})
	require.False(t, r.isError, r.text)
	require.Equal(t, "Message sent to beta.", r.text)
	require.Equal(t, true, r.structured["ok"])
	pend, _ := w.beta.Pending(ctx, intercom.PendingRequest{})
	require.Equal(t, "hello", pend.Unread[0].Text)

	r = w.call(t, "intercom_send", map[string]any{"to": "nobody", "message": "x"})
	require.True(t, r.isError)
	require.Equal(t, `Message to "nobody" was not delivered: Session not found`, r.text)
	r = w.call(t, "intercom_send", map[string]any{"to": "alpha", "message": "x"})
	require.True(t, r.isError)
	require.Contains(t, r.text, "Cannot message the current session")
	r = w.call(t, "intercom_send", map[string]any{"to": "beta", "message": "x", "extra": 1})
	require.True(t, r.isError, "strict schemas")
	r = w.call(t, "intercom_set_summary", map[string]any{"summary": strings.Repeat("s", 401)})
	require.True(t, r.isError, "maxLength 400")
	r = w.call(t, "intercom_set_summary", map[string]any{"summary": "reviewing"})
	require.Equal(t, "Summary updated.", r.text)
	require.Eventually(t, func() bool {
		l, _ := w.beta.List(ctx, intercom.ListRequest{})
		return len(l.Sessions) == 1 && l.Sessions[0].Status == "reviewing"
	}, 5*time.Second, 10*time.Millisecond)

	// beta writes to alpha: the footer appears, pending lists it.
	res, err := w.beta.Send(ctx, intercom.SendRequest{To: "alpha", Text: "status please"})
	require.NoError(t, err)
	require.True(t, res.OK)
	r = w.call(t, "intercom_status", nil)
	require.Contains(t, r.text, "Connected: Yes\nSession ID: alpha\nActive sessions: 2\nUnread messages: 1\nPending asks: 0")
	r = w.call(t, "intercom_whoami", nil)
	require.Contains(t, r.text, "[1 unread message and 0 pending asks waiting — call intercom_pending with mark_read: true]")
	r = w.call(t, "intercom_pending", map[string]any{"mark_read": true})
	require.Equal(t, "- Beta: status please", r.text)
	require.Len(t, r.structured["unread_messages"], 1)
	r = w.call(t, "intercom_pending", nil)
	require.Equal(t, "No unread messages.", r.text)
	r = w.call(t, "intercom_whoami", nil)
	require.NotContains(t, r.text, "waiting")

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
	r = w.call(t, "intercom_pending", nil)
	require.Contains(t, r.text, "Pending asks:\n- Beta: deploy now? [askId: ask-")
	asks := r.structured["pending_asks"].([]any)
	askID := asks[0].(map[string]any)["askId"].(string)
	r = w.call(t, "intercom_pending", map[string]any{"askId": askID})
	require.Contains(t, r.text, "Pending ask "+askID+"\nFrom: Beta\n\ndeploy now?")
	r = w.call(t, "intercom_reply", map[string]any{"message": "yes", "askId": "ask-unknown"})
	require.True(t, r.isError)
	r = w.call(t, "intercom_reply", map[string]any{"message": "yes", "askId": askID})
	require.False(t, r.isError, r.text)
	require.Equal(t, "Message sent to Beta.", r.text)
	select {
	case a := <-askDone:
		require.True(t, a.Replied)
		require.Equal(t, "yes", a.Reply.Text)
	case <-time.After(5 * time.Second):
		t.Fatal("beta's ask never got the reply")
	}
	r = w.call(t, "intercom_reply", map[string]any{"message": "again"})
	require.True(t, r.isError)
	require.Contains(t, r.text, "no pending asks")
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
	require.False(t, r.isError, r.text)
	require.Equal(t, "Reply from beta:\n42", r.text)
	require.Equal(t, true, r.structured["ok"])

	r = w.call(t, "intercom_ask", map[string]any{"to": "beta", "message": "slow?", "timeout_ms": 200})
	require.False(t, r.isError, "a timed-out ask is a successful pending result")
	require.Contains(t, r.text, "No reply from \"beta\" within 200 ms. The ask (message ")
	require.Contains(t, r.text, ") stays open")
	require.Equal(t, true, r.structured["pending"])
	asked, _ := r.structured["message_id"].(string)
	_, err := w.beta.Reply(ctx, intercom.ReplyRequest{Text: "late"})
	require.NoError(t, err)
	r = w.call(t, "intercom_pending", nil)
	require.Equal(t, "- Beta (reply to your message "+asked+"): late", r.text)

	r = w.call(t, "intercom_ask", map[string]any{"to": "beta", "message": "x", "timeout_ms": 200000})
	require.True(t, r.isError, "timeout_ms is at most 120000")
}

// A client that speaks protocol 2025-06-18 (what Claude Code speaks), over
// raw JSON lines.
func TestMCPProtocol20250618(t *testing.T) {
	w := newMCPWorld(t)
	server := newMCPServer(w.alpha, newLogger(io.Discard, "error"))
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

// Two real `agent-fleet mcp` processes as two sessions, driven by the SDK
// client over stdio.
// mcpProcess starts agent-fleet mcp as session id in agent directory dir
// and connects an MCP client to it.
func mcpProcess(t *testing.T, dir, id string) *mcp.ClientSession {
	t.Helper()
	cmd := as(t, dir, id, "mcp")
	cmd.Stderr = os.Stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestMCPTwoProcesses(t *testing.T) {
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	connect := func(id string) *mcp.ClientSession { return mcpProcess(t, dir, id) }
	a, b := connect("mcp-a"), connect("mcp-b")
	call := func(cs *mcp.ClientSession, name string, args map[string]any) toolResult {
		return toolCaller(t, cs)(name, args)
	}
	// Registered at startup: visible before any tool call of b's.
	r := call(a, "intercom_list", nil)
	require.Contains(t, r.text, "mcp-b")

	r = call(a, "intercom_send", map[string]any{"to": "mcp-b", "message": "hi b"})
	require.False(t, r.isError, r.text)
	r = call(b, "intercom_pending", nil)
	require.Equal(t, "- mcp-a: hi b", r.text)

	// An ask from a answered by b's intercom_reply within the same call.
	replied := make(chan toolResult, 1)
	go func() {
		for i := 0; i < 200; i++ {
			p := call(b, "intercom_pending", nil)
			if strings.Contains(p.text, "Pending asks:") {
				replied <- call(b, "intercom_reply", map[string]any{"message": "pong"})
				return
			}
			time.Sleep(25 * time.Millisecond)
		}
		replied <- toolResult{text: "never saw the ask", isError: true}
	}()
	r = call(a, "intercom_ask", map[string]any{"to": "mcp-b", "message": "ping?", "timeout_ms": 20000})
	require.Equal(t, "Reply from mcp-b:\npong", r.text)
	rr := <-replied
	require.False(t, rr.isError, rr.text)

	// A timed-out ask comes back pending; its late reply shows up.
	r = call(a, "intercom_ask", map[string]any{"to": "mcp-b", "message": "later?", "timeout_ms": 300})
	require.False(t, r.isError)
	require.Contains(t, r.text, "stays open")
	askID, _ := r.structured["message_id"].(string)
	require.NotEmpty(t, askID)
	require.Contains(t, r.text, askID)
	r = call(b, "intercom_reply", map[string]any{"message": "late pong"})
	require.False(t, r.isError, r.text)
	r = call(a, "intercom_pending", nil)
	require.Equal(t, "- mcp-b (reply to your message "+askID+"): late pong", r.text, "the late reply names its ask")
	unread, _ := r.structured["unread_messages"].([]any)
	require.Len(t, unread, 1)
	require.Equal(t, askID, unread[0].(map[string]any)["reply_to"])

	// The CLI under the same id acts through the MCP server's holder.
	out, err := as(t, dir, "mcp-a", "intercom", "status", "--json").Output()
	require.NoError(t, err)
	var st intercom.StatusResult
	require.NoError(t, json.Unmarshal(out, &st))
	require.True(t, st.Holder)
}

// Closing stdin shuts the server down cleanly (the outbox is kept by
// Session.Close; see the intercom package tests).
func TestMCPStdinCloseKeepsOutbox(t *testing.T) {
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	p := intercom.NewPaths(dir)
	cmd := as(t, dir, "keeper", "mcp")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	_, err = fmt.Fprintln(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`)
	require.NoError(t, err)
	sc := bufio.NewScanner(stdout)
	require.True(t, sc.Scan())
	require.True(t, json.Valid(sc.Bytes()), "stdout carries only MCP frames: %s", sc.Text())
	require.NoError(t, stdin.Close())
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("mcp did not exit after stdin closed")
	}
	require.False(t, intercom.HolderAlive(p, "keeper"), "the holder socket is gone")
	_, err = os.Stat(p.HolderSocket("keeper"))
	require.True(t, os.IsNotExist(err))
}

// A second MCP server of an id already held acts through the first one's
// holder; when the first exits, the second takes the session over and
// every tool keeps working, team tools included.
func TestMCPSecondServerTakesTheSessionOver(t *testing.T) {
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	connect := func(id string) *mcp.ClientSession { return mcpProcess(t, dir, id) }
	call := func(cs *mcp.ClientSession, name string, args map[string]any) toolResult {
		return toolCaller(t, cs)(name, args)
	}
	first := connect("dup")
	second := connect("dup")
	peer := connect("peer")
	r := call(second, "intercom_status", nil)
	require.False(t, r.isError, r.text)

	require.NoError(t, first.Close()) // the holder goes away
	require.Eventually(t, func() bool {
		return !intercom.HolderAlive(intercom.NewPaths(dir), "dup")
	}, 10*time.Second, 20*time.Millisecond)

	r = call(second, "intercom_whoami", nil)
	require.False(t, r.isError, r.text)
	require.Contains(t, r.text, "dup")
	require.Eventually(t, func() bool {
		return strings.Contains(call(peer, "intercom_list", nil).text, "dup")
	}, 10*time.Second, 50*time.Millisecond, "registered again, by the second server")
	r = call(peer, "intercom_send", map[string]any{"to": "dup", "message": "still there?"})
	require.False(t, r.isError, r.text)
	r = call(second, "intercom_pending", nil)
	require.Contains(t, r.text, "still there?")
	r = call(second, "intercom_team", nil)
	require.False(t, r.isError, r.text)
	require.True(t, intercom.HolderAlive(intercom.NewPaths(dir), "dup"), "the second server holds it now")
}

// A line that is not JSON does not end the server: it is dropped and the
// next request is answered.
func TestMCPSurvivesALineThatIsNotJSON(t *testing.T) {
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	cmd := as(t, dir, "garbled", "mcp")
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	_, err = io.WriteString(in, "this is not json\n\n"+
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
	require.NoError(t, err)
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	require.True(t, sc.Scan(), "an answer: %v", sc.Err())
	var resp struct {
		ID     int             `json:"id"`
		Result json.RawMessage `json:"result"`
	}
	require.NoError(t, json.Unmarshal(sc.Bytes(), &resp), sc.Text())
	require.Equal(t, 1, resp.ID)
	require.Contains(t, string(resp.Result), "protocolVersion")
}
