//go:build linux

package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet/harness/modeltest"
)

// Coworkers in two harnesses, both real: a Claude Code worker's model asks
// a Codex coworker with intercom_ask; the ask wakes a Codex turn whose model
// answers with intercom_reply; the answer comes back as the tool result of
// the Claude turn, whose final answer reaches their manager. Each harness
// talks to a scripted endpoint of its own API.
func TestRealClaudeAsksCodexCoworker(t *testing.T) {
	t.Parallel()
	claude, codex := nodeTool(t, "claude"), nodeTool(t, "codex")
	w := newHarnessWorld(t)
	w.real = map[string]string{"claude": claude}

	const question = "which port does the API listen on?"
	cx := modeltest.Start(t,
		modeltest.Step{Name: "stand by", API: modeltest.Responses, Expect: modeltest.PromptContains("Stand by for your coworkers"),
			Reply: modeltest.Reply{Text: "Standing by."}},
		modeltest.Step{Name: "asked", API: modeltest.Responses,
			Expect: modeltest.All(modeltest.PromptContains(question, "This is an ask", "cl"), modeltest.Offers(codexReply)),
			Reply: modeltest.Reply{ToolCalls: []modeltest.ToolCall{
				modeltest.Call(codexReply, map[string]string{"to": "cl", "which": "latest", "message": "port 8080"})}}},
		modeltest.Step{Name: "answered", API: modeltest.Responses, Expect: modeltest.ToolResultContains(`"ok":true`),
			Reply: modeltest.Reply{Text: "Answered cl."}},
	)
	w.spawnCmd("cx", "codex", append([]string{codex}, codexEndpoint(cx.URL)...),
		"--model", codexModel, "--task", "Stand by for your coworkers' questions.")
	w.received("cx", "Standing by.")

	cl := modeltest.Start(t,
		modeltest.Step{Name: "task", API: modeltest.Anthropic,
			Expect: modeltest.All(modeltest.PromptContains("Ask cx which port"), modeltest.Offers(claudeAsk)),
			Reply:  modeltest.Reply{ToolCalls: []modeltest.ToolCall{modeltest.ToolSearch(claudeAsk)}}},
		modeltest.Step{Name: "ask", API: modeltest.Anthropic, Expect: modeltest.ToolResultContains("tool_reference:" + claudeAsk),
			Reply: modeltest.Reply{ToolCalls: []modeltest.ToolCall{
				modeltest.Call(claudeAsk, map[string]any{"to": "cx", "message": question, "timeout_ms": 110000})}}},
		modeltest.Step{Name: "answer", API: modeltest.Anthropic, Expect: modeltest.All(resultOK, modeltest.ToolResultContains("port 8080")),
			Reply: modeltest.Reply{Text: "cx says the API listens on port 8080."}},
	)
	w.spawn("cl", "claude", append(envFlags(claudeEndpointEnv(t, cl)), "--task", "Ask cx which port the API listens on.")...)

	got := w.received("cl", "cx says the API listens on port 8080.")
	require.Equal(t, "cl", got.From.ID)
	waitScript(t, cl)
	waitScript(t, cx)
	// The coworker's turn ends as every turn does: its final answer
	// reaches the manager (the ask itself was answered by the tool).
	w.received("cx", "Answered cl.")
	require.Contains(t, w.must("stop", "cl", "cx"), "left in its cgroup")
}
