package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
	"github.com/agent-fleet/agent-fleet/units"
)

// CheckStatus is the verdict of one doctor check.
type CheckStatus string

// Verdicts.
const (
	CheckOK   CheckStatus = "ok"
	CheckWarn CheckStatus = "warn"
	CheckFail CheckStatus = "fail"
)

// Check is one doctor finding: what was checked, the verdict, what was
// seen, and a one-line fix when it is not ok.
type Check struct {
	Name   string      `json:"name"`
	Status CheckStatus `json:"status"`
	Detail string      `json:"detail"`
	Fix    string      `json:"fix,omitempty"`
}

// DoctorConfig feeds Doctor. Getenv nil is os.Getenv.
type DoctorConfig struct {
	Paths  intercom.Paths
	Getenv func(string) string
	// Journal says whether workers log to the journal (else to files).
	Journal bool
	// GOOS is the operating system to check for; "" is runtime.GOOS. Off
	// Linux only the broker, intercom and file checks run: worker
	// lifecycle needs Linux with a systemd user manager.
	GOOS string
}

// BrokerOnlyNote is what doctor, capabilities and the fleet surfaces say on
// a host without worker lifecycle.
const BrokerOnlyNote = "worker lifecycle (spawn, list, stop, …) needs Linux with a systemd user manager; the broker, the intercom CLI verbs and the MCP intercom tools work here"

// Doctor checks what the host offers agent-fleet and returns every
// finding; it never changes anything.
func Doctor(ctx context.Context, cfg DoctorConfig) []Check {
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	var out []Check
	add := func(name string, st CheckStatus, detail, fix string) {
		out = append(out, Check{Name: name, Status: st, Detail: detail, Fix: fix})
	}

	goos := cfg.GOOS
	if goos == "" {
		goos = runtime.GOOS
	}
	if goos != "linux" {
		// Broker-only: nothing systemd-related applies, and its absence is
		// this platform's normal state, not a failure.
		add("platform", CheckWarn, goos+"/"+runtime.GOARCH+": broker and intercom only", BrokerOnlyNote)
		add(brokerCheck(ctx, cfg.Paths))
		if goos != "windows" { // Windows: the broker is a named pipe, modes are ACLs
			add(socketPathCheck(cfg.Paths))
			add(permissionsCheck(cfg.Paths))
		}
		return out
	}
	add("platform", CheckOK, goos+"/"+runtime.GOARCH, "")

	// The user manager.
	add(runtimeDirCheck(cfg.Getenv("XDG_RUNTIME_DIR"), isDir, units.NoSystemdInit(), os.Getuid()))
	bus, busErr := units.ResolveBus(cfg.Getenv)
	if busErr != nil {
		detail, fix := busErr.Error(), "start a user session with systemd (loginctl enable-linger $USER), or export DBUS_SESSION_BUS_ADDRESS"
		var nb *units.NoUserBusError
		if errors.As(busErr, &nb) {
			detail, fix = nb.Reason(), strings.Join(nb.Fix(), " ")
		}
		add("user bus", CheckFail, detail, fix)
	} else {
		add("user bus", CheckOK, bus.Address+" (from "+string(bus.Source)+")", "")
	}
	if busErr == nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		probe, err := units.Probe(pctx, units.Options{DefaultTimeout: 5 * time.Second, Getenv: cfg.Getenv})
		cancel()
		if err != nil {
			add("user manager", CheckFail, err.Error(), "check `systemctl --user status`; a stopped or overloaded manager cannot run workers")
		} else {
			add("user manager", CheckOK, fmt.Sprintf("responds in %s", probe.RoundTrip.Round(time.Microsecond)), "")
			st := CheckOK
			fix := ""
			if probe.Version.Major > 0 && probe.Version.Major < 240 {
				st, fix = CheckWarn, "systemd 240 or newer is recommended for transient-unit properties agent-fleet sets"
			}
			add("systemd version", st, probe.Version.Raw, fix)
			add(taskLimitCheck(ctx, cfg.Getenv))
			add(limitsCheck(ctx, cfg.Getenv))
			for _, c := range sandboxChecks(ctx, cfg.Paths, cfg.Getenv) {
				add(c.Name, c.Status, c.Detail, c.Fix)
			}
		}
	}
	add(lingerStatus(ctx, cfg.Getenv))

	// cgroups.
	if cg, err := units.OpenCgroups("/"); err != nil {
		add("cgroups", CheckFail, err.Error(), "mount cgroup2 (or the name=systemd hierarchy)")
	} else {
		kill := "cgroup.kill available"
		st := CheckOK
		fix := ""
		if !cg.HasKill() {
			kill, st, fix = "no cgroup.kill (pre-5.14 kernel): stragglers are killed pid by pid", CheckWarn, "a kernel ≥ 5.14 kills a cgroup in one step"
		}
		add("cgroups", st, string(cg.Layout)+" layout; "+kill, fix)
		add(pauseCheck(cg))
	}

	// The broker.
	add(brokerCheck(ctx, cfg.Paths))
	add(socketPathCheck(cfg.Paths))
	add(permissionsCheck(cfg.Paths))

	// The registry and the units it should know.
	add(registryCheck(ctx, cfg.Paths))
	if cfg.Journal {
		add("worker logs", CheckOK, "journald: `agent-fleet logs` reads the journal", "")
	} else {
		add("worker logs", CheckOK, "no journald: workers log to "+LogDir(cfg.Paths), "")
	}
	return out
}

