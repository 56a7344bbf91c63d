//go:build linux

package units

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
	"time"

	"golang.org/x/sys/unix"
)

const (
	// markerDir makes `systemd --user` believe systemd is PID 1. It must
	// exist only while a manager boots: apt's scripts read it too.
	markerDir = "/run/systemd/system"
	// bootSentinel inside markerDir says that agent-fleet created it, so a
	// crashed boot's marker is recognised and removed by the next boot. The
	// name is shared with contrib/test-systemd-manager.sh and .ci/run.
	bootSentinel = markerDir + "/.agent-fleet-test-boot"
	// bootLockName (in os.TempDir()) serialises boots machine-wide, so no
	// two boots race over the marker.
	bootLockName = "agent-fleet-systemd-boot.lock"

	// A busy machine (a whole race-enabled suite compiling beside the
	// boot, a noisy host) has taken more than 10 s for either phase, the
	// sockets and the first answer over the bus (which starts the bus
	// daemon by socket activation).
	bootTimeout      = 30 * time.Second
	bootAttempts     = 2
	bootLockTimeout  = 180 * time.Second
	managerStopAfter = 10 * time.Second
	bootProbeTimeout = 30 * time.Second
)

// BootOptions configure BootPrivateManager.
type BootOptions struct {
	// Name labels the manager: its cgroup is /agent-fleet-<Name>-<10 hex>
	// and its processes' argv[0] agent-fleet-<Name>-manager and
	// agent-fleet-<Name>-reaper. Letters, digits and '-'; default "private".
	Name string
	// ConfigHome is the manager's XDG_CONFIG_HOME, the directory it reads
	// user unit files from; default a directory below its runtime dir.
	ConfigHome string
	// Watch is the pid whose exit makes the reaper stop the manager;
	// default this process. A manager therefore never outlives the process
	// that booted it (or the one named here), even one killed with SIGKILL.
	Watch int
	// ReaperRemoves are files the reaper removes after it stopped the
	// manager (a test helper's state files).
	ReaperRemoves []string

	// beforeReaper, when set (by tests), runs after the manager's sockets
	// exist and before its reaper starts.
	beforeReaper func(*PrivateManager)
	// afterStart, when set (by tests), runs once the manager process
	// started, with the attempt's number (from 1).
	afterStart func(m *PrivateManager, attempt int)
	// socketsTimeout, when set (by tests), replaces bootTimeout.
	socketsTimeout time.Duration
}

// PrivateManager is a `systemd --user` booted by BootPrivateManager. Its
// fields describe it; they are set once the boot succeeded.
type PrivateManager struct {
	// Name is BootOptions.Name: what the manager was booted for.
	Name string
	// RuntimeDir is its XDG_RUNTIME_DIR, a fresh 0700 directory below
	// os.TempDir() that Stop removes.
	RuntimeDir string
	// Bus is its user bus ($RuntimeDir/bus), with Source SourceOptions.
	Bus BusAddress
	// PID of the manager process.
	PID int
	// StartTime is the manager's start time (ProcessStartTime); with PID it
	// identifies the process across pid reuse.
	StartTime string
	// Cgroup is the cgroup the manager and all its units live in
	// ("/agent-fleet-<name>-<hex>"), "" when no cgroup could be made for it.
	Cgroup string
	// CgroupDirs are Cgroup's directories, one per hierarchy.
	CgroupDirs []string

	exited chan struct{} // closed when the manager was reaped by us
	reaper *exec.Cmd
	reaped chan struct{} // closed when the reaper was reaped by us
	mu     sync.Mutex
}

// Env is the environment a process needs to reach this manager:
// DBUS_SESSION_BUS_ADDRESS and XDG_RUNTIME_DIR.
func (m *PrivateManager) Env() []string {
	return []string{"DBUS_SESSION_BUS_ADDRESS=" + m.Bus.Address, "XDG_RUNTIME_DIR=" + m.RuntimeDir}
}

