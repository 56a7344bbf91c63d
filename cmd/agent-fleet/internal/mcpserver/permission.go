package mcpserver

import (
	"context"
	"encoding/json"
	"io"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// permissionArgs is what Claude Code passes its --permission-prompt-tool:
// {tool_name, input, tool_use_id} (and, for an MCP skill, more keys this
// tool ignores).
type permissionArgs struct {
	ToolName  string          `json:"tool_name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
}

// askShim relays a permission request to the worker's shim.
type askShim func(ctx context.Context, req harness.PermissionRequest) (harness.PermissionDecision, error)

// addPermissionTool adds harness.PermissionPromptTool: a Claude Code
// worker's permission prompts, answered by its manager through the shim
// (harness.OpPermission). Claude Code reads the answer from one text
// block holding {"behavior":"allow","updatedInput":{…}} or
// {"behavior":"deny","message":"…"}; it does not offer the tool to the
// model.
func addPermissionTool(server *mcp.Server, ask askShim) {
	mcp.AddTool(server, &mcp.Tool{Name: harness.PermissionPromptTool,
		Description: "Claude Code's permission prompts of this worker, relayed to its manager as an intercom ask (not for the model).",
		InputSchema: map[string]any{"type": "object", "required": []any{"tool_name", "input"}, "properties": map[string]any{
			"tool_name":   map[string]any{"type": "string"},
			"input":       map[string]any{"type": "object"},
			"tool_use_id": map[string]any{"type": "string"},
		}},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, a permissionArgs) (*mcp.CallToolResult, any, error) {
		d, err := ask(ctx, harness.PermissionRequest{Tool: a.ToolName, Input: a.Input, ToolUseID: a.ToolUseID})
		if err != nil {
			d = harness.PermissionDecision{Message: "Permission to use " + a.ToolName + " was denied: the worker could not ask its manager (" + err.Error() + ")."}
		}
		return permissionResult(d, a.Input), nil, nil
	})
}

// permissionResult is the decision as Claude Code reads it; an allow
// passes the input on unchanged.
func permissionResult(d harness.PermissionDecision, input json.RawMessage) *mcp.CallToolResult {
	v := map[string]any{"behavior": "deny", "message": d.Message}
	if d.Allow {
		if len(input) == 0 {
			input = json.RawMessage("{}")
		}
		v = map[string]any{"behavior": "allow", "updatedInput": input}
	}
	b, _ := json.Marshal(v)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}
}

// shimPermission asks the shim holding session id through its holder.
func shimPermission(p intercom.Paths, id string) askShim {
	return func(ctx context.Context, req harness.PermissionRequest) (harness.PermissionDecision, error) {
		var d harness.PermissionDecision
		hc, err := intercom.DialHolder(ctx, p, id)
		if err != nil {
			return d, err
		}
		defer hc.Close()
		return d, hc.Call(ctx, harness.OpPermission, req, &d)
	}
}

// codexHookInput is what Codex gives a PermissionRequest hook on stdin
// (permission-request.command.input): the tool as Claude Code names them
// (Bash with {command, description}, …) and its input.
type codexHookInput struct {
	HookEventName string          `json:"hook_event_name"`
	ToolName      string          `json:"tool_name"`
	ToolInput     json.RawMessage `json:"tool_input"`
}

// PermissionHook answers one Codex PermissionRequest hook of a worker's
// turn (mcp --worker --permission-hook): the request on in, relayed to
// the worker's shim like Claude Code's prompt tool, the decision on out
// as {"hookSpecificOutput":{"hookEventName":"PermissionRequest",
// "decision":{"behavior":"allow"|"deny","message":…}}}. Codex refuses a
// decision that rewrites the input, so an allow carries none.
func PermissionHook(ctx context.Context, f *factory.Factory, harnessName string) error {
	p, err := f.Paths()
	if err != nil {
		return err
	}
	id, err := intercom.ResolveIdentity(intercom.IdentityOptions{Kind: intercom.Harness, Harness: harnessName, Getenv: f.Env})
	if err != nil {
		return factory.Usage(err)
	}
	var in codexHookInput
	data, err := io.ReadAll(io.LimitReader(f.IO.In, 4<<20))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, &in); err != nil || in.ToolName == "" {
		return factory.Usagef("a permission hook reads Codex's PermissionRequest JSON on stdin")
	}
	d, err := shimPermission(p, id.SessionID)(ctx, harness.PermissionRequest{Tool: in.ToolName, Input: in.ToolInput})
	if err != nil {
		d = harness.PermissionDecision{Message: "Permission to use " + in.ToolName + " was denied: the worker could not ask its manager (" + err.Error() + ")."}
	}
	decision := map[string]any{"behavior": "deny", "message": d.Message}
	if d.Allow {
		decision = map[string]any{"behavior": "allow"}
	}
	return json.NewEncoder(f.IO.Out).Encode(map[string]any{"hookSpecificOutput": map[string]any{
		"hookEventName": "PermissionRequest", "decision": decision}})
}