// taskLimitCheck says how many more workers the tightest task limit over
// the user manager (units.TasksOf) leaves room for.
func taskLimitCheck(ctx context.Context, getenv func(string) string) (string, CheckStatus, string, string) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := units.Connect(cctx, units.Options{DefaultTimeout: 5 * time.Second, Getenv: getenv})
	if err != nil {
		return "task limit", CheckOK, "unknown: " + err.Error(), ""
	}
	defer m.Close()
	lim, err := m.TaskLimit(cctx)
	switch {
	case err != nil:
		return "task limit", CheckOK, "unknown: " + err.Error(), ""
	case lim.Where == "":
		return "task limit", CheckOK, "none applies to the user manager", ""
	}
	room := lim.Room() / TasksPerWorker
	detail := fmt.Sprintf("%s: room for about %s (an exec worker takes about %d tasks)", lim, Plural(room, "more worker"), TasksPerWorker)
	if room < 10 {
		return "task limit", CheckWarn, detail, "stop workers, or raise the limit (TasksMax= of the slice or unit named, logind's UserTasksMax=, kernel.pid_max)"
	}
	return "task limit", CheckOK, detail, ""
}

// limitsCheck says which resource limits (spawn --memory, --cpu, --tasks)
// the user manager can apply, and why not the others: it would accept
// them and enforce nothing, so spawn refuses those.
func limitsCheck(ctx context.Context, getenv func(string) string) (string, CheckStatus, string, string) {
	const name = "resource limits"
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := units.Connect(cctx, units.Options{DefaultTimeout: 5 * time.Second, Getenv: getenv})
	if err != nil {
		return name, CheckWarn, "unknown: " + err.Error(), ""
	}
	defer m.Close()
	sup, err := m.Controllers(cctx)
	if err != nil {
		return name, CheckWarn, "unknown: " + err.Error(), "spawn refuses --memory, --cpu and --tasks while the controllers cannot be read"
	}
	return limitsVerdict(sup)
}

// limitsVerdict words ControllerSupport for doctor.
func limitsVerdict(sup units.ControllerSupport) (string, CheckStatus, string, string) {
	const name = "resource limits"
	flags := []struct{ flag, ctrl string }{{"--memory", "memory"}, {"--cpu", "cpu"}, {"--tasks", "pids"}}
	var ok, missing []string
	for _, f := range flags {
		if sup.Has(f.ctrl) {
			ok = append(ok, f.flag)
		} else {
			missing = append(missing, fmt.Sprintf("%s (%s: %s)", f.flag, f.ctrl, sup.Why[f.ctrl]))
		}
	}
	if len(missing) == 0 {
		return name, CheckOK, "spawn --memory, --cpu and --tasks are enforced (controllers of " + sup.Root + ": memory cpu pids)", ""
	}
	detail := "spawn refuses " + strings.Join(missing, "; ")
	if len(ok) > 0 {
		detail = "enforced: " + strings.Join(ok, ", ") + "; " + detail
	}
	return name, CheckWarn, detail, "on a systemd host, delegate the controllers to user@.service (Delegate=memory cpu pids); a unified cgroup layout is needed for user managers"
}

