//go:build linux

package main

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	contribsystemd "github.com/agent-fleet/agent-fleet/contrib/systemd"
)

// set-summary --json says what was published and whether a holder keeps
// it.
func TestSetSummaryJSON(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	out, err := as(t, dir, "sum-alone", "intercom", "set-summary", "reading the parser", "--json").Output()
	require.NoError(t, err, "%s", out)
	require.JSONEq(t, `{"ok": true, "summary": "reading the parser", "held": false}`, string(out))
	startListener(t, dir, "sum-held")
	out, err = as(t, dir, "sum-held", "intercom", "set-summary", "fixing it", "--json").Output()
	require.NoError(t, err, "%s", out)
	require.JSONEq(t, `{"ok": true, "summary": "fixing it", "held": true}`, string(out))
}

// install and uninstall --json report every unit file and unit, for a
// dry run and for real.
func TestInstallAndUninstallJSON(t *testing.T) {
	t.Parallel()
	w := newInstallWorld(t, shortDir(t))
	type report struct {
		DryRun  bool   `json:"dryRun"`
		UnitDir string `json:"unitDir"`
		Files   []struct{ Path, Change string }
		Units   []struct{ Name, State, Detail string }
	}
	run := func(args ...string) report {
		t.Helper()
		out, err := w.cmd(append(args, "--json")...).Output()
		require.NoError(t, err, "%s", out)
		var r report
		require.NoError(t, json.Unmarshal(out, &r), "stdout is one JSON report: %s", out)
		require.Equal(t, w.unitDir, r.UnitDir)
		return r
	}
	changes := func(r report) map[string]string {
		m := map[string]string{}
		for _, f := range r.Files {
			m[filepath.Base(f.Path)] = f.Change
		}
		return m
	}
	states := func(r report) map[string]string {
		m := map[string]string{}
		for _, u := range r.Units {
			m[u.Name] = u.State
		}
		return m
	}
	all := func(change string) map[string]string {
		m := map[string]string{}
		for _, n := range contribsystemd.Names {
			m[n] = change
		}
		return m
	}

	r := run("install", "--dry-run", "--binary", w.bin)
	require.True(t, r.DryRun)
	require.Equal(t, all("create"), changes(r))
	r = run("install", "--binary", w.bin)
	require.False(t, r.DryRun)
	require.Equal(t, all("create"), changes(r))
	require.Equal(t, map[string]string{contribsystemd.BrokerSocket: "listening", contribsystemd.CleanupTimer: "active"}, states(r))
	r = run("install", "--binary", w.bin)
	require.Equal(t, all("unchanged"), changes(r), "a second install changes nothing")

	r = run("uninstall", "--dry-run")
	require.True(t, r.DryRun)
	require.Equal(t, all("remove"), changes(r))
	r = run("uninstall")
	require.Equal(t, all("remove"), changes(r))
	require.Equal(t, "stopped", states(r)[contribsystemd.BrokerSocket])
	w.requireUninstalled()
	r = run("uninstall")
	require.Empty(t, r.Files, "nothing left to remove")
	require.Empty(t, r.Units)
}
