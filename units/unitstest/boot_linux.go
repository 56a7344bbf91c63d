//go:build linux

package unitstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-fleet/agent-fleet/units"
)

const (
	// markerDir makes `systemd --user` believe systemd is PID 1. It must
	// exist only while a manager boots: apt's scripts read it too.
	markerDir = "/run/systemd/system"
	// sentinel inside markerDir says that we created it (so a crashed
	// boot's marker is recognised and removed by the next boot).
	sentinel = markerDir + "/.agent-fleet-test-boot"

	bootTimeout  = 10 * time.Second
	lockTimeout  = 60 * time.Second
	stopTimeout  = 10 * time.Second
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

// Booted is a manager booted by Boot.
type Booted struct {
	Instance
	dirs      []string      // our cgroup's directory in each hierarchy
	exited    chan struct{} // closed when the manager process was reaped by us
	startTime string        // the manager's start time, guards its pid
}

// Bootable says why this process may not boot a private user manager, or
// nil if it may: it must run as root on a machine whose PID 1 is not
// systemd, with systemd and the user bus socket unit installed.
func Bootable() error {
	_, err := bootPrerequisites()
	return err
}

func bootPrerequisites() (systemd string, err error) {
	if os.Geteuid() != 0 {
		return "", errors.New("not root, so no private user manager can be booted (log in, or `loginctl enable-linger $USER`, to get a user manager)")
	}
	if comm, _ := os.ReadFile("/proc/1/comm"); strings.TrimSpace(string(comm)) == "systemd" {
		return "", errors.New("PID 1 is systemd, so a private manager is not booted: log in, or `loginctl enable-linger $USER`, to get the real user manager")
	}
	for _, p := range []string{"/usr/lib/systemd/systemd", "/lib/systemd/systemd"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			systemd = p
			break
		}
	}
	if systemd == "" {
		return "", errors.New("systemd is not installed (apt-get install systemd dbus-user-session)")
	}
	for _, p := range []string{"/usr/lib/systemd/user/dbus.socket", "/lib/systemd/user/dbus.socket"} {
		if _, err := os.Stat(p); err == nil {
			return systemd, nil
		}
	}
	return "", errors.New("the user bus socket unit is missing (apt-get install dbus-user-session)")
}

// Boot starts a private `systemd --user` (testing/real-systemd.md): its own
// runtime directory (0700), its own cgroup in every hierarchy systemd
// tracks, a minimal environment, and the /run/systemd/system marker only
// while it boots (under a machine-wide lock, removed again at once). A
// reaper stops the manager by pid once opts.watch (default: this process)
// has exited. Stop it earlier with Stop.
func Boot(opts BootOptions) (*Booted, error) {
	systemd, err := bootPrerequisites()
	if err != nil {
		return nil, err
	}
	if opts.watch == 0 {
		opts.watch = os.Getpid()
	}
	rt, err := os.MkdirTemp("", "agent-fleet-systemd-")
	if err != nil {
		return nil, err
	}
	b := &Booted{Instance: Instance{RuntimeDir: rt, Bus: units.BusAddress{
		Address: units.UnixPathAddress(filepath.Join(rt, "bus")), Source: units.SourceOptions}}}
	if err := b.boot(systemd, opts); err != nil {
		b.Stop()
		return nil, fmt.Errorf("boot a private systemd user manager: %w", err)
	}
	return b, nil
}

func (b *Booted) boot(systemd string, opts BootOptions) error {
	rt := b.RuntimeDir
	if err := os.Chmod(rt, 0o700); err != nil {
		return err
	}
	configHome := opts.ConfigHome
	if configHome == "" {
		configHome = filepath.Join(rt, "config")
	}
	for _, d := range []string{configHome, filepath.Join(rt, "data"), filepath.Join(rt, "state")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	// Our own cgroup keeps this manager's units apart from every other
	// manager's (they would all share /app.slice at the root otherwise).
	if cg, err := units.OpenCgroups(""); err == nil {
		name := "/agent-fleet-test-" + randomHex(5)
		for _, dir := range cg.Dirs(name) {
			if os.Mkdir(dir, 0o755) == nil {
				b.dirs = append(b.dirs, dir)
			}
		}
		if len(b.dirs) > 0 {
			b.Cgroup = name
		}
	}

	unlock, err := lockFile(filepath.Join(os.TempDir(), "agent-fleet-systemd-boot.lock"), lockTimeout)
	if err != nil {
		return err
	}
	defer unlock()
	removeMarker, err := placeMarker()
	if err != nil {
		return err
	}
	defer removeMarker()

	log, err := os.OpenFile(filepath.Join(rt, "manager.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	// The shell moves itself into our cgroups, then becomes the manager.
	script := `s=$1; shift; for d do echo $$ > "$d/cgroup.procs" || exit 1; done; exec "$s" --user`
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, "agent-fleet-test-manager", systemd}, b.dirs...)...)
	cmd.Env = managerEnv(rt, configHome)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	b.PID = cmd.Process.Pid
	b.exited = make(chan struct{})
	go func() { _ = cmd.Wait(); close(b.exited) }()

	deadline := time.Now().Add(bootTimeout)
	for !isSocket(filepath.Join(rt, "systemd", "private")) || !isSocket(filepath.Join(rt, "bus")) {
		select {
		case <-b.exited:
			return fmt.Errorf("systemd --user exited at once: %s", tail(filepath.Join(rt, "manager.log")))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no user bus after %s: %s", bootTimeout, tail(filepath.Join(rt, "manager.log")))
		}
	}
	removeMarker()
	b.startTime = procStartTime(b.PID)
	if err := startReaper(opts.watch, b.PID, b.startTime, rt, opts.stateBase, b.dirs); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	if _, err := units.Probe(ctx, units.Options{Bus: b.Bus}); err != nil {
		return fmt.Errorf("booted manager does not answer: %w", err)
	}
	return nil
}