// CanBootPrivateManager says why this process may not boot a private user
// manager, or returns nil if it may: it must run as root on a machine whose
// PID 1 is not systemd (containers, CI VMs), with systemd and the user bus
// socket unit (dbus-user-session) installed. The message says what to do
// instead.
func CanBootPrivateManager() error {
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

// BootPrivateManager starts a private `systemd --user`
// (docs/systemd.md "A private user manager"): its own runtime directory (0700), its own
// cgroup in every hierarchy systemd tracks (so its units never mix with
// another manager's under /app.slice), a minimal environment, and the
// /run/systemd/system marker only while it boots (under a machine-wide
// lock, removed again as soon as the manager's sockets exist). It returns
// once the manager answers on its bus; ctx bounds the boot (default 30 s
// for the sockets plus 30 s for the first answer). A manager that made no
// sockets in time is stopped and one fresh manager is tried; the error
// then reports both attempts, each with where its manager was stuck.
//
// A detached reaper stops the manager by pid once opts.Watch (default this
// process) has exited; Stop stops it earlier. The watched process is
// identified (pid and start time) before the boot begins: if it is not
// running then, nothing is booted; if it exits while the manager boots, the
// reaper stops the manager at once and the boot fails once the reaper is
// done. CanBootPrivateManager's conditions apply: otherwise the error says
// what is missing.
func BootPrivateManager(ctx context.Context, opts BootOptions) (*PrivateManager, error) {
	systemd, err := bootPrerequisites()
	if err != nil {
		return nil, err
	}
	if opts.Name == "" {
		opts.Name = "private"
	}
	for _, r := range opts.Name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			return nil, fmt.Errorf("boot a private systemd user manager: name %q: only letters, digits and '-'", opts.Name)
		}
	}
	if opts.Watch == 0 {
		opts.Watch = os.Getpid()
	}
	// Identify the watched process now: read after the boot, a process
	// that ended meanwhile would have no start time to wait on.
	watchStart := ProcessStartTime(opts.Watch)
	if watchStart == "" {
		return nil, fmt.Errorf("boot a private systemd user manager: watched process %d is not running", opts.Watch)
	}
	var errs []error
	for attempt := 1; attempt <= bootAttempts; attempt++ {
		m, err := bootOnce(ctx, systemd, opts, watchStart, attempt)
		if err == nil {
			return m, nil
		}
		errs = append(errs, err)
		// Only a manager that never got its sockets is worth a second try:
		// every other failure would repeat.
		if !errors.Is(err, errNoSockets) || ctx.Err() != nil {
			break
		}
	}
	if len(errs) > 1 {
		return nil, fmt.Errorf("boot a private systemd user manager: %d attempts failed: %w", len(errs), errors.Join(errs...))
	}
	return nil, fmt.Errorf("boot a private systemd user manager: %w", errs[0])
}

func bootOnce(ctx context.Context, systemd string, opts BootOptions, watchStart string, attempt int) (*PrivateManager, error) {
	rt, err := os.MkdirTemp("", "agent-fleet-systemd-")
	if err != nil {
		return nil, err
	}
	m := &PrivateManager{Name: opts.Name, RuntimeDir: rt, Bus: BusAddress{
		Address: UnixPathAddress(filepath.Join(rt, "bus")), Source: SourceOptions}}
	if err := m.boot(ctx, systemd, opts, watchStart, attempt); err != nil {
		_ = m.Stop()
		return nil, err
	}
	return m, nil
}

// errNoSockets: the manager runs but made no sockets within bootTimeout.
var errNoSockets = errors.New("no user bus")

// stuckReport says where a manager that made no sockets is: its process
// state and kernel wait channel, and what its runtime directory holds.
// systemd --user run as root logs to /dev/console, so its own log is
// usually empty.
func (m *PrivateManager) stuckReport() string {
	state := "?"
	if fields := procStat(m.PID); len(fields) > 0 {
		state = fields[0]
	}
	wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", m.PID))
	var made []string
	for _, p := range []string{"systemd/private", "bus"} {
		if _, err := os.Lstat(filepath.Join(m.RuntimeDir, p)); err == nil {
			made = append(made, p)
		}
	}
	return fmt.Sprintf("manager pid %d state %s wchan %q, made %v, its cgroup runs %v; its log: %q",
		m.PID, state, strings.TrimSpace(string(wchan)), made, m.cgroupCommands(), tail(filepath.Join(m.RuntimeDir, "manager.log")))
}

