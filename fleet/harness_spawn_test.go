package fleet

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFindPiMCPAdapter(t *testing.T) {
	root := t.TempDir()
	nm := filepath.Join(root, "lib", "node_modules")
	piBin := filepath.Join(nm, "@earendil-works", "pi-coding-agent", "dist", "bundle", "cli.js")
	require.NoError(t, os.MkdirAll(filepath.Dir(piBin), 0o755))
	require.NoError(t, os.WriteFile(piBin, []byte("#!/usr/bin/env node\n"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "bin"), 0o755))
	link := filepath.Join(root, "bin", "pi")
	require.NoError(t, os.Symlink(piBin, link))
	agentDir, cwd := t.TempDir(), t.TempDir()

	_, err := findPiMCPAdapter(link, cwd, agentDir, "")
	require.ErrorIs(t, err, ErrCommandNotFound)
	require.Contains(t, err.Error(), "pi install npm:pi-mcp-adapter")

	adapter := filepath.Join(nm, "pi-mcp-adapter")
	require.NoError(t, os.MkdirAll(adapter, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(adapter, "package.json"), []byte(`{"name":"pi-mcp-adapter","version":"2.36.0"}`), 0o644))
	dir, err := findPiMCPAdapter(link, cwd, agentDir, "")
	require.NoError(t, err)
	require.Equal(t, adapter, dir, "found beside pi's own package")

	_, err = findPiMCPAdapter(link, cwd, agentDir, t.TempDir())
	require.ErrorIs(t, err, ErrCommandNotFound, "an override must be the adapter")
	dir, err = findPiMCPAdapter(link, cwd, agentDir, adapter)
	require.NoError(t, err)
	require.Equal(t, adapter, dir)

	// Pi loads it itself: no -e.
	require.NoError(t, os.WriteFile(filepath.Join(agentDir, "settings.json"), []byte(`{"packages":[{"source":"npm:pi-mcp-adapter@2.36.0"}]}`), 0o600))
	dir, err = findPiMCPAdapter(link, cwd, agentDir, "")
	require.NoError(t, err)
	require.Empty(t, dir)
}
