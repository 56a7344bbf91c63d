// Package mcpserver is agent-fleet's MCP server (`agent-fleet mcp`): the
// intercom tools of the TypeScript adapters (docs/protocol.md §8.3), the
// team tools, and agent_fleet, which runs the CLI's fleet verbs. Serve runs
// it on stdio for one agent session; New builds it over any session for
// tests and other transports.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/history"
	"github.com/agent-fleet/agent-fleet/teams"
)

const instructions = `agent-fleet intercom: message other agent sessions on this machine.

- intercom_send for assignments, progress, results and anything that does not
  block you: it returns once the recipient has stored the message.
- intercom_ask only when your next step depends on the answer. It waits up to
  timeout_ms (default 45 s, at most 120 s: the same as agent-fleet intercom ask); if no reply comes in time the ask
  stays open and the reply appears later in intercom_pending.
- intercom_pending shows unread messages and asks waiting for your reply;
  answer an ask with intercom_reply (choose it with askId, or to/which).
- intercom_team shows your manager and coworkers with the targets to use:
  start there when you work in a team or for a manager.
- Address sessions by full id (from intercom_list or intercom_whoami), a unique
  name, or a unique id prefix of at least 4 characters. You cannot message
  yourself. Every result ends with a note when messages or asks are waiting.`

// Options configure New.
type Options struct {
	Logger  *slog.Logger
	Version string
	// MarkShownRead makes intercom_pending mark what it shows read (a fleet
	// worker's turn: its wake loop starts turns only for unread messages).
	MarkShownRead bool
	// Team adds intercom_team and intercom_join over the session's team.
	Team *teams.SessionTeam
	// Fleet, with Caller, adds agent_fleet acting as Caller.
	Fleet  *factory.Factory
	Caller string
	// Channel, when set, pushes the session's inbound mail into a Claude
	// Code client (its transport must be Channel.Transport's).
	Channel *Channel
	// History adds intercom_history over the session's history.
	History HistoryFunc
}

// New builds the MCP server of the intercom tools over ops, with the team
// and fleet tools opts asks for.
func New(ops intercom.Ops, opts Options) *mcp.Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	so := &mcp.ServerOptions{Instructions: instructions, Logger: opts.Logger, Capabilities: &mcp.ServerCapabilities{}}
	if opts.Channel != nil {
		opts.Channel.serverOptions(so)
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "agent-fleet", Title: "agent-fleet intercom", Version: opts.Version}, so)
	server.AddReceivingMiddleware(argumentErrors)
	it := &intercomTools{ops: ops, markShownRead: opts.MarkShownRead}
	if ops != nil {
		addIntercomTools(server, it)
	}
	if opts.Fleet != nil && opts.Caller != "" {
		addFleetTool(server, opts.Fleet, opts.Caller)
	}
	addTeamTools(server, it, opts.Team)
	if opts.History != nil {
		addHistoryTool(server, opts.History)
	}
	return server
}

// ServeOptions configure Serve.
type ServeOptions struct {
	// Harness is the agent harness (claude, codex, opencode, pi): it picks
	// the session id variable and the model label.
	Harness  string
	LogLevel string
	// Worker serves a fleet worker's harness turn: act only through the
	// worker shim's holder, without agent_fleet.
	Worker bool
	// PermissionHook, with Worker, answers one Codex PermissionRequest
	// hook on stdin instead of serving MCP (PermissionHook).
	PermissionHook bool
	// Share asks the broker's node to announce the session to the other
	// hosts (factory.AttachOptions.Share).
	Share bool
}

// Serve runs the MCP server on f's stdin and stdout for the session of
// this process's environment until the client closes stdin or ctx ends.
// stdout carries only MCP frames; logs go to stderr.
func Serve(ctx context.Context, f *factory.Factory, opts ServeOptions) error {
	if opts.PermissionHook && opts.Worker {
		return PermissionHook(ctx, f, opts.Harness)
	}
	log := f.Logger(opts.LogLevel)
	ms, err := openSession(ctx, f, log, opts)
	if err != nil {
		return err
	}
	defer ms.stop()
	so := Options{Logger: log, Version: f.Version, MarkShownRead: opts.Worker, Team: ms.team}
	if p, err := f.Paths(); err == nil {
		so.History = func(ctx context.Context, a verbs.HistoryArgs) ([]history.Entry, error) {
			if ms.denied { // deny-all: history too
				_, err := ms.ops.Whoami(ctx)
				return nil, err
			}
			return verbs.History(ctx, f, p, ms.id, a)
		}
	}
	if !opts.Worker {
		// A worker never manages a fleet of its own: it has no more
		// power than its spawn gave it.
		so.Fleet, so.Caller = f, ms.id
	}
	out := &lockedWriter{w: f.IO.Out}
	var transport mcp.Transport = &mcp.IOTransport{Reader: newJSONLines(f.IO.In, out, log), Writer: nopWriteCloser{out}}
	if !opts.Worker && !ms.denied {
		// An interactive session is woken by its mail; a worker's turns
		// are started by its shim.
		so.Channel = NewChannel(ms.ops, log)
		defer so.Channel.Stop()
		transport = so.Channel.Transport(transport)
	}
	server := New(ms.ops, so)
	if opts.Worker && opts.Harness == "claude" && ms.permission != nil {
		// Only Claude Code has a prompt tool; any other harness would
		// offer it to its model.
		addPermissionTool(server, ms.permission)
	}
	err = server.Run(ctx, transport)
	if err != nil && ctx.Err() == nil && !isClosing(err) {
		return fmt.Errorf("mcp: %w", err)
	}
	return nil
}

// isClosing reports the SDK's normal end when the client closes stdin.
func isClosing(err error) bool {
	if errors.Is(err, mcp.ErrConnectionClosed) {
		return true
	}
	for _, s := range []string{"EOF", "server is closing", "connection closed"} {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}

// nopWriteCloser keeps the command's stdout open after the MCP transport
// closes (tests share it).
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