// cgroupCommands names the processes in the manager's cgroup (the bus
// daemon among them once socket activation started it), at most 10.
func (m *PrivateManager) cgroupCommands() []string {
	if m.Cgroup == "" {
		return nil
	}
	cg, err := OpenCgroups("")
	if err != nil {
		return nil
	}
	pids, _ := cg.Procs(m.Cgroup)
	var names []string
	for _, p := range cg.Processes(pids[:min(len(pids), 10)]) {
		if p.Name != "" {
			names = append(names, p.Name)
		}
	}
	return names
}

func (m *PrivateManager) boot(ctx context.Context, systemd string, opts BootOptions, watchStart string, attempt int) error {
	rt := m.RuntimeDir
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
	if cg, err := OpenCgroups(""); err == nil {
		name := "/agent-fleet-" + opts.Name + "-" + randomHex(5)
		for _, dir := range cg.Dirs(name) {
			if os.Mkdir(dir, 0o755) == nil {
				m.CgroupDirs = append(m.CgroupDirs, dir)
			}
		}
		if len(m.CgroupDirs) > 0 {
			m.Cgroup = name
		}
	}

	lockRelease, err := lockFile(ctx, filepath.Join(os.TempDir(), bootLockName), bootLockTimeout)
	if err != nil {
		return err
	}
	// The lock guards the marker only: it is released once the marker is
	// gone, so other boots need not wait for this manager's first answer.
	unlock := sync.OnceFunc(lockRelease)
	defer unlock()
	removeMarker, err := placeMarker()
	if err != nil {
		return err
	}
	defer removeMarker()
	if err := makeInaccessibleNodes(); err != nil {
		return err
	}

	log, err := os.OpenFile(filepath.Join(rt, "manager.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	// The shell moves itself into our cgroups, then becomes the manager.
	script := `s=$1; shift; for d do echo $$ > "$d/cgroup.procs" || exit 1; done; exec "$s" --user`
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, "agent-fleet-" + opts.Name + "-manager", systemd}, m.CgroupDirs...)...)
	cmd.Env = managerEnv(rt, configHome)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	m.PID = cmd.Process.Pid
	m.exited = make(chan struct{})
	go func() { _ = cmd.Wait(); close(m.exited) }()
	if opts.afterStart != nil {
		opts.afterStart(m, attempt)
	}

	timeout := bootTimeout
	if opts.socketsTimeout > 0 {
		timeout = opts.socketsTimeout
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for !isSocket(filepath.Join(rt, "systemd", "private")) || !isSocket(filepath.Join(rt, "bus")) {
		select {
		case <-m.exited:
			return fmt.Errorf("systemd --user exited at once: %s", tail(filepath.Join(rt, "manager.log")))
		case <-deadline.C:
			return fmt.Errorf("%w after %s (%s)", errNoSockets, timeout, m.stuckReport())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	removeMarker()
	unlock()
	m.StartTime = ProcessStartTime(m.PID)
	if m.StartTime == "" {
		return fmt.Errorf("systemd --user exited at once: %s", tail(filepath.Join(rt, "manager.log")))
	}
	if opts.beforeReaper != nil {
		opts.beforeReaper(m)
	}
	if err := m.startReaper(opts, watchStart); err != nil {
		return err
	}
	if ProcessStartTime(opts.Watch) != watchStart {
		// The reaper saw it too and is stopping the manager; let it finish
		// rather than race it over the same pid and directories.
		select {
		case <-m.reaped:
		case <-ctx.Done():
		}
		return fmt.Errorf("watched process %d exited while the manager booted", opts.Watch)
	}
	return m.firstAnswer(ctx)
}

// firstAnswer waits for the booted manager to answer on its bus. The bus
// socket's file exists from its bind, before systemd listens on it: a
// connection refused then is the manager still starting (more so on a busy
// machine), and is tried again until the deadline (default 30 s).
func (m *PrivateManager) firstAnswer(ctx context.Context) error {
	pctx, cancel := withDefaultDeadline(ctx, bootProbeTimeout)
	defer cancel()
	for {
		_, err := Probe(pctx, Options{Bus: m.Bus})
		if err == nil {
			return nil
		}
		select {
		case <-m.exited:
			return fmt.Errorf("systemd --user exited while it booted: %s", tail(filepath.Join(m.RuntimeDir, "manager.log")))
		case <-pctx.Done():
			return fmt.Errorf("booted manager does not answer within %s: %w (%s)", bootProbeTimeout, err, m.stuckReport())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// managerEnv is the private manager's whole environment: every unit
// inherits it, so it holds nothing of the booting process.
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
		if _, err := os.Stat(bootSentinel); err != nil {
			return func() {}, nil // not ours: leave it alone
		}
	}
	if err := os.MkdirAll(markerDir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", markerDir, err)
	}
	if err := os.WriteFile(bootSentinel, nil, 0o644); err != nil {
		os.Remove(markerDir)
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			os.Remove(bootSentinel)
			os.Remove(markerDir) // only if empty
		})
	}, nil
}

// inaccessibleDir holds the empty nodes of every file type that a root
// manager's InaccessiblePaths= mounts over a path (an unprivileged one uses
// those in its own runtime directory). systemd as PID 1 creates them at
// boot; where it is not PID 1 the boot makes them, as PID 1 would, and
// leaves them: nothing else reads them.
const inaccessibleDir = "/run/systemd/inaccessible"

// makeInaccessibleNodes creates what inaccessibleDir lacks: dir, reg, fifo,
// sock, chr and blk, all mode 0000 (chr and blk are device 0:0).
func makeInaccessibleNodes() error {
	if os.Geteuid() != 0 {
		return nil
	}
	if err := os.MkdirAll(inaccessibleDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", inaccessibleDir, err)
	}
	old := unix.Umask(0o777)
	defer unix.Umask(old)
	for _, n := range []struct {
		name string
		mode uint32
	}{{"dir", unix.S_IFDIR}, {"reg", unix.S_IFREG}, {"fifo", unix.S_IFIFO}, {"sock", unix.S_IFSOCK}, {"chr", unix.S_IFCHR}, {"blk", unix.S_IFBLK}} {
		path := filepath.Join(inaccessibleDir, n.name)
		var err error
		if n.mode == unix.S_IFDIR {
			err = unix.Mkdir(path, 0)
		} else {
			err = unix.Mknod(path, n.mode, 0)
		}
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("create %s: %w", path, err)
		}
	}
	return nil
}

