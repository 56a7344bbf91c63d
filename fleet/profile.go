package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/units"
)

// Profile is the sandbox a worker runs in, compiled into its unit's
// sandboxing properties (README "Sandbox profiles").
type Profile string

const (
	// ProfileTrusted confines nothing: the worker has the user's rights.
	ProfileTrusted Profile = "trusted"
	// ProfileWorkspace makes the file system read-only but the working
	// directory (and its git directories), the harness's own state
	// directories and the intercom directory; gives the worker its own
	// /tmp and no new privileges; hides the user's credentials and agent
	// sockets.
	ProfileWorkspace Profile = "workspace"
	// ProfileReadOnly is ProfileWorkspace with the working directory
	// read-only too.
	ProfileReadOnly Profile = "readonly"
)

// Profiles lists the profiles, least confined first.
var Profiles = []Profile{ProfileTrusted, ProfileWorkspace, ProfileReadOnly}

// ParseProfile checks a --profile value; "" stays "" (the default for the
// worker's kind and permission: DefaultProfile). Errors: ErrInvalidRequest.
func ParseProfile(s string) (Profile, error) {
	if s == "" || slices.Contains(Profiles, Profile(s)) {
		return Profile(s), nil
	}
	return "", fmt.Errorf("%w: profile %q (want trusted, workspace or readonly)", ErrInvalidRequest, s)
}

// DefaultProfile is the profile of a spawn that names none: trusted for an
// exec worker (its command is the caller's own), readonly for a coding
// agent asked not to edit (read-only, Claude Code's dontAsk and plan),
// workspace for every other coding agent — full permission included: the
// harness asks nobody, so the unit draws the line.
func DefaultProfile(kind, permission string) Profile {
	if !harness.IsKind(kind) {
		return ProfileTrusted
	}
	switch permission {
	case harness.PermissionReadOnly, "dontAsk", "plan":
		return ProfileReadOnly
	}
	return ProfileWorkspace
}

// credentialPaths are, relative to the home directory, where the user's
// keys, tokens and cloud credentials live; a confined worker sees them
// empty.
var credentialPaths = []string{
	".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".kube", ".docker",
	".netrc", ".git-credentials", ".config/gh", ".password-store", ".local/share/keyrings",
}

// runtimeSockets are, relative to $XDG_RUNTIME_DIR, the agents and buses a
// confined worker must not reach: the user bus and the user manager's
// private socket (either starts units outside the sandbox), gpg-agent,
// the keyring, ssh-agent sockets, docker and podman.
var runtimeSockets = []string{
	"bus", "systemd/private", "gnupg", "keyring", "gcr", "ssh-agent.socket", "openssh_agent",
	"docker.sock", "podman",
}

// systemSockets are the machine's container engine sockets.
var systemSockets = []string{"/run/docker.sock", "/var/run/docker.sock", "/run/podman/podman.sock", "/run/containerd/containerd.sock"}

// sandboxInput is what a profile is compiled from.
type sandboxInput struct {
	profile Profile
	kind    string
	cwd     string
	// env looks up the worker's own environment (HOME, XDG_*, CODEX_HOME,
	// …); callerEnv the caller's (SSH_AUTH_SOCK, DBUS_SESSION_BUS_ADDRESS,
	// which workers do not get but could find).
	env, callerEnv func(string) string
	agentDir       string // the agent directory (Pi's state directory too)
	intercomDir    string // <agentDir>/intercom: sockets, inboxes, registry
	// executables must stay visible: the shim, an exec worker's command,
	// a harness's directory, paths --env names.
	executables []string
}

