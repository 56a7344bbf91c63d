package zzscratch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	mt "github.com/agent-fleet/agent-fleet/fleet/harness/modeltest"
)

func TestCodexHook(t *testing.T) {
	dir := t.TempDir()
	home := t.TempDir()
	codexHome := filepath.Join(home, ".codex")
	os.MkdirAll(codexHome, 0o700)
	hooks := `{"hooks":{"PermissionRequest":[{"matcher":"*","hooks":[{"type":"command","command":"/tmp/permx/hook.sh"}]}]}}`
	if os.Getenv("HOOKS_TOML") != "" {
		os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(os.Getenv("HOOKS_TOML")), 0o600)
	} else {
		os.WriteFile(filepath.Join(codexHome, "hooks.json"), []byte(hooks), 0o600)
	}
	var last *mt.Request
	srv := mt.Start(t,
		mt.Step{Name: "cmd", Reply: mt.Reply{ToolCalls: []mt.ToolCall{mt.Call("exec_command", map[string]any{"cmd": "touch marker", "sandbox_permissions": "require_escalated", "justification": "make the marker"})}}},
		mt.Step{Name: "after", Expect: func(r *mt.Request) error { last = r; return nil }, Reply: mt.Reply{Text: "Done."}},
	)
	srv.AllowLeftover()
	args := []string{"exec", "--json", "--skip-git-repo-check", "-m", "mt-scripted", "-c", `model_provider="modeltest"`,
		"-c", `model_providers.modeltest={name="modeltest",base_url="` + srv.URL + `/v1",wire_api="responses"}`}
	args = append(args, strings.Fields(os.Getenv("EXTRA"))...)
	args = append(args, "-")
	cmd := exec.Command(os.Getenv("CODEX"), args...)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader("make a marker")
	cmd.Env = append(os.Environ(), "HOME="+home, "CODEX_HOME="+codexHome, "OPENAI_API_KEY=sk-x", "HOOK_LOG="+filepath.Join(dir, "hook.log"))
	out, err := cmd.CombinedOutput()
	t.Logf("err=%v\n%s", err, out)
	log, _ := os.ReadFile(filepath.Join(dir, "hook.log"))
	t.Logf("hook log: %s", log)
	_, e := os.Stat(filepath.Join(dir, "marker"))
	t.Logf("marker: %v", e == nil)
	if last != nil {
		t.Logf("result: %+v", last.LastToolResult())
	}
}
