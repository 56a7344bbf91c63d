//go:build linux

package units

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// sandboxProbe is one property's test: the sandbox a tiny unit starts
// with and a /bin/sh script that exits 0 when the effect is there.
type sandboxProbe struct {
	prop    string
	sandbox Sandbox
	script  string
	effect  string // what exit 0 showed
}

// sandboxProbes are the tests, in dir (a fresh 0700 directory below /tmp
// holding marker, ro/, rw/, secret/file, sock, bind/file and robind/file)
// with home the user's home directory.
func sandboxProbes(dir, home string, homeWritable bool) []sandboxProbe {
	q := shellQuote
	homeProbe := sandboxProbe{prop: PropProtectHome, sandbox: Sandbox{ProtectHome: "read-only"},
		script: "! test -w " + q(home), effect: "the home directory " + home + " is read-only inside"}
	if !homeWritable {
		homeProbe.script, homeProbe.effect = "true", "a unit starts with it (its effect was not checked: "+home+" is not writable, or outside /home, /root and /run/user)"
	}
	return []sandboxProbe{
		{prop: PropProtectSystem, sandbox: Sandbox{ProtectSystem: "strict"},
			script: "! test -w " + q(dir), effect: "/tmp is read-only inside"},
		homeProbe,
		{prop: PropPrivateTmp, sandbox: Sandbox{PrivateTmp: true},
			script: "! test -e " + q(dir+"/marker"), effect: "the unit has its own /tmp"},
		{prop: PropNoNewPrivileges, sandbox: Sandbox{NoNewPrivileges: true},
			script: `grep -q '^NoNewPrivs:[[:space:]]*1' /proc/self/status`, effect: "NoNewPrivs is set"},
		{prop: PropReadWritePaths, sandbox: Sandbox{ProtectSystem: "strict", ReadWritePaths: []string{dir + "/rw"}},
			script: "test -w " + q(dir+"/rw") + " && ! test -w " + q(dir), effect: "a path stays writable below a read-only one"},
		{prop: PropReadOnlyPaths, sandbox: Sandbox{ReadOnlyPaths: []string{dir + "/ro"}},
			script: "! test -w " + q(dir+"/ro"), effect: "a path is read-only inside"},
		{prop: PropInaccessiblePaths, sandbox: Sandbox{InaccessiblePaths: []string{dir + "/secret", dir + "/sock"}},
			script: "! test -e " + q(dir+"/secret/file") + ` && test "$(stat -c %d:%i ` + q(dir+"/sock") + `)" != "$0"`,
			effect: "a directory is empty and a socket replaced inside"},
		{prop: PropBindPaths, sandbox: Sandbox{PrivateTmp: true, BindPaths: []string{dir + "/bind"}, BindReadOnlyPaths: []string{dir + "/robind"}},
			script: "test -w " + q(dir+"/bind/file") + " && test -e " + q(dir+"/robind/file") + " && ! test -w " + q(dir+"/robind"),
			effect: "paths below /tmp stay visible under PrivateTmp"},
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// ProbeSandboxOptions configures ProbeSandbox.
type ProbeSandboxOptions struct {
	// CacheFile, when set (absolute), keeps the answer for this manager
	// process: later probes of the same manager (same pid and start time,
	// same systemd version, same boot) read it instead of starting units.
	CacheFile string
	// Home is the user's home directory whose protection is checked; ""
	// is the account's home (user.Current), else $HOME.
	Home string
}

// sandboxCache is what CacheFile holds.
type sandboxCache struct {
	Key     string         `json:"key"`
	Support SandboxSupport `json:"support"`
}

// probeMu makes concurrent probes of one process wait for the first.
var probeMu sync.Mutex

// ProbeSandbox finds out which sandboxing properties this user manager
// enforces: for each property it starts a tiny transient unit
// (agent-fleet-probe-<n>-<hex>.service, /bin/sh, all at once) and checks
// the property's effect from inside. A unit that cannot start with a
// property (226/NAMESPACE: no user namespaces, or a node systemd needs is
// missing) marks it unenforced with the reason. About 100 ms; with
// CacheFile once per manager process.
func (s *Systemd) ProbeSandbox(ctx context.Context, opts ProbeSandboxOptions) (SandboxSupport, error) {
	probeMu.Lock()
	defer probeMu.Unlock()
	ctx, cancel := withDefaultDeadline(ctx, 20*time.Second)
	defer cancel()
	key, kerr := s.sandboxCacheKey(ctx)
	if opts.CacheFile != "" && kerr == nil {
		if data, err := os.ReadFile(opts.CacheFile); err == nil {
			var c sandboxCache
			if json.Unmarshal(data, &c) == nil && c.Key == key && len(c.Support.Checks) > 0 {
				c.Support.Cached = true
				return c.Support, nil
			}
		}
	}
	sup, err := s.probeSandbox(ctx, opts.Home)
	if err != nil {
		return sup, err
	}
	if opts.CacheFile != "" && kerr == nil {
		if data, err := json.Marshal(sandboxCache{Key: key, Support: sup}); err == nil {
			_ = writeFileAtomic(opts.CacheFile, data)
		}
	}
	return sup, nil
}

// sandboxCacheKey names the manager process: a restarted manager, a new
// systemd or a reboot is probed again.
func (s *Systemd) sandboxCacheKey(ctx context.Context) (string, error) {
	pid, err := s.ManagerPID(ctx)
	if err != nil {
		return "", err
	}
	v, err := s.Version(ctx)
	if err != nil {
		return "", err
	}
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return fmt.Sprintf("%s|%d|%s|%s|%d", s.bus.Address, pid, ProcessStartTime(pid), v.Raw, os.Getuid()) + "|" + strings.TrimSpace(string(boot)), nil
}

func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".sandbox-probe-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func (s *Systemd) probeSandbox(ctx context.Context, home string) (SandboxSupport, error) {
	dir, err := os.MkdirTemp("/tmp", "agent-fleet-probe-")
	if err != nil {
		return SandboxSupport{}, fmt.Errorf("probe the sandbox: %w", err)
	}
	defer os.RemoveAll(dir)
	for _, d := range []string{"ro", "rw", "secret", "bind", "robind"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return SandboxSupport{}, err
		}
	}
	for _, f := range []string{"marker", "secret/file", "bind/file", "robind/file"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			return SandboxSupport{}, err
		}
	}
	l, err := net.Listen("unix", filepath.Join(dir, "sock"))
	if err != nil {
		return SandboxSupport{}, err
	}
	defer l.Close()
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "sock"), &st); err != nil {
		return SandboxSupport{}, err
	}
	sockID := fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	if home == "" {
		if u, err := user.Current(); err == nil && u.HomeDir != "" {
			home = u.HomeDir
		} else {
			home = os.Getenv("HOME")
		}
	}
	homeWritable := home != "" && unix.Access(home, unix.W_OK) == nil &&
		(strings.HasPrefix(home, "/home/") || home == "/root" || strings.HasPrefix(home, "/run/user/"))

	probes := sandboxProbes(dir, home, homeWritable)
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	checks := make([]SandboxCheck, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("agent-fleet-probe-%d-%s.service", i, hex.EncodeToString(suffix))
			checks[i] = s.runSandboxProbe(ctx, name, p, sockID)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return SandboxSupport{}, timeoutError(ctx, "probe the sandbox", time.Now())
	}
	return SandboxSupport{Checks: checks, ProbedAt: time.Now().UTC()}, nil
}