// compileSandbox turns a profile into unit properties. Writable and
// visible paths below /tmp or /var/tmp are bound into the worker's private
// /tmp at the same place.
func compileSandbox(in sandboxInput) units.Sandbox {
	if in.profile == ProfileTrusted || in.profile == "" {
		return units.Sandbox{}
	}
	home := in.env("HOME")
	sb := units.Sandbox{ProtectSystem: "strict", ProtectHome: "read-only", PrivateTmp: true, NoNewPrivileges: true}
	writable := []string{in.intercomDir}
	visible := slices.Clone(in.executables)
	if in.profile == ProfileWorkspace {
		writable = append(writable, in.cwd)
		writable = append(writable, gitDirs(in.cwd)...)
	} else {
		visible = append(visible, in.cwd)
	}
	for _, d := range harnessStateDirs(in.kind, home, in.env, in.agentDir) {
		writable = append(writable, "-"+d)
	}
	for _, f := range harnessStateFiles(in.kind, home) {
		writable = append(writable, "-"+f)
	}
	if rt := in.env("XDG_RUNTIME_DIR"); rt != "" {
		visible = append(visible, "-"+filepath.Join(rt, "systemd", "notify")) // READY=1
	}
	if home != "" && !underProtectHome(home) {
		if inTmp(home) {
			visible = append(visible, home)
		} else {
			sb.ReadOnlyPaths = append(sb.ReadOnlyPaths, home)
		}
	}
	for _, p := range uniq(writable) {
		if inTmp(strings.TrimPrefix(p, "-")) {
			sb.BindPaths = append(sb.BindPaths, p)
		} else {
			sb.ReadWritePaths = append(sb.ReadWritePaths, p)
		}
	}
	for _, p := range uniq(visible) {
		if inTmp(strings.TrimPrefix(p, "-")) && !below(strings.TrimPrefix(p, "-"), writable) {
			sb.BindReadOnlyPaths = append(sb.BindReadOnlyPaths, p)
		}
	}
	var hidden []string
	if home != "" {
		for _, rel := range credentialPaths {
			hidden = append(hidden, filepath.Join(home, rel))
		}
	}
	if g := in.env("GNUPGHOME"); filepath.IsAbs(g) {
		hidden = append(hidden, g)
	}
	for _, e := range []func(string) string{in.callerEnv, in.env} {
		if s := e("SSH_AUTH_SOCK"); filepath.IsAbs(s) {
			hidden = append(hidden, s)
		}
		if p, ok := strings.CutPrefix(e("DBUS_SESSION_BUS_ADDRESS"), "unix:path="); ok {
			p, _, _ = strings.Cut(p, ",")
			hidden = append(hidden, p)
		}
		if d, ok := strings.CutPrefix(e("DOCKER_HOST"), "unix://"); ok {
			hidden = append(hidden, d)
		}
	}
	if rt := in.env("XDG_RUNTIME_DIR"); rt != "" {
		for _, rel := range runtimeSockets {
			hidden = append(hidden, filepath.Join(rt, rel))
		}
	}
	hidden = append(hidden, systemSockets...)
	for _, p := range uniq(hidden) {
		if filepath.IsAbs(p) {
			sb.InaccessiblePaths = append(sb.InaccessiblePaths, "-"+filepath.Clean(p))
		}
	}
	return sb
}

// harnessStateDirs are the directories a coding agent writes its
// sessions, settings and caches to; a confined worker keeps them writable
// (prefixed "-": skipped when absent). Spawn creates the directories
// first, so the harness need not create them below a read-only home.
func harnessStateDirs(kind, home string, env func(string) string, agentDir string) []string {
	if home == "" {
		return nil
	}
	xdg := func(name, def string) string {
		if v := env(name); filepath.IsAbs(v) {
			return v
		}
		return filepath.Join(home, def)
	}
	switch kind {
	case "claude":
		dirs := []string{filepath.Join(home, ".claude"), filepath.Join(home, ".cache", "claude-cli-nodejs"),
			filepath.Join(home, ".local", "state", "claude"), filepath.Join(home, ".local", "share", "claude")}
		if d := env("CLAUDE_CONFIG_DIR"); filepath.IsAbs(d) {
			dirs = append(dirs, d)
		}
		return dirs
	case "codex":
		if d := env("CODEX_HOME"); filepath.IsAbs(d) {
			return []string{d}
		}
		return []string{filepath.Join(home, ".codex")}
	case "opencode":
		return []string{
			filepath.Join(xdg("XDG_DATA_HOME", ".local/share"), "opencode"),
			filepath.Join(xdg("XDG_CONFIG_HOME", ".config"), "opencode"),
			filepath.Join(xdg("XDG_STATE_HOME", ".local/state"), "opencode"),
			filepath.Join(xdg("XDG_CACHE_HOME", ".cache"), "opencode"),
		}
	case "pi":
		return []string{agentDir}
	}
	return nil
}

// harnessStateFiles are files beside the state directories that a harness
// rewrites in place; they stay writable when they exist.
func harnessStateFiles(kind, home string) []string {
	if kind == "claude" && home != "" {
		return []string{filepath.Join(home, ".claude.json")}
	}
	return nil
}

// gitDirs are the directories a git worktree at cwd writes besides cwd:
// its .git file's gitdir and that one's common directory (the main
// repository's .git).
func gitDirs(cwd string) []string {
	data, err := os.ReadFile(filepath.Join(cwd, ".git"))
	if err != nil {
		return nil // a directory (inside cwd) or none
	}
	gitdir, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "gitdir: ")
	if !ok {
		return nil
	}
	if !filepath.IsAbs(gitdir) {
		gitdir = filepath.Join(cwd, gitdir)
	}
	dirs := []string{gitdir}
	if c, err := os.ReadFile(filepath.Join(gitdir, "commondir")); err == nil {
		common := strings.TrimSpace(string(c))
		if !filepath.IsAbs(common) {
			common = filepath.Join(gitdir, common)
		}
		dirs = append(dirs, filepath.Clean(common))
	}
	return dirs
}

