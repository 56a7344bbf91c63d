//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet/harness/modeltest"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// bash is the scripted model's Bash call of command.
func bash(command, why string) modeltest.Reply {
	return modeltest.Reply{ToolCalls: []modeltest.ToolCall{modeltest.Call("Bash", map[string]any{"command": command, "description": why})}}
}

// toolFailed is an Expect that the newest tool result is an error
// holding every one of subs.
func toolFailed(subs ...string) func(*modeltest.Request) error {
	return func(r *modeltest.Request) error {
		res := r.LastToolResult()
		if res == nil || !res.IsError {
			return fmt.Errorf("want a refused tool call, got %+v", res)
		}
		for _, s := range subs {
			if !strings.Contains(res.Content, s) {
				return fmt.Errorf("the tool result %q lacks %q", res.Content, s)
			}
		}
		return nil
	}
}

// presence is the presence status of session id as the boss's
// `intercom list` shows it.
func (w *harnessWorld) presence(id string) string {
	w.t.Helper()
	var res intercom.ListResult
	out := w.must("intercom", "list", "--json")
	require.NoError(w.t, json.Unmarshal([]byte(out), &res), out)
	for _, s := range res.Sessions {
		if s.ID == id {
			return s.Status
		}
	}
	w.t.Fatalf("%s is not in intercom list: %s", id, out)
	return ""
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

// A Claude Code worker's permission prompts reach its manager as asks:
// allow runs the command, deny refuses it with the manager's words,
// always runs it and every command with the same prefix after it without
// asking; while it waits, status and presence say needs-input. A prompt
// nobody answers is denied when the permission wait runs out, and its ask
// is withdrawn.
func TestRealClaudePermissionRelay(t *testing.T) {
	t.Parallel()
	claude := nodeTool(t, "claude")
	w := newHarnessWorld(t)
	w.real = map[string]string{"claude": claude}

	env := claudeEndpointEnv(t, &modeltest.Server{})
	cwd := filepath.Join(env["HOME"], "src", "app")
	require.NoError(t, os.MkdirAll(cwd, 0o755))
	model := modeltest.Start(t,
		modeltest.Step{Name: "task", Expect: modeltest.PromptContains("make the markers"), Reply: bash("touch allowed", "mark it")},
		modeltest.Step{Name: "allowed", Expect: resultOK, Reply: bash("touch denied", "mark it again")},
		modeltest.Step{Name: "denied", Expect: toolFailed("Permission to run `touch denied` in ~/src/app was denied by boss.", "They said: not in this repo"),
			Reply: bash("touch always-1", "")},
		modeltest.Step{Name: "always", Expect: resultOK, Reply: bash("touch always-1 always-2", "")},
		modeltest.Step{Name: "covered", Expect: resultOK, Reply: modeltest.Reply{Text: "Markers made."}},
	)
	env["ANTHROPIC_BASE_URL"] = model.URL
	w.spawn("pw", "claude", append(envFlags(env), "--cwd", cwd, "--permission-wait", "2m", "--task", "make the markers")...)

	ask := func(from, sub string) intercom.MessageView {
		t.Helper()
		m := w.message(from, func(s string) bool { return strings.Contains(s, sub) })
		require.True(t, m.ExpectsReply, "the prompt is an ask: %+v", m)
		return m
	}
	m := ask("pw", "`touch allowed`")
	require.Equal(t, "pw wants to run `touch allowed` in ~/src/app — reply allow / deny / always\nIts reason: mark it\n"+
		"(always: allow `touch allowed …` commands for the rest of this run without asking. No answer within 2m0s denies it.)", m.Text)
	// Waiting: the registry and the presence say what for; the command
	// has not run.
	st := w.status("pw")
	require.Equal(t, "needs-input", st.Worker.StateReason)
	require.Equal(t, "permission to run `touch allowed`", st.Worker.NeedsInput)
	require.Equal(t, int64(120), st.Worker.PermissionWaitSeconds)
	require.Contains(t, w.must("status", "pw"), "needs:    permission to run `touch allowed`, from boss")
	require.Equal(t, "needs-input: permission to run `touch allowed`", w.presence("pw"))
	require.False(t, fileExists(filepath.Join(cwd, "allowed")))
	w.must("intercom", "reply", "--ask-id", m.AskID, "allow")

	m = ask("pw", "`touch denied`")
	require.Equal(t, "needs-input", w.status("pw").Worker.StateReason)
	w.must("intercom", "reply", "--ask-id", m.AskID, "deny: not in this repo")

	m = ask("pw", "`touch always-1`")
	require.Contains(t, m.Text, "(always: allow `touch always-1 …` commands")
	w.must("intercom", "reply", "--ask-id", m.AskID, "always")
	waitScript(t, model)

	final := w.received("pw", "Markers made.")
	require.True(t, fileExists(filepath.Join(cwd, "allowed")), "allow ran the command")
	require.False(t, fileExists(filepath.Join(cwd, "denied")), "deny refused it")
	require.True(t, fileExists(filepath.Join(cwd, "always-1")))
	require.True(t, fileExists(filepath.Join(cwd, "always-2")), "always covered the next command with the same prefix (touch always-1 …)")
	for _, got := range w.boss.messages() {
		require.NotContains(t, got.Text, "always-2", "a command under always is not asked about")
	}
	st = w.status("pw")
	require.Equal(t, "idle", st.Worker.StateReason, "the turn ended: %+v", final)
	require.Empty(t, st.Worker.NeedsInput)
	require.NotEqual(t, "needs-input: permission to run `touch allowed`", w.presence("pw"))

	// Nobody answers: denied when the wait runs out, the ask withdrawn.
	env2 := claudeEndpointEnv(t, &modeltest.Server{})
	late := modeltest.Start(t,
		modeltest.Step{Name: "task", Reply: bash("touch late", "")},
		modeltest.Step{Name: "timed out", Expect: toolFailed("Permission to run `touch late`", "was denied: boss did not answer within 2s.", "The action was not performed."),
			Reply: modeltest.Reply{Text: "Gave up on the marker."}},
	)
	env2["ANTHROPIC_BASE_URL"] = late.URL
	w.spawn("pt", "claude", append(envFlags(env2), "--cwd", cwd, "--permission-wait", "2s", "--task", "make a late marker")...)
	m = ask("pt", "`touch late`")
	w.received("pt", "Gave up on the marker.")
	waitScript(t, late)
	require.False(t, fileExists(filepath.Join(cwd, "late")))
	out, err := w.cli("intercom", "reply", "--ask-id", m.AskID, "allow")
	require.Error(t, err, "the withdrawn ask cannot be answered: %s", out)
}

// A Codex worker in the workspace-write sandbox: an escalation request
// is a permission prompt (Codex's PermissionRequest hook under
// --approve-for-me), relayed to the manager like Claude Code's; allow runs
// the command, deny refuses it with the manager's words.
func TestRealCodexPermissionRelay(t *testing.T) {
	t.Parallel()
	codex := nodeTool(t, "codex")
	w := newHarnessWorld(t)
	escalate := func(cmd string) modeltest.Reply {
		return modeltest.Reply{ToolCalls: []modeltest.ToolCall{modeltest.Call("exec_command", map[string]string{"cmd": cmd,
			"sandbox_permissions": "require_escalated", "justification": "the marker needs it"})}}
	}
	cwd := t.TempDir()
	model := modeltest.Start(t,
		modeltest.Step{Name: "task", Expect: modeltest.PromptContains("make the markers"), Reply: escalate("touch allowed")},
		modeltest.Step{Name: "allowed", Expect: modeltest.ToolResultContains("Process exited with code 0"), Reply: escalate("touch denied")},
		modeltest.Step{Name: "denied", Expect: modeltest.ToolResultContains("Permission to run `touch denied` in " + cwd + " was denied by boss. They said: no escalation. The action was not performed."),
			Reply: modeltest.Reply{Text: "One marker made."}},
	)
	w.spawnCmd("cx-p", "codex", append([]string{codex}, codexEndpoint(model.URL)...), "--model", codexModel,
		"--permission", "workspace-write", "--permission-wait", "2m", "--cwd", cwd, "--env", "CODEX_HOME="+t.TempDir(), "--task", "make the markers")

	m := w.message("cx-p", func(s string) bool { return strings.Contains(s, "`touch allowed`") })
	require.Equal(t, "cx-p wants to run `touch allowed` in "+cwd+" — reply allow / deny / always\nIts reason: the marker needs it\n"+
		"(always: allow `touch allowed …` commands for the rest of this run without asking. No answer within 2m0s denies it.)", m.Text)
	require.Equal(t, "needs-input", w.status("cx-p").Worker.StateReason)
	require.False(t, fileExists(filepath.Join(cwd, "allowed")))
	w.must("intercom", "reply", "--ask-id", m.AskID, "allow")
	m = w.message("cx-p", func(s string) bool { return strings.Contains(s, "`touch denied`") })
	w.must("intercom", "reply", "--ask-id", m.AskID, "no: no escalation")
	w.received("cx-p", "One marker made.")
	waitScript(t, model)
	require.True(t, fileExists(filepath.Join(cwd, "allowed")))
	require.False(t, fileExists(filepath.Join(cwd, "denied")))
}
