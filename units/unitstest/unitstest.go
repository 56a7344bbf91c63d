// Package unitstest gives tests a real systemd user manager, an in-memory
// units.Manager (Fake) and the conformance suite (RunConformance) that keeps
// the fake honest against the real one. Only tests import it.
//
// Require, Manager and Setenv use a user manager that is already reachable
// (DBUS_SESSION_BUS_ADDRESS or $XDG_RUNTIME_DIR/bus). Where there is none,
// and only when running as root on a machine whose PID 1 is not systemd
// (containers, CI VMs), they boot ONE private `systemd --user` per
// `go test` run and share it between the run's test packages
// (docs/systemd.md "A private user manager"): the first package boots it under a file lock
// and records it in a state file in os.TempDir(), later packages reuse it
// while its pid lives, and a small reaper process stops it (SIGTERM by pid)
// once the `go` command that ran the tests has exited (the booting itself is
// units.BootPrivateManager; this package adds the sharing). Each boot has its own
// runtime directory, its own cgroup (/agent-fleet-test-<n>) and its own XDG
// config/data/state directories, so the real user's state is never touched.
//
// OwnManager boots a manager for one test alone, for tests that disturb the
// manager itself (SIGSTOP); such tests must not call t.Parallel.
//
// When AGENT_FLEET_CI=1 (set by .ci/run) a missing manager fails the test;
// otherwise the test is skipped with the reason.
package unitstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agent-fleet/agent-fleet/units"
)

// CIEnv is the variable that makes a missing user manager a test failure.
const CIEnv = "AGENT_FLEET_CI"

// Instance is a reachable user manager.
type Instance struct {
	// RuntimeDir is its XDG_RUNTIME_DIR ("" if unknown).
	RuntimeDir string
	// Bus is its user bus.
	Bus units.BusAddress
	// PID is the manager's pid when unitstest booted it, else 0.
	PID int
	// Cgroup is the cgroup the booted manager and all its units live in
	// ("/agent-fleet-test-<n>"), "" if not booted or not isolated.
	Cgroup string
}

// Env is the environment a child process needs to reach this manager.
func (i Instance) Env() []string {
	env := []string{"DBUS_SESSION_BUS_ADDRESS=" + i.Bus.Address}
	if i.RuntimeDir != "" {
		env = append(env, "XDG_RUNTIME_DIR="+i.RuntimeDir)
	}
	return env
}

// Unavailable ends the test because no user manager could be had: a
// failure when AGENT_FLEET_CI=1, a skip otherwise.
func Unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv(CIEnv) == "1" {
		t.Fatalf("a systemd user manager is required here (%s=1) but none is available: %v", CIEnv, err)
	}
	t.Skipf("no systemd user manager: %v (set %s=1 to make this a failure)", err, CIEnv)
}

// Require returns the shared user manager (see the package comment),
// ending the test through Unavailable when there is none. It does not
// change the process environment, so parallel tests may call it.
func Require(t testing.TB) Instance {
	t.Helper()
	inst, err := shared()
	if err != nil {
		Unavailable(t, err)
	}
	return inst
}

// Setenv is Require plus t.Setenv of XDG_RUNTIME_DIR and
// DBUS_SESSION_BUS_ADDRESS, for code that resolves the bus from the
// environment (or runs child processes that do). Not for parallel tests.
func Setenv(t testing.TB) Instance {
	t.Helper()
	inst := Require(t)
	for _, kv := range inst.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return inst
}

// Manager connects to the shared user manager; the connection is closed
// when the test ends.
func Manager(t testing.TB) *units.Systemd {
	t.Helper()
	return Connect(t, Require(t))
}

// Connect connects to inst; the connection is closed when the test ends.
func Connect(t testing.TB, inst Instance) *units.Systemd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := units.Connect(ctx, units.Options{Bus: inst.Bus})
	if err != nil {
		t.Fatalf("connect to the user manager at %s: %v", inst.Bus.Address, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// UnitName returns a unit name no other test or run uses:
// "<prefix>-<12 hex>.service".
func UnitName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b) + ".service"
}

// Cleanup stops and resets the unit when the test ends, so nothing a test
// started outlives it.
func Cleanup(t testing.TB, m units.Manager, name string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := m.StopUnit(ctx, name); err != nil && !errors.Is(err, units.ErrUnitNotFound) {
			t.Errorf("cleanup: %v", err)
		}
		if err := m.ResetFailed(ctx, name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
}
