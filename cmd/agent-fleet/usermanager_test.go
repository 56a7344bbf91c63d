//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// user-manager start boots a private systemd user manager and prints only
// the export lines that reach it; user-manager stop ends it by its runtime
// directory, from another process, leaving no process or directory, and
// prints the unset line when it was this shell's. Not parallel: it boots a
// manager.
func TestUserManagerStartStop(t *testing.T) {
	if err := units.CanBootPrivateManager(); err != nil {
		unitstest.Unavailable(t, err)
	}
	dir := shortDir(t)
	// --watch: a manager of its own, which a start without it would reach
	// (and this test stops) rather than boot.
	start := agentFleet(t, dir, "user-manager", "start", "--watch", strconv.Itoa(os.Getpid()))
	start.Env = append(start.Env, "XDG_RUNTIME_DIR=", "DBUS_SESSION_BUS_ADDRESS=")
	var stderr strings.Builder
	start.Stderr = &stderr
	out, err := start.Output()
	require.NoError(t, err, "%s", stderr.String())
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 2, "stdout is for eval: %s", out)
	rt, ok := strings.CutPrefix(lines[0], "export XDG_RUNTIME_DIR=")
	require.True(t, ok, lines[0])
	t.Cleanup(func() { _ = units.StopPrivateManagerAt(rt) })
	require.Equal(t, "export DBUS_SESSION_BUS_ADDRESS=unix:path="+filepath.Join(rt, "bus"), lines[1])
	require.Contains(t, stderr.String(), fmt.Sprintf("runs until: agent-fleet user-manager stop %s, or until process %d exits", rt, os.Getpid()))

	// A second start reaches the manager running (this one, or one an
	// earlier start booted) rather than boot another beside it.
	again := agentFleet(t, dir, "user-manager", "start")
	again.Env = append(again.Env, "XDG_RUNTIME_DIR=", "DBUS_SESSION_BUS_ADDRESS=")
	stderr.Reset()
	again.Stderr = &stderr
	out, err = again.Output()
	require.NoError(t, err, "%s", stderr.String())
	running := units.FindPrivateManager("user")
	require.NotNil(t, running)
	require.Equal(t, fmt.Sprintf("export XDG_RUNTIME_DIR=%s\nexport DBUS_SESSION_BUS_ADDRESS=unix:path=%s\n", running.RuntimeDir, filepath.Join(running.RuntimeDir, "bus")), string(out))
	require.Contains(t, stderr.String(), fmt.Sprintf("(pid %d) already ran and runs until: agent-fleet user-manager stop %s", running.PID, running.RuntimeDir))

	// The manager outlived the command that booted it, and answers.
	bus := units.BusAddress{Address: "unix:path=" + filepath.Join(rt, "bus"), Source: units.SourceOptions}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = units.Probe(ctx, units.Options{Bus: bus})
	require.NoError(t, err)
	doctor := agentFleet(t, dir, "doctor")
	doctor.Env = append(doctor.Env, "XDG_RUNTIME_DIR="+rt, "DBUS_SESSION_BUS_ADDRESS=unix:path="+filepath.Join(rt, "bus"))
	res, _ := doctor.Output()
	require.Regexp(t, `OK +user manager +responds`, string(res))

	// Another directory is refused and left alone.
	other := t.TempDir()
	res, err = agentFleet(t, dir, "user-manager", "stop", other).CombinedOutput()
	require.Error(t, err, "%s", res)
	require.Contains(t, string(res), "not the runtime directory of a private user manager booted by agent-fleet")
	require.DirExists(t, other)

	stop := agentFleet(t, dir, "user-manager", "stop")
	stop.Env = append(stop.Env, "XDG_RUNTIME_DIR="+rt)
	res, err = stop.Output()
	require.NoError(t, err)
	require.Equal(t, "unset XDG_RUNTIME_DIR DBUS_SESSION_BUS_ADDRESS\n", string(res))
	require.NoDirExists(t, rt)
	_, err = os.Stat(filepath.Join(rt, "bus"))
	require.True(t, os.IsNotExist(err))
	require.Eventually(t, func() bool { return !managerRunsIn(rt) }, 10*time.Second, 50*time.Millisecond,
		"no process of the manager or its reaper is left")

	// Stopped twice: nothing there any more, which is not found.
	res, err = agentFleet(t, dir, "user-manager", "stop", rt).CombinedOutput()
	requireExit(t, err, exitNotFound)
	require.Contains(t, string(res), "does not exist (stopped already?)")
}

// managerRunsIn reports whether a process has rt in its command line or
// environment's XDG_RUNTIME_DIR (the manager, its reaper, their units).
func managerRunsIn(rt string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmdline, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		environ, _ := os.ReadFile(filepath.Join(p, "environ"))
		if strings.Contains(string(cmdline), rt) || strings.Contains(string(environ), "XDG_RUNTIME_DIR="+rt+"\x00") {
			return true
		}
	}
	return false
}
