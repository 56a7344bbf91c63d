package intercom

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestAgentDir(t *testing.T) {
	dir, err := AgentDir(env(map[string]string{"HOME": "/home/u"}))
	require.NoError(t, err)
	require.Equal(t, "/home/u/.pi/agent", dir)
	require.Equal(t, "/home/u/.pi/agent/intercom/broker.sock", NewPaths(dir).BrokerSocket())

	dir, err = AgentDir(env(map[string]string{"HOME": "/home/u", AgentDirEnv: "  /srv/agents  "}))
	require.NoError(t, err)
	require.Equal(t, "/srv/agents", dir, "trimmed")

	dir, err = AgentDir(env(map[string]string{"HOME": "/home/u", AgentDirEnv: "   "}))
	require.NoError(t, err)
	require.Equal(t, "/home/u/.pi/agent", dir, "blank means default")

	cwd, _ := os.Getwd()
	dir, err = AgentDir(env(map[string]string{AgentDirEnv: "rel/dir"}))
	require.NoError(t, err)
	require.Equal(t, filepath.Join(cwd, "rel/dir"), dir, "relative resolved against the working directory")
}

func TestPathNames(t *testing.T) {
	p := NewPaths("/a")
	require.Equal(t, "/a/intercom", p.Dir)
	require.Equal(t, "/a/intercom/agent-fleet.sock", p.LocalAPISocket())
	require.Equal(t, "/a/intercom/broker.owner", p.OwnerFile())
	require.Equal(t, "/a/intercom/broker-asks.json", p.AskState())
	// sha256("alpha") — the outbox/inbox file name the TypeScript clients use.
	require.Equal(t, "/a/intercom/outbox/8ed3f6ad685b959ead7022518e1af76cd816f8e8ec7ccdda1ed4018e8f2223f8.json", p.Outbox("alpha"))
	require.Equal(t, "/a/intercom/inbox/8ed3f6ad685b959ead7022518e1af76cd816f8e8ec7ccdda1ed4018e8f2223f8.json", p.Inbox("alpha"))
	require.Equal(t, "/a/intercom/s/8ed3f6ad685b959e.sock", p.HolderSocket("alpha"))
}

func TestPipeName(t *testing.T) {
	require.Equal(t, `\\.\pipe\pi-intercom-c-users-me-pi-agent`, PipeName(`C:\Users\Me\.pi\agent`))
	require.Equal(t, `\\.\pipe\pi-intercom-home-u-x-y`, PipeName(`/home/u/x--y/`))
	require.Equal(t, `\\.\pipe\pi-intercom-default`, PipeName(`///`))
}

func TestEnsureDirRepairsMode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "x", "intercom")
	require.NoError(t, EnsureDir(dir))
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, DirMode, fi.Mode().Perm())
	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, EnsureDir(dir))
	fi, _ = os.Stat(dir)
	require.Equal(t, DirMode, fi.Mode().Perm(), "loosened mode repaired")
}

func TestCheckSocketPath(t *testing.T) {
	require.NoError(t, CheckSocketPath("/"+strings.Repeat("a", MaxSocketPathBytes-1)))
	err := CheckSocketPath("/" + strings.Repeat("a", MaxSocketPathBytes))
	require.ErrorIs(t, err, ErrSocketPathTooLong)
	require.Contains(t, err.Error(), AgentDirEnv)
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	require.NoError(t, WriteFileAtomic(path, []byte(`{"v":1}`)))
	require.NoError(t, WriteFileAtomic(path, []byte(`{"v":2}`)))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, `{"v":2}`, string(data))
	fi, _ := os.Stat(path)
	require.Equal(t, FileMode, fi.Mode().Perm())
	entries, _ := os.ReadDir(dir)
	require.Len(t, entries, 1, "no temp files left behind")
	require.Error(t, WriteFileAtomic(filepath.Join(dir, "missing", "f"), nil))
}

func TestProcessAlive(t *testing.T) {
	require.True(t, ProcessAlive(os.Getpid()))
	require.False(t, ProcessAlive(0))
	require.False(t, ProcessAlive(-1))
}
