package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver"
)

type mcpOptions struct {
	Factory *factory.Factory
	Serve   mcpserver.ServeOptions
}

func newMCPCmd(f *factory.Factory, runF func(*mcpOptions) error) *cobra.Command {
	opts := &mcpOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the intercom tools to an agent over MCP (stdio)",
		Long: `Run an MCP server on stdin/stdout for one agent session. It registers the
session at once (so the agent is visible before its first tool call), keeps
it registered across broker restarts, and holds it: agent-fleet intercom
commands under the same id act through this process.

Identity: CLAUDE_INTERCOM_SESSION_ID, CODEX_INTERCOM_SESSION_ID or
PI_INTERCOM_SESSION_ID (by --harness), else AGENT_INTERCOM_SESSION_ID, else a
fresh <harness>-<pid>-<hash of cwd> so two unconfigured agents never merge.
Give each agent session its own id in the environment the agent starts from;
never write one fixed id into a shared configuration (every agent using it
would claim the same session). If another process already holds the id, this
server acts through it. stdout carries only MCP frames; logs go to stderr.
Under Claude Code it pushes new mail as a channel notification (docs/wakeups.md).
--share (or AGENT_FLEET_SHARE=1) asks this host's node (agent-fleet node run)
to announce the session to the other hosts after every registration
(docs/federation.md); without a node the session stays on this host.`,
		Example: `  # register the server once, with no id in its configuration ...
  claude mcp add agent-fleet -s local -- agent-fleet mcp --harness claude
  # ... then start each session with an id of its own
  AGENT_INTERCOM_SESSION_ID=reviewer claude
  AGENT_INTERCOM_SESSION_ID=builder claude
  AGENT_INTERCOM_SESSION_ID=builder claude --dangerously-load-development-channels server:agent-fleet  # mail pushed in
  # check a server by hand
  npx @modelcontextprotocol/inspector@2.3.0 --cli agent-fleet mcp -e AGENT_INTERCOM_SESSION_ID=probe --method tools/list`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(opts)
			}
			return mcpRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Serve.Harness, "harness", "", "the agent harness: claude, codex, opencode or pi (picks the id variable and the model label)")
	cmd.Flags().StringVar(&opts.Serve.LogLevel, "log-level", "warn", "stderr log level: debug, info, warn, error")
	cmd.Flags().BoolVar(&opts.Serve.Share, "share", false, "ask this host's node to announce the session to the other hosts (also AGENT_FLEET_SHARE=1)")
	cmd.Flags().BoolVar(&opts.Serve.Worker, "worker", false, "serve a fleet worker's harness turn: act only through the worker shim's holder, without the agent_fleet tool; intercom_pending marks what it shows read")
	cmd.Flags().BoolVar(&opts.Serve.PermissionHook, "permission-hook", false, "with --worker: answer one Codex PermissionRequest hook (stdin JSON) by asking the worker's manager")
	_ = cmd.Flags().MarkHidden("worker")
	_ = cmd.Flags().MarkHidden("permission-hook")
	return cmd
}

func mcpRun(ctx context.Context, opts *mcpOptions) error {
	return mcpserver.Serve(ctx, opts.Factory, opts.Serve)
}