// pauseCheck says how pause freezes workers: systemd's FreezeUnit where
// every hierarchy is unified, the cgroup2 freezer on hybrid hosts, not at
// all on legacy ones.
func pauseCheck(cg *units.Cgroups) (string, CheckStatus, string, string) {
	switch {
	case cg.Layout == units.LayoutUnified:
		return "pause", CheckOK, "systemd freezes workers (FreezeUnit)", ""
	case cg.HasFreeze():
		return "pause", CheckOK, "systemd cannot freeze units on a " + string(cg.Layout) + " host: pause uses the workers' cgroup2 freezer (cgroup.freeze)", ""
	}
	return "pause", CheckWarn, "no cgroup2 freezer: pause and resume fail", "a kernel ≥ 5.2 with cgroup2 mounted has one"
}

func socketPathCheck(p intercom.Paths) (string, CheckStatus, string, string) {
	for _, sock := range []string{p.BrokerSocket(), p.HolderSocket(strings.Repeat("x", 64))} {
		if err := intercom.CheckSocketPath(sock); err != nil {
			return "socket paths", CheckFail, err.Error(), "set PI_CODING_AGENT_DIR to a shorter directory"
		}
	}
	return "socket paths", CheckOK, fmt.Sprintf("%d bytes for broker.sock (limit %d)", len(p.BrokerSocket()), intercom.MaxSocketPathBytes), ""
}

// lingerStatus asks logind whether the user lingers; without logind the
// answer is "unknown", never "off".
func lingerStatus(ctx context.Context, getenv func(string) string) (string, CheckStatus, string, string) {
	name := getenv("USER")
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, "loginctl", "show-user", name, "--property=Linger", "--value").Output()
	return lingerVerdict(name, strings.TrimSpace(string(out)), err, units.NoSystemdInit())
}

// lingerVerdict judges loginctl's answer v (err: none). Where PID 1 is not
// systemd there is nothing to fix: no logind, and a private manager does
// not end at logout.
func lingerVerdict(name, v string, err error, noSystemdInit bool) (string, CheckStatus, string, string) {
	switch {
	case err != nil && noSystemdInit:
		return "lingering", CheckOK, "does not apply: PID 1 is not systemd, so there is no logind; a private user manager (agent-fleet user-manager start) runs until stopped", ""
	case err != nil:
		return "lingering", CheckWarn, "unknown (logind does not answer)", "without lingering, workers stop when your last session ends: loginctl enable-linger " + name
	case v == "yes":
		return "lingering", CheckOK, "enabled: workers survive logout", ""
	default:
		return "lingering", CheckWarn, "disabled: workers stop when your last login session ends", "loginctl enable-linger " + name
	}
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// runtimeDirCheck judges XDG_RUNTIME_DIR (rt) with a fix that works on
// this host: pointing at the login's runtime directory where it exists; a
// private user manager, which makes its own, where PID 1 is not systemd
// (no login makes one there); a login or lingering elsewhere.
func runtimeDirCheck(rt string, isDir func(string) bool, noSystemdInit bool, uid int) (string, CheckStatus, string, string) {
	if rt != "" && isDir(rt) {
		return "runtime dir", CheckOK, rt, ""
	}
	st, detail := CheckWarn, "XDG_RUNTIME_DIR is not set"
	if rt != "" {
		st, detail = CheckFail, rt+" does not exist"
	}
	login := fmt.Sprintf("/run/user/%d", uid)
	switch {
	case rt != login && isDir(login):
		return "runtime dir", st, detail, "export XDG_RUNTIME_DIR=" + login
	case noSystemdInit:
		return "runtime dir", st, detail + "; PID 1 is not systemd, so no login creates " + login,
			`as root, boot a private user manager, which sets it for this shell: eval "$(agent-fleet user-manager start)"`
	default:
		return "runtime dir", st, detail, "log in through a PAM session (SSH, a desktop) or run loginctl enable-linger $USER, which creates " + login + "; then export XDG_RUNTIME_DIR=" + login
	}
}

func brokerCheck(ctx context.Context, p intercom.Paths) (string, CheckStatus, string, string) {
	h, detail, listening := intercom.ProbeListener(ctx, p)
	switch {
	case h == intercom.Incompatible:
		return "broker", CheckFail, "an incompatible broker answers on " + p.BrokerSocket() + ": " + detail,
			"stop that broker (an older or other-protocol adapter) — agent-fleet never kills it"
	case h == intercom.Unreachable && listening:
		return "broker", CheckFail, "something listens on " + p.BrokerSocket() + " but does not answer as an intercom v4 broker (" + detail + "): no broker can start there",
			"find what holds the socket (ss -xlp | grep broker.sock) and stop it — agent-fleet never replaces a live listener"
	case h == intercom.Unreachable:
		if pid := intercom.ReadPIDFile(p.OwnerFile()); pid > 0 && intercom.ProcessAlive(pid) {
			// Its socket was removed under it: it serves its sessions,
			// nobody new reaches it, and no other broker can start.
			return "broker", CheckFail, fmt.Sprintf("broker pid %d owns %s but does not answer on %s (its socket was removed?): no other broker can start", pid, p.OwnerFile(), p.BrokerSocket()),
				fmt.Sprintf("if pid %d is agent-fleet's broker (ps -o args= -p %d), stop it: the next command starts a broker, and its sessions reconnect", pid, pid)
		}
		return "broker", CheckOK, "not running (started on demand)", ""
	}
	api := &intercom.LocalAPIClient{Path: p.LocalAPISocket()}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if st, err := api.Stats(cctx); err == nil {
		return "broker", CheckOK, fmt.Sprintf("agent-fleet broker pid %d, %s", st.PID, Plural(st.Sessions, "session")), ""
	}
	return "broker", CheckWarn, "a compatible TypeScript broker (" + wire.ProtocolName + " v4) without agent-fleet's local API: lease activity falls back to sender ids",
		"let it exit (it does 5 s after its last session) so agent-fleet starts its own"
}

func permissionsCheck(p intercom.Paths) (string, CheckStatus, string, string) {
	fi, err := os.Stat(p.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return "permissions", CheckOK, p.Dir + " does not exist yet", ""
	}
	if err != nil {
		return "permissions", CheckFail, err.Error(), "check " + p.Dir
	}
	var bad []string
	if fi.Mode().Perm() != intercom.DirMode {
		bad = append(bad, fmt.Sprintf("%s is %o", p.Dir, fi.Mode().Perm()))
	}
	entries, _ := os.ReadDir(p.Dir)
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			continue
		}
		want := intercom.FileMode
		if info.IsDir() {
			want = intercom.DirMode
		}
		if info.Mode().Perm()&^want != 0 {
			bad = append(bad, fmt.Sprintf("%s is %o", filepath.Join(p.Dir, e.Name()), info.Mode().Perm()))
		}
	}
	if len(bad) > 0 {
		return "permissions", CheckFail, strings.Join(bad, "; "), "chmod 700 on directories and 600 on files below " + p.Dir
	}
	return "permissions", CheckOK, p.Dir + " is 0700, its files 0600", ""
}

