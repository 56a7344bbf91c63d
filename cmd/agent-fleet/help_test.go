//go:build !windows

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// `mcp --help` registers the server the way the README and contrib/mcp do:
// no session id in the registration (every session started from it would
// claim the same id), the id given to each session as it starts.
func TestMCPHelpRegistersWithoutAFixedID(t *testing.T) {
	t.Parallel()
	out, err := runCLI(t, "mcp", "--help")
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	script, err := os.ReadFile(filepath.Join("..", "..", "contrib", "mcp", "claude-mcp-add.sh"))
	require.NoError(t, err)
	adds := regexp.MustCompile(`claude mcp add [^\n`+"`"+`]*`).FindAllString(out, -1)
	require.NotEmpty(t, adds, "mcp --help shows how to register the server:\n%s", out)
	for _, add := range adds {
		add = strings.TrimSpace(add)
		require.NotContains(t, add, "INTERCOM_SESSION_ID", "a fixed id in a registration is what the README forbids")
		require.NotContains(t, add, " -e ", add)
		require.Contains(t, string(readme), "`"+add+"`", "the README registers the server the same way")
		require.Contains(t, string(script), add+"\n", "contrib/mcp/claude-mcp-add.sh registers it the same way")
	}
	require.Contains(t, out, "AGENT_INTERCOM_SESSION_ID=reviewer claude", "the id goes to the session as it starts")
}
