package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/intercom"
)

const mcpInstructions = `agent-fleet intercom: message other agent sessions on this machine.

- intercom_send for assignments, progress, results and anything that does not
  block you: it returns once the recipient has stored the message.
- intercom_ask only when your next step depends on the answer. It waits up to
  timeout_ms (default 45 s, at most 120 s); if no reply comes in time the ask
  stays open and the reply appears later in intercom_pending.
- intercom_pending shows unread messages and asks waiting for your reply;
  answer an ask with intercom_reply (choose it with askId, or to/which).
- intercom_team shows your manager and coworkers with the targets to use:
  start there when you work in a team or for a manager.
- Address sessions by full id (from intercom_list or intercom_whoami), a unique
  name, or a unique id prefix of at least 4 characters. You cannot message
  yourself. Every result ends with a note when messages or asks are waiting.`

type mcpOptions struct {
	harness  string
	logLevel string
	// worker: serve a fleet worker's harness turn (see the flag).
	worker bool
}

func newMCPCmd(s *streams) *cobra.Command {
	opts := &mcpOptions{}
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the intercom tools to an agent over MCP (stdio)",
		Long: `Run an MCP server on stdin/stdout for one agent session. It registers the
session at once (so the agent is visible before its first tool call), keeps
it registered across broker restarts, and holds it: agent-fleet intercom
commands under the same id act through this process.

Identity: CLAUDE_INTERCOM_SESSION_ID or CODEX_INTERCOM_SESSION_ID (by
--harness), else AGENT_INTERCOM_SESSION_ID, else a fresh
<harness>-<pid>-<hash of cwd> so two unconfigured agents never merge. Give each
agent session its own id. If another process already holds the id, this
server acts through it. stdout carries only MCP frames; logs go to stderr.`,
		Example: `  claude mcp add agent-fleet -e AGENT_INTERCOM_SESSION_ID=reviewer -- agent-fleet mcp --harness claude
  npx @modelcontextprotocol/inspector --cli agent-fleet mcp --method tools/list`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runMCP(cmd.Context(), s, opts)
		},
	}
	cmd.Flags().StringVar(&opts.harness, "harness", "", "the agent harness: claude, codex, opencode or pi (picks the id variable and the model label)")
	cmd.Flags().StringVar(&opts.logLevel, "log-level", "warn", "stderr log level: debug, info, warn, error")
	cmd.Flags().BoolVar(&opts.worker, "worker", false, "serve a fleet worker's harness turn: act only through the worker shim's holder, without the agent_fleet tool; intercom_pending marks what it shows read")
	_ = cmd.Flags().MarkHidden("worker")
	return cmd
}

// mcpSession is the session behind an MCP server: its own (a holder), or
// another holder's.
type mcpSession struct {
	ops     intercom.Ops
	session *intercom.Session
	id      string // the session id, the manager of what it spawns
	stop    func()
	team    *sessionTeam // the Boss contract and the team operations
}

// openSessionForMCP resolves the session of this process's environment
// and opens it: as a fleet worker's turn (worker), or as its own. An
// unusable Boss contract gives a session that takes no part.
func openSessionForMCP(ctx context.Context, log *slog.Logger, harness string, worker bool) (*mcpSession, error) {
	p, err := intercom.DefaultPaths()
	if err != nil {
		return nil, err
	}
	id, err := intercom.ResolveIdentity(intercom.IdentityOptions{Kind: intercom.Harness, Harness: harness})
	if err != nil {
		return nil, &usageError{err}
	}
	team, err := newSessionTeam(p, id)
	switch {
	case err != nil:
		return deniedMCPSession(log, id, err), nil
	case worker:
		return openWorkerMCPSession(ctx, p, id, team)
	default:
		return openMCPSession(ctx, log, p, id, team)
	}
}