func registryCheck(ctx context.Context, p intercom.Paths) (string, CheckStatus, string, string) {
	path := RegistryPath(p)
	var ws []*Worker
	detail := "no workers yet (" + path + " is created on first spawn)"
	// A missing file may have been deleted under live workers: the units
	// below still say so.
	_, err := os.Stat(path)
	missing := errors.Is(err, os.ErrNotExist)
	if !missing {
		reg, err := OpenRegistry(ctx, path)
		if err != nil {
			return "registry", CheckFail, err.Error(), "keep the file aside (it is never silently emptied) and let agent-fleet rebuild it from the live units"
		}
		defer reg.Close()
		if err := reg.Check(ctx); err != nil {
			return "registry", CheckFail, err.Error(), "keep the file aside and let agent-fleet rebuild it from the live units"
		}
		if ws, err = reg.List(ctx, Filter{LiveOnly: true}); err != nil {
			return "registry", CheckFail, err.Error(), ""
		}
		detail = fmt.Sprintf("%s: %d live workers", path, len(ws))
	}
	// Live units nobody recorded.
	uctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := units.Connect(uctx, units.Options{DefaultTimeout: 5 * time.Second})
	if err != nil {
		return "registry", CheckOK, detail, ""
	}
	defer m.Close()
	live, err := m.ListUnits(uctx, "agent-fleet-worker-*")
	if err != nil {
		return "registry", CheckOK, detail, ""
	}
	known := map[string]bool{}
	for _, w := range ws {
		known[w.Unit] = true
	}
	var stray []string
	for _, u := range live {
		if known[u.Name] {
			continue
		}
		// Another agent directory's workers may share this user manager.
		if mine, err := unitOfAgentDir(uctx, m, u.Name, p.AgentDir); err == nil && mine {
			stray = append(stray, u.Name)
		}
	}
	if len(stray) > 0 {
		if missing {
			detail = path + " is missing"
		}
		return "registry", CheckWarn, fmt.Sprintf("%s; %d live worker units have no record: %s", detail, len(stray), strings.Join(stray, ", ")),
			"the next fleet command (agent-fleet list) rebuilds the records of agent-fleet's workers from their units; stop others with systemctl --user stop"
	}
	return "registry", CheckOK, detail, ""
}

