package harness

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func permReq(tool string, input map[string]any) PermissionRequest {
	b, _ := json.Marshal(input)
	return PermissionRequest{Tool: tool, Input: b}
}

func TestDescribeToolUse(t *testing.T) {
	const cwd, home = "/home/ann/src/app", "/home/ann"
	for _, c := range []struct {
		req  PermissionRequest
		want string
	}{
		{permReq("Bash", map[string]any{"command": "npm install", "description": "deps"}), "run `npm install` in ~/src/app"},
		{permReq("Bash", map[string]any{"command": "echo `date`"}), "run \n```\necho `date`\n```\n in ~/src/app"},
		{permReq("Edit", map[string]any{"file_path": "/home/ann/src/app/main.go", "old_string": "a", "new_string": "b"}), "edit ~/src/app/main.go"},
		{permReq("Write", map[string]any{"file_path": "notes.txt", "content": "x"}), "write ~/src/app/notes.txt"},
		{permReq("Read", map[string]any{"file_path": "/etc/hostname"}), "read /etc/hostname"},
		{permReq("WebFetch", map[string]any{"url": "https://example.com/", "prompt": "x"}), "fetch https://example.com/"},
		{permReq("Grep", map[string]any{"pattern": "TODO"}), "search ~/src/app for `TODO`"},
		{permReq("mcp__gh__create_issue", map[string]any{"title": "x"}), "call the MCP tool create_issue of server gh with `{\"title\":\"x\"}`"},
		{permReq("Frobnicate", map[string]any{"n": 1}), "use Frobnicate with `{\"n\":1}`"},
	} {
		require.Equal(t, c.want, DescribeToolUse(c.req, cwd, home), c.req.Tool)
	}
	require.Equal(t, "permission to run `npm install`", NeedsInputText(permReq("Bash", map[string]any{"command": "npm\n  install"}), cwd, home))
}

func TestParsePermissionReply(t *testing.T) {
	for text, want := range map[string]struct {
		a    PermissionAnswer
		note string
	}{
		"allow":                        {AnswerAllow, ""},
		"  Yes, go ahead":              {AnswerAllow, "go ahead"},
		"ALWAYS.":                      {AnswerAlways, ""},
		"deny: use pnpm instead":       {AnswerDeny, "use pnpm instead"},
		"no":                           {AnswerDeny, ""},
		"what is this for?":            {AnswerDeny, "what is this for?"},
		"allowance is not an allow":    {AnswerDeny, "allowance is not an allow"},
		"always\nfor this worker only": {AnswerAlways, "for this worker only"},
	} {
		a, note := ParsePermissionReply(text)
		require.Equal(t, want.a, a, text)
		require.Equal(t, want.note, note, text)
	}
}

func TestPermissionRule(t *testing.T) {
	bash := func(cmd string) PermissionRequest { return permReq("Bash", map[string]any{"command": cmd}) }
	r := RuleFor(bash("npm install left-pad"))
	require.Equal(t, []string{"npm", "install"}, r.Prefix)
	require.Equal(t, "`npm install …` commands", r.Text())
	require.True(t, r.Covers(bash("npm install")))
	require.True(t, r.Covers(bash("npm   install react")))
	require.False(t, r.Covers(bash("npm run build")))
	require.False(t, r.Covers(bash("npm install && rm -rf ~")), "a chained command is asked again")
	require.False(t, r.Covers(bash("npm install $(curl x)")))
	require.False(t, r.Covers(permReq("Write", map[string]any{"file_path": "x"})))

	r = RuleFor(bash("ls -la /tmp"))
	require.Equal(t, []string{"ls"}, r.Prefix, "a flag is not a subcommand")
	require.True(t, r.Covers(bash("ls")))

	r = RuleFor(bash("make test | tee log"))
	require.Equal(t, "make test | tee log", r.Exact)
	require.True(t, r.Covers(bash("make test | tee log")))
	require.False(t, r.Covers(bash("make test")))

	r = RuleFor(permReq("Edit", map[string]any{"file_path": "a"}))
	require.True(t, r.Covers(permReq("Edit", map[string]any{"file_path": "b"})))
	require.Equal(t, "every Edit use", r.Text())
}