// Stop ends the manager by its pid: SIGCONT (in case someone stopped it),
// SIGTERM, SIGKILL after 10 s; then kills whatever is left in its cgroup,
// removes its cgroup and runtime directories, and ends the reaper. Safe to
// call twice and from several goroutines.
func (m *PrivateManager) Stop() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	running := false
	if m.exited != nil {
		select {
		case <-m.exited: // reaped: its pid may already belong to another process
		default:
			running = true
		}
	}
	if running {
		_ = syscall.Kill(m.PID, syscall.SIGCONT)
		_ = syscall.Kill(m.PID, syscall.SIGTERM)
		select {
		case <-m.exited:
		case <-time.After(managerStopAfter):
			_ = syscall.Kill(m.PID, syscall.SIGKILL)
			<-m.exited
			errs = append(errs, fmt.Errorf("manager %d ignored SIGTERM for %s", m.PID, managerStopAfter))
		}
	}
	if err := removeCgroup(m.Cgroup, m.CgroupDirs); err != nil {
		errs = append(errs, err)
	}
	m.CgroupDirs = nil
	if m.RuntimeDir != "" {
		if err := os.RemoveAll(m.RuntimeDir); err != nil {
			errs = append(errs, err)
		}
	}
	if m.reaper != nil {
		select {
		case <-m.reaped:
		default: // still our unreaped child: its pid (and group) is safe to signal
			_ = syscall.Kill(-m.reaper.Process.Pid, syscall.SIGKILL)
			<-m.reaped
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
	if cg, err := OpenCgroups(""); err == nil {
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

// reaperScript waits for the watched process to exit, then stops the
// manager by pid (checked against its start time), kills what is left in
// its cgroup, removes its directories and the listed files.
// Arguments: watched pid, its start time, manager pid, its start time,
// runtime dir, then the cgroup dirs…, "--", the files to remove….
// A start time of "" (gone, a zombie, unknown) never matches a process: an
// unknown watched process counts as exited, an unknown manager is not
// signalled (its pid may be another process's by now).
const reaperScript = `
st() { s=$(sed 's/.*) //' /proc/$1/stat 2>/dev/null) || return 0; set -- $s; [ "$1" != Z ] && echo "${20}"; }
w=$1 ws=$2 m=$3 ms=$4 rt=$5; shift 5
while [ -n "$ws" ] && [ "$(st $w)" = "$ws" ]; do sleep 1; done
if [ -n "$ms" ] && [ "$(st $m)" = "$ms" ]; then
  kill -CONT $m 2>/dev/null; kill -TERM $m 2>/dev/null
  i=0; while [ "$(st $m)" = "$ms" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
  [ "$(st $m)" = "$ms" ] && kill -KILL $m 2>/dev/null
fi
for d do [ "$d" = -- ] && break; [ -e "$d/cgroup.kill" ] && echo 1 > "$d/cgroup.kill" 2>/dev/null; done
i=0
while [ $i -lt 50 ]; do
  p=$(for d do [ "$d" = -- ] && break; find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null; done)
  [ -z "$p" ] && break
  kill -KILL $p 2>/dev/null; sleep 0.1; i=$((i+1))
done
for d do [ "$d" = -- ] && break; find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null; done
rm -rf "$rt"
files=0; for f do [ $files = 1 ] && rm -f "$f"; [ "$f" = -- ] && files=1; done
exit 0
`

// startReaper starts the detached reaper (in its own session, holding none
// of our files) for the watched process opts.Watch that started at
// watchStart.
func (m *PrivateManager) startReaper(opts BootOptions, watchStart string) error {
	args := []string{"-c", reaperScript, "agent-fleet-" + opts.Name + "-reaper",
		strconv.Itoa(opts.Watch), watchStart, strconv.Itoa(m.PID), m.StartTime, m.RuntimeDir}
	args = append(append(append(args, m.CgroupDirs...), "--"), opts.ReaperRemoves...)
	cmd := exec.Command("/bin/sh", args...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the manager's reaper: %w", err)
	}
	m.reaper, m.reaped = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(m.reaped) }()
	return nil
}

// ProcessStartTime is field 22 of /proc/<pid>/stat (the start time in clock
// ticks since boot), "" if the process is gone or a zombie. With the pid it
// identifies a process across pid reuse.
func ProcessStartTime(pid int) string {
	fields := procStat(pid)
	if len(fields) < 20 || fields[0] == "Z" {
		return ""
	}
	return fields[19]
}

// ProcessState is field 3 of /proc/<pid>/stat, the process's state ("R",
// "S", "Z" for a zombie, …), "" if it cannot be read (the process is gone).
func ProcessState(pid int) string {
	if fields := procStat(pid); len(fields) > 0 {
		return fields[0]
	}
	return ""
}

// procStat is /proc/<pid>/stat's fields after the command name (which may
// hold spaces and parentheses): state first; nil when unreadable.
func procStat(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(data)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

// lockFile takes an exclusive flock on path, waiting up to timeout or
// until ctx ends.
func lockFile(ctx context.Context, path string, timeout time.Duration) (func(), error) {
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
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) || ctx.Err() != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
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

// managerStateFile, in a private manager's runtime directory, records what
// StopPrivateManagerAt needs to stop it from another process.
const managerStateFile = "agent-fleet-manager.json"

// managerState is the content of managerStateFile.
type managerState struct {
	Name            string   `json:"name,omitempty"`
	PID             int      `json:"pid"`
	StartTime       string   `json:"startTime"`
	Cgroup          string   `json:"cgroup,omitempty"`
	CgroupDirs      []string `json:"cgroupDirs,omitempty"`
	ReaperPID       int      `json:"reaperPid,omitempty"`
	ReaperStartTime string   `json:"reaperStartTime,omitempty"`
}

// Record writes what StopPrivateManagerAt needs into the manager's runtime
// directory, so that another process can stop it once this one, which
// booted it, has exited (`agent-fleet user-manager start` then `stop`).
func (m *PrivateManager) Record() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := managerState{Name: m.Name, PID: m.PID, StartTime: m.StartTime, Cgroup: m.Cgroup, CgroupDirs: m.CgroupDirs}
	if m.reaper != nil {
		st.ReaperPID = m.reaper.Process.Pid
		st.ReaperStartTime = ProcessStartTime(st.ReaperPID)
	}
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(m.RuntimeDir, managerStateFile), append(data, '\n'), 0o600)
}

// BootRecorded boots a private manager (BootPrivateManager) that outlives
// this process and records it (Record) for another process to find and
// stop; one it cannot record is stopped again.
func BootRecorded(ctx context.Context, opts BootOptions) (*PrivateManager, error) {
	m, err := BootPrivateManager(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := m.Record(); err != nil {
		_ = m.Stop()
		return nil, err
	}
	return m, nil
}

// FindPrivateManager returns a running private manager booted under name
// and recorded (Record) by this user, whose user bus is there, or nil: a
// second `user-manager start` reaches the manager the first one booted
// instead of booting another beside it, which would not see the first
// one's units.
func FindPrivateManager(name string) *PrivateManager {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "agent-fleet-systemd-*"))
	for _, rt := range dirs {
		fi, err := os.Stat(filepath.Join(rt, managerStateFile))
		if err != nil || fi.Sys().(*syscall.Stat_t).Uid != uint32(os.Getuid()) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(rt, managerStateFile))
		var st managerState
		if err != nil || json.Unmarshal(data, &st) != nil || st.Name != name || st.StartTime == "" || ProcessStartTime(st.PID) != st.StartTime {
			continue
		}
		bus := filepath.Join(rt, "bus")
		if fi, err := os.Stat(bus); err != nil || fi.Mode().Type() != fs.ModeSocket {
			continue
		}
		return &PrivateManager{Name: name, RuntimeDir: rt, Bus: BusAddress{Address: UnixPathAddress(bus), Source: SourceOptions},
			PID: st.PID, StartTime: st.StartTime, Cgroup: st.Cgroup, CgroupDirs: st.CgroupDirs}
	}
	return nil
}