// Capabilities is what this host supports, for agents to read first.
type Capabilities struct {
	Platform        string            `json:"platform"`
	Protocol        string            `json:"protocol"`
	FleetBackend    string            `json:"fleetBackend"` // "systemd-user" or "unavailable"
	FleetReason     string            `json:"fleetReason,omitempty"`
	SystemdVersion  string            `json:"systemdVersion,omitempty"`
	CgroupLayout    string            `json:"cgroupLayout,omitempty"`
	CgroupKill      bool              `json:"cgroupKill"`
	WorkerKinds     []string          `json:"workerKinds"`
	WorkerLogs      string            `json:"workerLogs"`
	Harnesses       map[string]string `json:"harnesses"` // kind → executable path, or "" when not found
	HarnessVersions map[string]string `json:"harnessVersions,omitempty"`
	// Sandbox is what the user manager enforces of the sandboxing
	// properties; Profiles what each profile becomes here.
	Sandbox  *units.SandboxSupport `json:"sandbox,omitempty"`
	Profiles []ProfileReport       `json:"profiles,omitempty"`
	// PiMCPAdapter is how pi workers reach agent-fleet's MCP server: the
	// pi-mcp-adapter directory they load, "pi settings" when Pi loads it
	// itself, "" when it was not found (pi workers cannot be spawned).
	PiMCPAdapter string `json:"piMcpAdapter,omitempty"`
	// ResourceLimits are the spawn limits the user manager enforces, of
	// memory, cpu and tasks (doctor says why others are not).
	ResourceLimits []string `json:"resourceLimits"`
	// Pause is how pause freezes workers: "systemd", "cgroup" (the
	// cgroup2 freezer, where systemd cannot), or "" (it cannot).
	Pause string `json:"pause,omitempty"`
}

