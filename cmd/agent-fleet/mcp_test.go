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

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver/mcptest"
	"github.com/agent-fleet/agent-fleet/intercom"
)

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
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	connect := func(id string) *mcp.ClientSession { return mcpProcess(t, dir, id) }
	a, b := connect("mcp-a"), connect("mcp-b")
	call := func(cs *mcp.ClientSession, name string, args map[string]any) mcptest.Result {
		return mcptest.Caller(t, cs)(name, args)
	}
	// Registered at startup: visible before any tool call of b's.
	r := call(a, "intercom_list", nil)
	require.Contains(t, r.Text, "mcp-b")

	r = call(a, "intercom_send", map[string]any{"to": "mcp-b", "message": "hi b"})
	require.False(t, r.IsError, r.Text)
	r = call(b, "intercom_pending", nil)
	require.Regexp(t, `^- mcp-a \[contextId: ctx-[A-Za-z0-9_-]{43}\]: hi b$`, r.Text)

	// An ask from a answered by b's intercom_reply within the same call.
	replied := make(chan mcptest.Result, 1)
	go func() {
		for i := 0; i < 200; i++ {
			p := call(b, "intercom_pending", nil)
			if strings.Contains(p.Text, "Pending asks:") {
				replied <- call(b, "intercom_reply", map[string]any{"message": "pong"})
				return
			}
			time.Sleep(25 * time.Millisecond)
		}
		replied <- mcptest.Result{Text: "never saw the ask", IsError: true}
	}()
	r = call(a, "intercom_ask", map[string]any{"to": "mcp-b", "message": "ping?", "timeout_ms": 20000})
	require.Equal(t, "Reply from mcp-b:\npong", r.Text)
	rr := <-replied
	require.False(t, rr.IsError, rr.Text)

	// A timed-out ask comes back pending; its late reply shows up.
	r = call(a, "intercom_ask", map[string]any{"to": "mcp-b", "message": "later?", "timeout_ms": 300})
	require.False(t, r.IsError)
	require.Contains(t, r.Text, "stays open")
	askID, _ := r.Structured["message_id"].(string)
	require.NotEmpty(t, askID)
	require.Contains(t, r.Text, askID)
	r = call(b, "intercom_reply", map[string]any{"message": "late pong"})
	require.False(t, r.IsError, r.Text)
	r = call(a, "intercom_pending", nil)
	require.Equal(t, "- mcp-b (reply to your message "+askID+"): late pong", r.Text, "the late reply names its ask")
	unread, _ := r.Structured["unread_messages"].([]any)
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
	t.Parallel()
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
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	connect := func(id string) *mcp.ClientSession { return mcpProcess(t, dir, id) }
	call := func(cs *mcp.ClientSession, name string, args map[string]any) mcptest.Result {
		return mcptest.Caller(t, cs)(name, args)
	}
	first := connect("dup")
	second := connect("dup")
	peer := connect("peer")
	r := call(second, "intercom_status", nil)
	require.False(t, r.IsError, r.Text)

	require.NoError(t, first.Close()) // the holder goes away
	require.Eventually(t, func() bool {
		return !intercom.HolderAlive(intercom.NewPaths(dir), "dup")
	}, 10*time.Second, 20*time.Millisecond)

	r = call(second, "intercom_whoami", nil)
	require.False(t, r.IsError, r.Text)
	require.Contains(t, r.Text, "dup")
	require.Eventually(t, func() bool {
		return strings.Contains(call(peer, "intercom_list", nil).Text, "dup")
	}, 10*time.Second, 50*time.Millisecond, "registered again, by the second server")
	r = call(peer, "intercom_send", map[string]any{"to": "dup", "message": "still there?"})
	require.False(t, r.IsError, r.Text)
	r = call(second, "intercom_pending", nil)
	require.Contains(t, r.Text, "still there?")
	r = call(second, "intercom_team", nil)
	require.False(t, r.IsError, r.Text)
	require.True(t, intercom.HolderAlive(intercom.NewPaths(dir), "dup"), "the second server holds it now")
}

// A line that is not a JSON-RPC message does not end the server: it is
// answered as JSON-RPC 2.0 says (-32700 for what is not JSON, -32600 for
// JSON that is not a message, with the request's id when it has one) and
// the next request is answered.
func TestMCPSurvivesALineThatIsNotJSON(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	cmd := as(t, dir, "garbled", "mcp")
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	_, err = io.WriteString(in, "this is not json\n\n"+`{"foo":1}`+"\n"+`{"jsonrpc":"1.0","id":"x1","method":"ping"}`+"\n"+`"text"`+"\n"+
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n"+
		`[{"jsonrpc":"2.0","id":4,"method":"ping"}]`+"\n"+`{"jsonrpc":"2.0","id":5,"method":"ping"}`+"\n")
	require.NoError(t, err)
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	type answer struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	got := map[string]answer{} // by id, errors by "id code"
	for len(got) < 7 {
		require.True(t, sc.Scan(), "more answers: %v (have %v)", sc.Err(), got)
		var a answer
		require.NoError(t, json.Unmarshal(sc.Bytes(), &a), sc.Text())
		key := string(a.ID)
		if a.Error != nil {
			key = fmt.Sprintf("%s %d", a.ID, a.Error.Code)
		}
		for got[key].ID != nil {
			key += "+"
		}
		got[key] = a
	}
	require.Contains(t, got, "null -32700", "the line that is not JSON")
	require.Contains(t, got, "null -32600", "JSON that is not a message")
	require.Contains(t, got, "null -32600+", "JSON that is not an object")
	require.Contains(t, got, `"x1" -32600`, "a request of another JSON-RPC version, by its id")
	require.Contains(t, got, "null -32600++", "a batch, which 2025-06-18 has not")
	require.Contains(t, string(got["1"].Result), "protocolVersion", "initialize answered")
	require.Contains(t, got, "5", "the server still answers")
}
