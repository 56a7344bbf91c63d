//go:build linux

package unitstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-fleet/agent-fleet/units"
)

const (
	lockTimeout  = 300 * time.Second
	probeTimeout = 5 * time.Second
)

// BootOptions configure Boot.
type BootOptions struct {
	// ConfigHome is the manager's XDG_CONFIG_HOME, the directory it reads
	// user unit files from; default a directory below its runtime dir.
	ConfigHome string
	// watch is the pid whose exit makes the reaper stop the manager;
	// default this process.
	watch int
	// stateBase is the shared manager's state file path without ".json";
	// the reaper removes those files too.
	stateBase string
}

// Booted is a manager booted by Boot: a units.PrivateManager seen as an
// Instance.
type Booted struct {
	Instance
	pm *units.PrivateManager
}

// Bootable says why this process may not boot a private user manager, or
// nil if it may (units.CanBootPrivateManager).
func Bootable() error { return units.CanBootPrivateManager() }

// Boot starts a private `systemd --user` for tests with
// units.BootPrivateManager (its cgroup is /agent-fleet-test-<hex>). A
// reaper stops the manager by pid once opts.watch (default: this process)
// has exited. Stop it earlier with Stop.
func Boot(opts BootOptions) (*Booted, error) {
	bo := units.BootOptions{Name: "test", ConfigHome: opts.ConfigHome, Watch: opts.watch}
	if opts.stateBase != "" {
		bo.ReaperRemoves = []string{opts.stateBase + ".json", opts.stateBase + ".lock"}
	}
	pm, err := units.BootPrivateManager(context.Background(), bo)
	if err != nil {
		return nil, err
	}
	return &Booted{pm: pm, Instance: Instance{RuntimeDir: pm.RuntimeDir, Bus: pm.Bus, PID: pm.PID, Cgroup: pm.Cgroup}}, nil
}

// Stop ends the manager and removes its cgroup and runtime directories
// (units.PrivateManager.Stop). Safe to call twice.
func (b *Booted) Stop() error { return b.pm.Stop() }

// OwnManager boots a manager for this test alone (for tests that stop or
// otherwise disturb it) and stops it when the test ends. Such tests must
// not run in parallel with others that time their calls.
func OwnManager(t testing.TB) Instance {
	t.Helper()
	b, err := Boot(BootOptions{})
	if err != nil {
		Unavailable(t, err)
	}
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Errorf("stop the test's own user manager: %v", err)
		}
	})
	return b.Instance
}

// state is what the shared manager's state file records.
type state struct {
	Instance
	StartTime string   `json:"startTime"`
	Dirs      []string `json:"dirs"`
}

var (
	sharedOnce sync.Once
	sharedInst Instance
	sharedErr  error
)

// shared finds or boots the run's shared manager (see the package comment).
func shared() (Instance, error) {
	sharedOnce.Do(func() { sharedInst, sharedErr = findShared() })
	return sharedInst, sharedErr
}

func findShared() (Instance, error) {
	envErr := fromEnvironment()
	if envErr == nil {
		bus, _ := units.ResolveBus(nil)
		return Instance{RuntimeDir: os.Getenv("XDG_RUNTIME_DIR"), Bus: bus}, nil
	}
	if err := Bootable(); err != nil {
		return Instance{}, fmt.Errorf("%v; %v", envErr, err)
	}
	// One manager per `go test` run: the run is the `go` command, our
	// parent, identified by pid and start time.
	run := os.Getppid()
	key := fmt.Sprintf("%d-%s", run, units.ProcessStartTime(run))
	base := filepath.Join(os.TempDir(), "agent-fleet-systemd-run-"+key)
	unlock, err := lockFile(base+".lock", lockTimeout)
	if err != nil {
		return Instance{}, err
	}
	defer unlock()
	if st, err := readState(base + ".json"); err == nil {
		return st.Instance, nil
	}
	b, err := Boot(BootOptions{watch: run, stateBase: base})
	if err != nil {
		return Instance{}, err
	}
	data, _ := json.Marshal(state{Instance: b.Instance, StartTime: b.pm.StartTime, Dirs: b.pm.CgroupDirs})
	if err := os.WriteFile(base+".json", data, 0o600); err != nil {
		b.Stop()
		return Instance{}, err
	}
	return b.Instance, nil
}

// fromEnvironment checks for a reachable user manager named by the
// environment.
func fromEnvironment() error {
	bus, err := units.ResolveBus(nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	if _, err := units.Probe(ctx, units.Options{Bus: bus}); err != nil {
		return fmt.Errorf("the user manager at %s (from %s) does not answer: %w", bus.Address, bus.Source, err)
	}
	return nil
}

// readState returns the recorded shared manager if it still runs and
// answers.
func readState(path string) (state, error) {
	var st state
	data, err := os.ReadFile(path)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, err
	}
	if st.PID <= 0 || units.ProcessStartTime(st.PID) != st.StartTime {
		return st, errors.New("recorded manager is gone")
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	_, err = units.Probe(ctx, units.Options{Bus: st.Bus})
	return st, err
}

// lockFile takes an exclusive flock on path, waiting up to timeout.
func lockFile(path string, timeout time.Duration) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
