//go:build linux

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	contribsystemd "github.com/agent-fleet/agent-fleet/contrib/systemd"
	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// install writes real unit files, so it runs against a manager of its own
// that reads them from a temporary XDG_CONFIG_HOME (never the user's).
func TestInstallAndUninstallTheJanitorTimer(t *testing.T) {
	if err := unitstest.Bootable(); err != nil {
		unitstest.Unavailable(t, err)
	}
	configHome, home, dir := shortDir(t), shortDir(t), shortDir(t)
	b, err := unitstest.Boot(unitstest.BootOptions{ConfigHome: configHome})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Stop() })
	t.Cleanup(func() { stopBroker(t, dir) })
	bin := filepath.Join(binDir(t), "agent-fleet")
	run := func(args ...string) (string, error) {
		cmd := agentFleet(t, dir, args...)
		cmd.Env = append(cmd.Env, b.Env()...)
		cmd.Env = append(cmd.Env, "XDG_CONFIG_HOME="+configHome, "HOME="+home)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	unitDir := filepath.Join(configHome, "systemd", "user")
	timer := filepath.Join(unitDir, contribsystemd.CleanupTimer)
	service := filepath.Join(unitDir, contribsystemd.CleanupService)

	out, err := run("install", "--dry-run", "--binary", bin)
	require.NoError(t, err, out)
	require.Contains(t, out, timer+": would create")
	require.Contains(t, out, "ExecStart="+bin+" cleanup --execute")
	require.NoFileExists(t, timer, "a dry run changes nothing")

	_, err = run("install")
	requireExit(t, err, exitUsage) // a test binary is a temporary build

	out, err = run("install", "--binary", bin)
	require.NoError(t, err, out)
	data, err := os.ReadFile(service)
	require.NoError(t, err)
	require.Contains(t, string(data), `Environment="PI_CODING_AGENT_DIR=`+dir+`"`)

	m, err := units.Connect(context.Background(), units.Options{Bus: b.Bus})
	require.NoError(t, err)
	defer m.Close()
	st, err := m.Unit(context.Background(), contribsystemd.CleanupTimer)
	require.NoError(t, err)
	require.Equal(t, "active", st.ActiveState)
	require.Equal(t, "enabled", st.UnitFileState)

	// What the timer runs works: the janitor as a oneshot service.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, m.StartUnit(ctx, contribsystemd.CleanupService))
	st, err = m.Unit(ctx, contribsystemd.CleanupService)
	require.NoError(t, err)
	require.Equal(t, "success", st.Result)

	out, err = run("install", "--binary", bin)
	require.NoError(t, err, out)
	require.Contains(t, out, timer+": unchanged")

	out, err = run("uninstall", "--dry-run")
	require.NoError(t, err, out)
	require.Contains(t, out, timer)
	require.FileExists(t, timer)
	out, err = run("uninstall")
	require.NoError(t, err, out)
	require.NoFileExists(t, timer)
	require.NoFileExists(t, service)
	st, err = m.Unit(ctx, contribsystemd.CleanupTimer)
	require.NoError(t, err)
	require.False(t, st.Running(), "the timer is stopped")
	require.NotEqual(t, "enabled", st.UnitFileState)
	wants, _ := filepath.Glob(filepath.Join(unitDir, "*.wants", "*"))
	for _, w := range wants {
		require.False(t, strings.Contains(w, "agent-fleet"), "no enablement link left: %s", w)
	}
	out, err = run("uninstall")
	require.NoError(t, err, out)
	require.Contains(t, out, "not installed")
}

func TestRenderedUnitsQuotePaths(t *testing.T) {
	files := contribsystemd.Render("/opt/my tools/agent-fleet", "/home/a b/100%/.pi")
	svc := string(files[contribsystemd.CleanupService])
	require.Contains(t, svc, `ExecStart="/opt/my tools/agent-fleet" cleanup --execute`)
	require.Contains(t, svc, `Environment="PI_CODING_AGENT_DIR=/home/a b/100%%/.pi"`)
	require.NotContains(t, string(files[contribsystemd.CleanupTimer]), "@")
}