// below reports whether p is one of dirs ("-" prefixes ignored) or lies
// inside one: a read-only bind there would take its writability away.
func below(p string, dirs []string) bool {
	for _, d := range dirs {
		d = strings.TrimPrefix(d, "-")
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

func underProtectHome(p string) bool {
	return p == "/root" || strings.HasPrefix(p, "/root/") || strings.HasPrefix(p, "/home/") || strings.HasPrefix(p, "/run/user/")
}

func inTmp(p string) bool {
	return p == "/tmp" || strings.HasPrefix(p, "/tmp/") || p == "/var/tmp" || strings.HasPrefix(p, "/var/tmp/")
}

func uniq(list []string) []string {
	var out []string
	for _, p := range list {
		if p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// SandboxProber is what a user manager that can tell what it enforces
// offers (units.Systemd does; fakes may).
type SandboxProber interface {
	ProbeSandbox(ctx context.Context, opts units.ProbeSandboxOptions) (units.SandboxSupport, error)
}

// sandboxCacheFile keeps the probe's answer per user manager process.
func (f *Fleet) sandboxCacheFile() string {
	return filepath.Join(f.cfg.Paths.OrchestratorDir(), "sandbox-probe.json")
}

// SandboxSupport is what this fleet's user manager enforces of the
// sandboxing properties: probed with tiny units once per manager process,
// then read from a cache file. A manager that cannot be probed (a fake)
// enforces nothing.
func (f *Fleet) SandboxSupport(ctx context.Context) (units.SandboxSupport, error) {
	p, ok := f.cfg.Units.(SandboxProber)
	if !ok {
		return units.SandboxSupport{}, nil
	}
	return p.ProbeSandbox(ctx, units.ProbeSandboxOptions{CacheFile: f.sandboxCacheFile()})
}

// ProfileReport says what each profile becomes on this user manager.
type ProfileReport struct {
	Profile Profile `json:"profile"`
	// Enforced: every property the profile uses is enforced here.
	Enforced bool `json:"enforced"`
	// Uses are the properties the profile sets; Missing those of them this
	// manager does not enforce (a degraded spawn runs without them).
	Uses    []string `json:"uses,omitempty"`
	Missing []string `json:"missing,omitempty"`
}

// ProfileReports is, for every profile, what sup lets it enforce.
func ProfileReports(sup units.SandboxSupport) []ProfileReport {
	var out []ProfileReport
	for _, p := range Profiles {
		sb := compileSandbox(sandboxInput{profile: p, kind: "claude", cwd: "/tmp/w", env: func(k string) string {
			return map[string]string{"HOME": "/home/u", "XDG_RUNTIME_DIR": "/run/user/1000"}[k]
		}, callerEnv: func(string) string { return "" }, agentDir: "/home/u/.pi/agent", intercomDir: "/home/u/.pi/agent/intercom"})
		r := ProfileReport{Profile: p, Uses: sb.Uses()}
		for _, c := range sup.Missing(r.Uses) {
			r.Missing = append(r.Missing, c.Property)
		}
		r.Enforced = len(r.Missing) == 0
		out = append(out, r)
	}
	return out
}

// degradation describes what a sandbox lacks on this manager, one
// "Property (why)" per missing property.
func degradation(missing []units.SandboxCheck) string {
	parts := make([]string, 0, len(missing))
	for _, c := range missing {
		parts = append(parts, c.Property+" ("+c.Detail+")")
	}
	return strings.Join(parts, "; ")
}

// sandboxFor compiles the spawn's profile for this manager. A property the
// manager does not enforce fails a profile the spawn named
// (ErrProfileUnenforceable) unless it allows degradation; a default
// profile, or an allowed degradation, runs without it and says so in the
// returned text (recorded as the worker's ProfileDegraded).
func (f *Fleet) sandboxFor(ctx context.Context, req SpawnRequest, in sandboxInput, explicit bool) (units.Sandbox, string, error) {
	sb := compileSandbox(in)
	if sb.Zero() {
		return sb, "", nil
	}
	sup, err := f.SandboxSupport(ctx)
	if err != nil {
		return sb, "", fmt.Errorf("%w: could not tell what this user manager enforces: %v", ErrSpawnFailed, err)
	}
	missing := sup.Missing(sb.Uses())
	if len(missing) == 0 {
		return sb, "", nil
	}
	why := degradation(missing)
	if explicit && !req.AllowDegraded {
		return sb, "", fmt.Errorf("%w: profile %s needs what this user manager does not enforce: %s. "+
			"Spawn with --allow-degraded to run without it (status then says so), choose --profile trusted, "+
			"or see agent-fleet doctor", ErrProfileUnenforceable, in.profile, why)
	}
	names := make([]string, 0, len(missing))
	for _, c := range missing {
		names = append(names, c.Property)
	}
	return sb.Without(names), "not enforced here: " + why, nil
}

// prepareSandboxDirs creates the harness state directories a confined
// worker may write (0700, as the harness would), so that they exist to
// be made writable below a read-only home.
func prepareSandboxDirs(kind, home string, env func(string) string, agentDir string) error {
	dirs := harnessStateDirs(kind, home, env, agentDir)
	if kind == "claude" {
		dirs = dirs[:1] // ~/.claude; the others only where Claude made them
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("create the harness directory %s: %w", d, err)
		}
	}
	return nil
}