// managerEnv is the private manager's whole environment: every unit
// inherits it, so it holds nothing of the test process.
func managerEnv(rt, configHome string) []string {
	env := []string{
		"XDG_RUNTIME_DIR=" + rt,
		"XDG_CONFIG_HOME=" + configHome,
		"XDG_DATA_HOME=" + filepath.Join(rt, "data"),
		"XDG_STATE_HOME=" + filepath.Join(rt, "state"),
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LANG=C.UTF-8",
	}
	for _, k := range []string{"HOME", "USER", "LOGNAME"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// placeMarker creates /run/systemd/system (with our sentinel) unless a
// marker someone else made is there. The returned function removes what we
// made; it is safe to call twice.
func placeMarker() (func(), error) {
	if _, err := os.Stat(markerDir); err == nil {
		if _, err := os.Stat(sentinel); err != nil {
			return func() {}, nil // not ours: leave it alone
		}
	}
	if err := os.MkdirAll(markerDir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", markerDir, err)
	}
	if err := os.WriteFile(sentinel, nil, 0o644); err != nil {
		os.Remove(markerDir)
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			os.Remove(sentinel)
			os.Remove(markerDir) // only if empty
		})
	}, nil
}

// Stop ends the manager by its pid: SIGCONT (in case a test stopped it),
// SIGTERM, SIGKILL after 10 s; then kills whatever is left in its cgroup
// and removes its cgroup and runtime directories. Safe to call twice.
func (b *Booted) Stop() error {
	var errs []error
	running := false
	if b.exited != nil {
		select {
		case <-b.exited: // reaped: its pid may already belong to another process
		default:
			running = true
		}
	}
	if running {
		_ = syscall.Kill(b.PID, syscall.SIGCONT)
		_ = syscall.Kill(b.PID, syscall.SIGTERM)
		select {
		case <-b.exited:
		case <-time.After(stopTimeout):
			_ = syscall.Kill(b.PID, syscall.SIGKILL)
			<-b.exited
			errs = append(errs, fmt.Errorf("manager %d ignored SIGTERM for %s", b.PID, stopTimeout))
		}
	}
	if err := removeCgroup(b.Cgroup, b.dirs); err != nil {
		errs = append(errs, err)
	}
	b.dirs = nil
	if b.RuntimeDir != "" {
		if err := os.RemoveAll(b.RuntimeDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeCgroup kills what is left in our cgroup and removes its
// directories, deepest first.
func removeCgroup(name string, dirs []string) error {
	if name == "" || len(dirs) == 0 {
		return nil
	}
	var errs []error
	if cg, err := units.OpenCgroups(""); err == nil {
		if _, err := cg.Kill(context.Background(), name); err != nil {
			errs = append(errs, err)
		}
	}
	for _, dir := range dirs {
		var sub []string
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				sub = append(sub, path)
			}
			return nil
		})
		slices.Reverse(sub)
		for _, d := range sub {
			if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

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
	key := fmt.Sprintf("%d-%s", run, procStartTime(run))
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
	data, _ := json.Marshal(state{Instance: b.Instance, StartTime: b.startTime, Dirs: b.dirs})
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
	if st.PID <= 0 || procStartTime(st.PID) != st.StartTime {
		return st, errors.New("recorded manager is gone")
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	_, err = units.Probe(ctx, units.Options{Bus: st.Bus})
	return st, err
}

// reaperScript waits for the watched process to exit, then stops the
// manager by pid (checked against its start time), kills what is left in
// its cgroup, removes its directories and the state files.
// Arguments: watched pid, its start time, manager pid, its start time,
// runtime dir, state file base ("" for none), cgroup dirs….
const reaperScript = `
st() { s=$(sed 's/.*) //' /proc/$1/stat 2>/dev/null) || return 0; set -- $s; [ "$1" != Z ] && echo "${20}"; }
w=$1 ws=$2 m=$3 ms=$4 rt=$5 base=$6; shift 6
while [ "$(st $w)" = "$ws" ]; do sleep 1; done
if [ "$(st $m)" = "$ms" ]; then
  kill -CONT $m 2>/dev/null; kill -TERM $m 2>/dev/null
  i=0; while [ "$(st $m)" = "$ms" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
  [ "$(st $m)" = "$ms" ] && kill -KILL $m 2>/dev/null
fi
for d do [ -e "$d/cgroup.kill" ] && echo 1 > "$d/cgroup.kill" 2>/dev/null; done
i=0
while [ $i -lt 50 ]; do
  p=$(for d do find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null; done)
  [ -z "$p" ] && break
  kill -KILL $p 2>/dev/null; sleep 0.1; i=$((i+1))
done
for d do find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null; done
rm -rf "$rt"
[ -n "$base" ] && rm -f "$base.json" "$base.lock"
exit 0
`

// startReaper starts the detached reaper; it holds none of our files.
func startReaper(watch, manager int, managerStart, rt, base string, dirs []string) error {
	args := append([]string{"-c", reaperScript, "agent-fleet-test-reaper",
		strconv.Itoa(watch), procStartTime(watch), strconv.Itoa(manager), managerStart, rt, base}, dirs...)
	cmd := exec.Command("/bin/sh", args...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the manager's reaper: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	return nil
}

// procStartTime is field 22 of /proc/<pid>/stat (start time in clock
// ticks since boot), "" if the process is gone or a zombie. With the pid it
// identifies a process across pid reuse.
func procStartTime(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 20 || fields[0] == "Z" {
		return ""
	}
	return fields[19]
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

func isSocket(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

func tail(path string) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], " | ")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
