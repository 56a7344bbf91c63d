package units

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The sandboxing properties a ServiceSpec's Sandbox may set, by their
// systemd names (systemd.exec(5)). BindPaths stands for BindReadOnlyPaths
// too: both are one bind mount each, the same mechanism.
const (
	PropProtectSystem     = "ProtectSystem"
	PropProtectHome       = "ProtectHome"
	PropPrivateTmp        = "PrivateTmp"
	PropNoNewPrivileges   = "NoNewPrivileges"
	PropReadWritePaths    = "ReadWritePaths"
	PropReadOnlyPaths     = "ReadOnlyPaths"
	PropInaccessiblePaths = "InaccessiblePaths"
	PropBindPaths         = "BindPaths"
)

// SandboxProperties lists every property a Sandbox may set, in the order
// doctor reports them.
var SandboxProperties = []string{
	PropProtectSystem, PropProtectHome, PropPrivateTmp, PropNoNewPrivileges,
	PropReadWritePaths, PropReadOnlyPaths, PropInaccessiblePaths, PropBindPaths,
}

// Sandbox confines a service's view of the file system and its
// privileges, as systemd's sandboxing properties. The zero value confines
// nothing. Paths are absolute; a path with a leading "-" is skipped when it
// does not exist (without it a missing path fails the unit's start with
// status 226/NAMESPACE). Bind mounts keep the path: BindPaths=P:P, which is
// how a path below /tmp stays visible under PrivateTmp.
//
// A user manager without CAP_SYS_ADMIN applies all of them except
// NoNewPrivileges only inside a user namespace it creates itself
// (unprivileged user namespaces must be allowed); ProbeSandbox tells what
// a manager actually enforces.
type Sandbox struct {
	// ProtectSystem is "", "yes", "full" or "strict" (the whole file
	// system read-only but /dev, /proc, /sys and the paths made writable).
	ProtectSystem string
	// ProtectHome is "", "yes", "read-only" or "tmpfs"; it covers /home,
	// /root and /run/user only.
	ProtectHome     string
	PrivateTmp      bool
	NoNewPrivileges bool
	ReadWritePaths  []string
	ReadOnlyPaths   []string
	// InaccessiblePaths are replaced by an empty node of their type (an
	// empty directory, an empty file, a socket nobody listens on).
	InaccessiblePaths []string
	BindPaths         []string
	BindReadOnlyPaths []string
}

// Zero reports whether s confines nothing.
func (s Sandbox) Zero() bool { return len(s.Uses()) == 0 }

// Uses lists the properties s sets, in SandboxProperties order.
func (s Sandbox) Uses() []string {
	set := map[string]bool{
		PropProtectSystem:     s.ProtectSystem != "",
		PropProtectHome:       s.ProtectHome != "",
		PropPrivateTmp:        s.PrivateTmp,
		PropNoNewPrivileges:   s.NoNewPrivileges,
		PropReadWritePaths:    len(s.ReadWritePaths) > 0,
		PropReadOnlyPaths:     len(s.ReadOnlyPaths) > 0,
		PropInaccessiblePaths: len(s.InaccessiblePaths) > 0,
		PropBindPaths:         len(s.BindPaths)+len(s.BindReadOnlyPaths) > 0,
	}
	var out []string
	for _, p := range SandboxProperties {
		if set[p] {
			out = append(out, p)
		}
	}
	return out
}

// Without returns s with the named properties cleared: what a manager that
// cannot enforce them can still run.
func (s Sandbox) Without(props []string) Sandbox {
	for _, p := range props {
		switch p {
		case PropProtectSystem:
			s.ProtectSystem = ""
		case PropProtectHome:
			s.ProtectHome = ""
		case PropPrivateTmp:
			s.PrivateTmp = false
		case PropNoNewPrivileges:
			s.NoNewPrivileges = false
		case PropReadWritePaths:
			s.ReadWritePaths = nil
		case PropReadOnlyPaths:
			s.ReadOnlyPaths = nil
		case PropInaccessiblePaths:
			s.InaccessiblePaths = nil
		case PropBindPaths:
			s.BindPaths, s.BindReadOnlyPaths = nil, nil
		}
	}
	return s
}

// validate checks the values and that every path is absolute.
func (s Sandbox) validate() error {
	if !slices.Contains([]string{"", "yes", "full", "strict"}, s.ProtectSystem) {
		return fmt.Errorf("ProtectSystem %q is not yes, full or strict", s.ProtectSystem)
	}
	if !slices.Contains([]string{"", "yes", "read-only", "tmpfs"}, s.ProtectHome) {
		return fmt.Errorf("ProtectHome %q is not yes, read-only or tmpfs", s.ProtectHome)
	}
	for _, list := range [][]string{s.ReadWritePaths, s.ReadOnlyPaths, s.InaccessiblePaths, s.BindPaths, s.BindReadOnlyPaths} {
		for _, p := range list {
			if path := strings.TrimPrefix(p, "-"); !filepath.IsAbs(path) || strings.ContainsAny(path, ":\n") {
				return fmt.Errorf("sandbox path %q is not absolute (or holds ':' or a newline)", p)
			}
		}
	}
	return nil
}

// SandboxCheck is what a probe found out about one property.
type SandboxCheck struct {
	Property string `json:"property"`
	// Enforced: a unit with the property started and the probe saw its
	// effect.
	Enforced bool `json:"enforced"`
	// Detail says what was seen: the effect, or why it is missing.
	Detail string `json:"detail"`
}

// SandboxSupport is what a user manager enforces of the sandboxing
// properties (ProbeSandbox).
type SandboxSupport struct {
	Checks   []SandboxCheck `json:"checks"`
	ProbedAt time.Time      `json:"probedAt"`
	// Cached says the answer came from the cache file.
	Cached bool `json:"-"`
}

// Check is the check of one property (ok false when it was not probed).
func (s SandboxSupport) Check(prop string) (SandboxCheck, bool) {
	for _, c := range s.Checks {
		if c.Property == prop {
			return c, true
		}
	}
	return SandboxCheck{}, false
}

// Missing lists those of props the manager does not enforce (or that were
// not probed).
func (s SandboxSupport) Missing(props []string) []SandboxCheck {
	var out []SandboxCheck
	for _, p := range props {
		c, ok := s.Check(p)
		if !ok {
			c = SandboxCheck{Property: p, Detail: "not probed"}
		}
		if !c.Enforced {
			out = append(out, c)
		}
	}
	return out
}