// ProbeCapabilities reports what this host supports.
func ProbeCapabilities(ctx context.Context, journal bool, getenv func(string) string) Capabilities {
	if getenv == nil {
		getenv = os.Getenv
	}
	c := Capabilities{
		Platform: runtime.GOOS + "/" + runtime.GOARCH, Protocol: wire.ProtocolLabel(),
		FleetBackend: "unavailable", WorkerKinds: []string{}, Harnesses: map[string]string{}, HarnessVersions: map[string]string{},
		WorkerLogs: "files", ResourceLimits: []string{},
	}
	if journal {
		c.WorkerLogs = "journal"
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	probe, err := units.Probe(pctx, units.Options{DefaultTimeout: 5 * time.Second, Getenv: getenv})
	cancel()
	if err != nil {
		c.FleetReason = err.Error()
	} else {
		c.FleetBackend, c.SystemdVersion = "systemd-user", probe.Version.Raw
		c.WorkerKinds = append([]string{"exec"}, harness.Kinds...)
		if sup, err := ProbeSandboxSupport(ctx, getenv); err == nil {
			c.Sandbox, c.Profiles = &sup, ProfileReports(sup)
		}
	}
	if cg, err := units.OpenCgroups("/"); err == nil {
		c.CgroupLayout, c.CgroupKill = string(cg.Layout), cg.HasKill()
		switch {
		case cg.Layout == units.LayoutUnified:
			c.Pause = "systemd"
		case cg.HasFreeze():
			c.Pause = "cgroup"
		}
	}
	if err == nil {
		c.ResourceLimits = resourceLimits(ctx, getenv)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for kind, exe := range harness.Executables {
		path, err := exec.LookPath(exe)
		if err != nil {
			c.Harnesses[kind] = ""
			continue
		}
		c.Harnesses[kind] = path
		wg.Go(func() {
			vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if v := harnessVersion(vctx, path); v != "" {
				mu.Lock()
				c.HarnessVersions[kind] = v
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if pi := c.Harnesses["pi"]; pi != "" {
		if agentDir, err := intercom.AgentDir(getenv); err == nil {
			cwd, _ := os.Getwd()
			if dir, err := findPiMCPAdapter(pi, cwd, agentDir, getenv(PiMCPAdapterEnv)); err == nil {
				c.PiMCPAdapter = dir
				if dir == "" {
					c.PiMCPAdapter = "pi settings"
				}
			}
		}
	}
	return c
}

// resourceLimits are the spawn limits the user manager enforces: memory,
// cpu, tasks.
func resourceLimits(ctx context.Context, getenv func(string) string) []string {
	out := []string{}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := units.Connect(cctx, units.Options{DefaultTimeout: 5 * time.Second, Getenv: getenv})
	if err != nil {
		return out
	}
	defer m.Close()
	sup, err := m.Controllers(cctx)
	if err != nil {
		return out
	}
	for _, f := range []struct{ name, ctrl string }{{"memory", "memory"}, {"cpu", "cpu"}, {"tasks", "pids"}} {
		if sup.Has(f.ctrl) {
			out = append(out, f.name)
		}
	}
	return out
}

// harnessVersion is the first line a harness prints for --version.
func harnessVersion(ctx context.Context, path string) string {
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
}

// Plural is "1 session", "2 sessions", "2 processes": counts in texts
// for people and models agree with their nouns. The CLI's and MCP's
// texts (internal/output) use it too.
func Plural(n int, what string) string {
	switch {
	case n == 1:
		return "1 " + what
	case strings.HasSuffix(what, "s"):
		return fmt.Sprintf("%d %ses", n, what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// ProbeSandboxSupport asks the user manager named by getenv what it
// enforces of the sandboxing properties (units.Systemd.ProbeSandbox), with
// the cache file of the agent directory when that directory exists.
func ProbeSandboxSupport(ctx context.Context, getenv func(string) string) (units.SandboxSupport, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	m, err := units.Connect(ctx, units.Options{DefaultTimeout: 10 * time.Second, Getenv: getenv})
	if err != nil {
		return units.SandboxSupport{}, err
	}
	defer m.Close()
	opts := units.ProbeSandboxOptions{}
	if agentDir, err := intercom.AgentDir(getenv); err == nil {
		p := intercom.NewPaths(agentDir)
		if fi, err := os.Stat(p.OrchestratorDir()); err == nil && fi.IsDir() {
			opts.CacheFile = filepath.Join(p.OrchestratorDir(), "sandbox-probe.json")
		}
	}
	return m.ProbeSandbox(ctx, opts)
}

// sandboxChecks are doctor's findings on sandboxing: what the user manager
// enforces, and what each confining profile becomes here.
func sandboxChecks(ctx context.Context, _ intercom.Paths, getenv func(string) string) []Check {
	sup, err := ProbeSandboxSupport(ctx, getenv)
	if err != nil {
		return []Check{{Name: "sandbox", Status: CheckWarn, Detail: "could not probe what the user manager enforces: " + err.Error(),
			Fix: "spawns with a confining profile fail until it can be probed; --profile trusted needs none"}}
	}
	var enforced []string
	var missing []units.SandboxCheck
	for _, c := range sup.Checks {
		if c.Enforced {
			enforced = append(enforced, c.Property)
		} else {
			missing = append(missing, c)
		}
	}
	how := "probed with test units"
	if sup.Cached {
		how = "probed " + sup.ProbedAt.Local().Format(time.DateTime) + " (cached for this manager)"
	}
	out := []Check{}
	if len(missing) == 0 {
		out = append(out, Check{Name: "sandbox", Status: CheckOK, Detail: "the user manager enforces " + strings.Join(enforced, ", ") + "; " + how})
	} else {
		out = append(out, Check{Name: "sandbox", Status: CheckWarn,
			Detail: "the user manager does not enforce " + degradation(missing) + "; it enforces " + cmpOr(strings.Join(enforced, ", "), "none") + "; " + how,
			Fix:    "a user manager needs unprivileged user namespaces for the mount properties (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0)"})
	}
	for _, r := range ProfileReports(sup) {
		if r.Profile == ProfileTrusted {
			continue
		}
		name := "profile " + string(r.Profile)
		if r.Enforced {
			out = append(out, Check{Name: name, Status: CheckOK, Detail: "enforced"})
			continue
		}
		out = append(out, Check{Name: name, Status: CheckWarn,
			Detail: "degrades to running without " + strings.Join(r.Missing, ", "),
			Fix:    "a spawn naming it fails unless --allow-degraded; one that gets it by default runs degraded; status says which"})
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