// openWorkerMCPSession acts as a fleet worker through its shim's holder,
// and only so: a worker's turn never registers a second connection under
// the worker's id. The shim serves its holder before the first turn starts.
func openWorkerMCPSession(ctx context.Context, p intercom.Paths, id intercom.Identity, team *sessionTeam) (*mcpSession, error) {
	var herr error
	for attempt := 0; attempt < 10; attempt++ {
		var hc *intercom.HolderClient
		if hc, herr = intercom.DialHolder(ctx, p, id.SessionID); herr == nil {
			return &mcpSession{ops: team.through(p, hc), team: team, id: id.SessionID, stop: team.close}, nil
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	team.close()
	return nil, fmt.Errorf("mcp --worker: no worker shim holds session %q (run this server only from a fleet worker's turn): %w", id.SessionID, herr)
}

// openMCPSession holds the session, or acts through its live holder.
func openMCPSession(ctx context.Context, log *slog.Logger, p intercom.Paths, id intercom.Identity, team *sessionTeam) (*mcpSession, error) {
	if hc, err := intercom.DialHolder(ctx, p, id.SessionID); err == nil {
		log.Info("session already held; acting through its holder", "session", id.SessionID)
		f := &failoverOps{cur: team.through(p, hc), through: true, log: log,
			takeOver: func(ctx context.Context) (*mcpSession, error) { return holdMCPSession(ctx, p, id, team, log) }}
		return &mcpSession{ops: f, team: team, id: id.SessionID, stop: func() { f.stop(); team.close() }}, nil
	}
	ms, err := holdMCPSession(ctx, p, id, team, log)
	if err != nil {
		return nil, err
	}
	stop := ms.stop
	ms.stop = func() { stop(); team.close() }
	return ms, nil
}

// holdMCPSession registers id and serves its holder socket, or, when
// another holder appeared meanwhile, acts through it. Its stop leaves team
// open.
func holdMCPSession(ctx context.Context, p intercom.Paths, id intercom.Identity, team *sessionTeam, log *slog.Logger) (*mcpSession, error) {
	var sess *intercom.Session
	var err error
	activity := startActivity(p, id.SessionID, log)
	for attempt := 0; ; attempt++ {
		sess, err = intercom.OpenSession(ctx, intercom.SessionConfig{
			Paths: p, Identity: id, Start: brokerStarter(), AskTTL: askTTL(), AskWait: askWait(), Reconnect: true, Logger: log,
			Filter: team.filter(), ReplayFilter: team.replay(),
			OnMessage: activity.OnMessage,
		})
		if err == nil {
			break
		}
		if errors.Is(err, intercom.ErrSessionIDInUse) {
			// Perhaps a holder appeared meanwhile.
			if hc, herr := intercom.DialHolder(ctx, p, id.SessionID); herr == nil {
				ms := &mcpSession{ops: team.through(p, hc), team: team, id: id.SessionID, stop: func() {}}
				activity.Close()
				return ms, nil
			}
		}
		if attempt >= 2 || ctx.Err() != nil {
			activity.Close()
			return nil, err
		}
		time.Sleep(500 * time.Millisecond)
	}
	ops, extra := team.hold(p, sess, log)
	hctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	holder, err := intercom.ListenHolder(intercom.HolderConfig{Paths: p, SessionID: id.SessionID, Ops: ops, Logger: log, Extra: extra})
	if err != nil {
		log.Warn("cannot serve the holder socket", "err", err)
		close(done)
	} else {
		go func() {
			_ = holder.Serve(hctx)
			close(done)
		}()
	}
	janitorDone := make(chan struct{})
	go func() {
		defer close(janitorDone)
		runHolderJanitor(hctx, p, id.SessionID, log)
	}()
	return &mcpSession{ops: ops, session: sess, team: team, id: id.SessionID, stop: func() {
		cancel()
		<-done
		<-janitorDone
		_ = sess.Close() // keeps the outbox and defers open asks
		activity.Close()
	}}, nil
}

func runMCP(ctx context.Context, s *streams, opts *mcpOptions) error {
	log := newLogger(s.Err, opts.logLevel)
	ms, err := openSessionForMCP(ctx, log, opts.harness, opts.worker)
	if err != nil {
		return err
	}
	defer ms.stop()
	server := newMCPServerWith(ms.ops, log, opts.worker)
	if !opts.worker {
		// A worker never manages a fleet of its own: it has no more
		// power than its spawn gave it.
		addFleetTool(server, ms.id)
	}
	addTeamTools(server, ms.ops, ms.team)
	err = server.Run(ctx, &mcp.IOTransport{Reader: newJSONLines(s.In, log), Writer: nopWriteCloser{s.Out}})
	if err != nil && ctx.Err() == nil && !isClosing(err) {
		return fmt.Errorf("mcp: %w", err)
	}
	return nil
}

// isClosing reports the SDK's normal end when the client closes stdin.
func isClosing(err error) bool {
	return err != nil && (errors.Is(err, mcp.ErrConnectionClosed) || containsAny(err.Error(), "EOF", "server is closing", "connection closed"))
}