// StopPrivateManagerAt stops the private manager whose runtime directory
// is rt and whose booting process recorded it (Record): its reaper first
// (so the two do not race over one pid), then the manager by pid, checked
// against its start time (SIGCONT, SIGTERM, SIGKILL after 10 s), then
// whatever is left in its cgroup; it removes the cgroup and rt. A
// directory without the record is refused and left alone.
func StopPrivateManagerAt(rt string) error {
	if _, err := os.Stat(rt); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s does not exist (stopped already?)", ErrNoPrivateManager, rt)
	}
	data, err := os.ReadFile(filepath.Join(rt, managerStateFile))
	if err != nil {
		return fmt.Errorf("%s is not the runtime directory of a private user manager booted by agent-fleet: %w", rt, err)
	}
	var st managerState
	if err := json.Unmarshal(data, &st); err != nil || st.PID <= 0 {
		return fmt.Errorf("%s: unreadable %s", rt, managerStateFile)
	}
	alive := func(pid int, start string) bool { return start != "" && ProcessStartTime(pid) == start }
	if st.ReaperPID > 0 && alive(st.ReaperPID, st.ReaperStartTime) {
		_ = syscall.Kill(-st.ReaperPID, syscall.SIGKILL) // its own session and group: the reaper and its sleep
	}
	var errs []error
	if alive(st.PID, st.StartTime) {
		_ = syscall.Kill(st.PID, syscall.SIGCONT)
		_ = syscall.Kill(st.PID, syscall.SIGTERM)
		deadline := time.Now().Add(managerStopAfter)
		for alive(st.PID, st.StartTime) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if alive(st.PID, st.StartTime) {
			_ = syscall.Kill(st.PID, syscall.SIGKILL)
			errs = append(errs, fmt.Errorf("manager %d ignored SIGTERM for %s", st.PID, managerStopAfter))
		}
	}
	if err := removeCgroup(st.Cgroup, st.CgroupDirs); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(rt); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
