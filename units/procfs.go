package units

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Membership is where a process lives, from /proc/<pid>/cgroup.
type Membership struct {
	// Path is the cgroup path systemd tracks the process in (from the
	// "0::" line, or the name=systemd line on legacy hosts).
	Path string
	// Unit is the deepest unit in Path that can hold processes (a
	// .service, .scope, .socket, .mount or .swap), "" if none.
	Unit string
	// Slice is the deepest slice in Path, "" if none.
	Slice string
	// UserManager is the user manager's own unit ("user@1000.service")
	// when Path lies below one, else "".
	UserManager string
}

// ParseProcCgroup parses the text of /proc/<pid>/cgroup (docs/systemd.md "Reading /proc/<pid>/cgroup").
// The path comes from the cgroup2 line "0::<path>" unless that is missing
// or "/" while a v1 "N:name=systemd:<path>" line names a deeper path (a
// legacy host with an unused cgroup2 mount); controller lines such as
// "5:pids:/…" or "1:net_cls:/" are never used. An empty text (the process
// is exiting or gone) gives ErrProcessGone.
func ParseProcCgroup(data []byte) (Membership, error) {
	var v2, named string
	var haveV2 bool
	for line := range strings.SplitSeq(string(data), "\n") {
		id, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		controllers, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		switch {
		case id == "0" && controllers == "":
			v2, haveV2 = path, true
		case slices.Contains(strings.Split(controllers, ","), "name=systemd"):
			named = path
		}
	}
	switch {
	case haveV2 && v2 != "/":
		return MembershipOfPath(v2), nil
	case named != "":
		return MembershipOfPath(named), nil
	case haveV2:
		return MembershipOfPath(v2), nil
	}
	if strings.TrimSpace(string(data)) == "" {
		return Membership{}, ErrProcessGone
	}
	return Membership{}, fmt.Errorf("parse /proc/<pid>/cgroup: no cgroup2 or name=systemd line in %q", data)
}

// MembershipOfPath names the unit, slice and user manager of a cgroup path.
func MembershipOfPath(path string) Membership {
	m := Membership{Path: path}
	for part := range strings.SplitSeq(strings.Trim(path, "/"), "/") {
		switch {
		case strings.HasSuffix(part, ".slice"):
			m.Slice = part
		case strings.HasPrefix(part, "user@") && strings.HasSuffix(part, ".service") && m.Unit == "":
			m.UserManager = part
			m.Unit = part
		case hasUnitSuffix(part):
			m.Unit = part
		}
	}
	return m
}

func hasUnitSuffix(s string) bool {
	for _, suffix := range []string{".service", ".scope", ".socket", ".mount", ".swap"} {
		if strings.HasSuffix(s, suffix) && len(s) > len(suffix) {
			return true
		}
	}
	return false
}

// Membership reads where process pid lives. ErrProcessGone if it no longer
// exists.
func (c *Cgroups) Membership(pid int) (Membership, error) {
	data, err := os.ReadFile(filepath.Join(c.Root, "/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return Membership{}, fmt.Errorf("cgroup of pid %d: %w", pid, ErrProcessGone)
		}
		return Membership{}, fmt.Errorf("cgroup of pid %d: %w", pid, err)
	}
	m, err := ParseProcCgroup(data)
	if err != nil {
		return m, fmt.Errorf("cgroup of pid %d: %w", pid, err)
	}
	return m, nil
}

// InCgroup reports whether a membership path lies in cgroup or below it.
func InCgroup(path, cgroup string) bool {
	cgroup = strings.TrimSuffix(cgroup, "/")
	return cgroup != "" && (path == cgroup || strings.HasPrefix(path, cgroup+"/"))
}

// Process is a pid and its executable's name — never its arguments, which
// may hold prompts or secrets (docs/architecture.md "Decisions").
type Process struct {
	PID int
	// Name is the base name of /proc/<pid>/exe, or /proc/<pid>/comm (at
	// most 15 bytes) when exe cannot be read; "" if the process is gone.
	Name string
}

// Processes names the executables of pids, in the given order. Processes
// that are gone keep an empty Name.
func (c *Cgroups) Processes(pids []int) []Process {
	out := make([]Process, 0, len(pids))
	for _, pid := range pids {
		out = append(out, Process{PID: pid, Name: c.executable(pid)})
	}
	return out
}

func (c *Cgroups) executable(pid int) string {
	dir := filepath.Join(c.Root, "/proc", strconv.Itoa(pid))
	if target, err := os.Readlink(filepath.Join(dir, "exe")); err == nil {
		return filepath.Base(strings.TrimSuffix(target, " (deleted)"))
	}
	if comm, err := os.ReadFile(filepath.Join(dir, "comm")); err == nil {
		return strings.TrimSpace(string(comm))
	}
	return ""
}