// runSandboxProbe starts one probe unit and reads how it ended.
func (s *Systemd) runSandboxProbe(ctx context.Context, name string, p sandboxProbe, sockID string) SandboxCheck {
	c := SandboxCheck{Property: p.prop}
	spec := ServiceSpec{Name: name, Description: "agent-fleet sandbox probe: " + p.prop,
		Argv: []string{"/bin/sh", "-c", p.script, sockID}, Type: ServiceExec, Collect: CollectInactive,
		Stdout: OutputNull, Stderr: OutputNull, Sandbox: p.sandbox, StartTimeout: 10 * time.Second}
	defer func() { _ = s.ResetFailed(context.WithoutCancel(ctx), name) }()
	st, err := s.StartService(ctx, spec)
	var je *JobError
	for err == nil && (st.ActiveState == "active" || st.ActiveState == "activating" || st.ActiveState == "deactivating") {
		if err = sleepFor(ctx, 10*time.Millisecond); err == nil {
			st, err = s.Unit(ctx, name)
		}
	}
	switch {
	case errors.As(err, &je):
		st = je.State
	case err != nil:
		c.Detail = "could not run a probe unit: " + err.Error()
		return c
	}
	switch {
	case st.Result == "success" || (st.ExecMainCode == 1 && st.ExecMainStatus == 0 && st.ActiveState != "failed"):
		c.Enforced, c.Detail = true, p.effect
	case st.ExecMainCode == 1 && st.ExecMainStatus == 1:
		c.Detail = "a unit starts with it, but its effect is not there"
	case st.ExecMainCode == 1 && st.ExecMainStatus == 226:
		c.Detail = "a unit cannot start with it (status 226/NAMESPACE: the user manager could not set up the mount namespace; unprivileged user namespaces, or the nodes systemd mounts, are missing)"
	default:
		c.Detail = fmt.Sprintf("the probe unit ended %s (code %d, status %d)", cmpOr(st.Result, st.ActiveState), st.ExecMainCode, st.ExecMainStatus)
	}
	return c
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
