package units

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// errNoDevice is what reading a cgroup file gives once the cgroup was
// removed under us.
const errNoDevice = syscall.ENODEV

// Layout is how the cgroup hierarchies are mounted (docs/systemd.md
// "Cgroups").
type Layout string

const (
	// LayoutUnified: cgroup v2 only, mounted at /sys/fs/cgroup. A unit's
	// cgroup is /sys/fs/cgroup<ControlGroup>.
	LayoutUnified Layout = "unified"
	// LayoutHybrid: v1 controllers, with cgroup2 at /sys/fs/cgroup/unified.
	// systemd tracks units in both the cgroup2 tree and the v1
	// name=systemd tree (/sys/fs/cgroup/systemd).
	LayoutHybrid Layout = "hybrid"
	// LayoutLegacy: v1 only; systemd tracks units in the name=systemd tree.
	// There is no cgroup.kill and no cgroup.events.
	LayoutLegacy Layout = "legacy"
)

// Cgroups reads (and on Linux kills) the cgroups systemd creates for units,
// in whichever layout the host has. All paths are below Root, so fixture
// trees stand in for /proc and /sys in tests. Safe for concurrent use; it
// holds no open files.
type Cgroups struct {
	// Layout of the hierarchies.
	Layout Layout
	// Unified is the directory of the cgroup2 hierarchy, "" on legacy.
	Unified string
	// Named is the directory of the v1 name=systemd hierarchy, "" on
	// unified.
	Named string
	// Root is the prefix of /proc and of every mount point: "" for the real
	// host, a fixture directory in tests.
	Root string
	// V1 are the directories of the v1 hierarchies of the resource
	// controllers systemd's limits use (memory, cpu, cpuacct, pids), by
	// controller, on hybrid and legacy hosts; nil on unified ones.
	V1 map[string]string
}

// OpenCgroups detects the layout from <root>/proc/self/mountinfo. root ""
// means the real host. ErrNoCgroups when no hierarchy systemd uses is
// mounted.
func OpenCgroups(root string) (*Cgroups, error) {
	data, err := os.ReadFile(filepath.Join(root, "/proc/self/mountinfo"))
	if err != nil {
		return nil, fmt.Errorf("detect cgroup layout: %w", err)
	}
	c, err := ParseMountinfo(data)
	if err != nil {
		return nil, err
	}
	c.Root = root
	if root != "" {
		if c.Unified != "" {
			c.Unified = filepath.Join(root, c.Unified)
		}
		if c.Named != "" {
			c.Named = filepath.Join(root, c.Named)
		}
		for k, v := range c.V1 {
			c.V1[k] = filepath.Join(root, v)
		}
	}
	return c, nil
}

// ParseMountinfo detects the cgroup layout from the text of
// /proc/self/mountinfo. A cgroup2 mount at /sys/fs/cgroup means unified
// (a stray name=systemd mount beside it is ignored); cgroup2 elsewhere plus
// a name=systemd v1 mount means hybrid; name=systemd alone means legacy.
func ParseMountinfo(data []byte) (*Cgroups, error) {
	var v2, named []string
	v1 := map[string]string{}
	for m := range mounts(data) {
		switch {
		case m.fstype == "cgroup2":
			v2 = append(v2, m.point)
		case m.fstype == "cgroup" && m.hasOption("name=systemd"):
			named = append(named, m.point)
		case m.fstype == "cgroup":
			for _, ctrl := range limitControllers {
				if _, seen := v1[ctrl]; !seen && m.hasOption(ctrl) {
					v1[ctrl] = m.point
				}
			}
		}
	}
	c := &Cgroups{}
	if slices.Contains(v2, "/sys/fs/cgroup") {
		c.Layout, c.Unified = LayoutUnified, "/sys/fs/cgroup"
		return c, nil
	}
	if len(v2) > 0 {
		c.Unified = v2[0]
		if slices.Contains(v2, "/sys/fs/cgroup/unified") {
			c.Unified = "/sys/fs/cgroup/unified"
		}
	}
	if len(named) > 0 {
		c.Named = named[0]
	}
	if len(v1) > 0 {
		c.V1 = v1
	}
	switch {
	case c.Unified != "" && c.Named != "":
		c.Layout = LayoutHybrid
	case c.Unified != "":
		c.Layout = LayoutUnified
	case c.Named != "":
		c.Layout = LayoutLegacy
	default:
		return nil, fmt.Errorf("%w (no cgroup2 and no name=systemd mount in mountinfo)", ErrNoCgroups)
	}
	return c, nil
}

// mount is one line of /proc/self/mountinfo: its mount point, file system
// type and super options.
type mount struct{ point, fstype, super string }

func (m mount) hasOption(opt string) bool { return slices.Contains(strings.Split(m.super, ","), opt) }

// mounts are the lines of mountinfo text, in order; malformed lines are
// skipped.
func mounts(data []byte) iter.Seq[mount] {
	return func(yield func(mount) bool) {
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			// id parent major:minor root mountpoint options [optional…] - fstype source superoptions
			fields := strings.Fields(sc.Text())
			sep := slices.Index(fields, "-")
			if sep < 5 || sep+3 >= len(fields) {
				continue
			}
			if !yield(mount{point: unescapeMount(fields[4]), fstype: fields[sep+1], super: fields[sep+3]}) {
				return
			}
		}
	}
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, …).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Dirs are the directories of the cgroup path (a unit's ControlGroup) in
// every hierarchy that tracks units: one on unified and legacy, two on
// hybrid (cgroup2 first).
func (c *Cgroups) Dirs(cgroup string) []string {
	var dirs []string
	for _, base := range []string{c.Unified, c.Named} {
		if base != "" {
			dirs = append(dirs, filepath.Join(base, filepath.Clean("/"+cgroup)))
		}
	}
	return dirs
}

// Procs lists the pids in the cgroup and all its descendant cgroups, in
// every hierarchy that tracks units, sorted and without duplicates. A
// cgroup that does not exist (systemd removed it once the unit ended) is
// empty, not an error.
func (c *Cgroups) Procs(cgroup string) ([]int, error) {
	if cgroup == "" || cgroup == "/" {
		return nil, fmt.Errorf("read cgroup processes: refusing the root cgroup %q", cgroup)
	}
	var pids []int
	for _, dir := range c.Dirs(cgroup) {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNoDevice) {
					return nil // removed while we walked
				}
				return err
			}
			if !d.IsDir() {
				return nil
			}
			data, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNoDevice) {
					return nil
				}
				return err
			}
			for f := range strings.FieldsSeq(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					pids = append(pids, pid)
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read processes of cgroup %s: %w", cgroup, err)
		}
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}

// Populated reports whether any process is left in the cgroup or its
// descendants: from cgroup.events ("populated 0|1") where cgroup2 tracks
// it, else from Procs. A missing cgroup is not populated.
func (c *Cgroups) Populated(cgroup string) (bool, error) {
	if c.Unified != "" {
		data, err := os.ReadFile(filepath.Join(c.Dirs(cgroup)[0], "cgroup.events"))
		if err == nil {
			for line := range strings.SplitSeq(string(data), "\n") {
				if v, ok := strings.CutPrefix(line, "populated "); ok {
					return strings.TrimSpace(v) == "1", nil
				}
			}
		} else if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
	}
	pids, err := c.Procs(cgroup)
	return len(pids) > 0, err
}

// KillFile is the cgroup.kill file of the cgroup (cgroup2, kernel ≥ 5.14),
// or "" when there is none (legacy layout, older kernel, cgroup gone).
func (c *Cgroups) KillFile(cgroup string) string {
	if c.Unified == "" {
		return ""
	}
	path := filepath.Join(c.Dirs(cgroup)[0], "cgroup.kill")
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}

// HasKill reports whether this host's cgroup2 hierarchy offers cgroup.kill.
func (c *Cgroups) HasKill() bool { return c.childHas("cgroup.kill") }

// HasFreeze reports whether this host's cgroup2 hierarchy offers
// cgroup.freeze (kernel ≥ 5.2).
func (c *Cgroups) HasFreeze() bool { return c.childHas("cgroup.freeze") }

// childHas reports whether a child of the cgroup2 root has the control
// file name: cgroup.kill and cgroup.freeze exist only in non-root cgroups.
func (c *Cgroups) childHas(name string) bool {
	if c.Unified == "" {
		return false
	}
	entries, err := os.ReadDir(c.Unified)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.IsDir() {
			if _, err := os.Stat(filepath.Join(c.Unified, e.Name(), name)); err == nil {
				return true
			}
		}
	}
	return false
}

// KillReport says what Kill did.
type KillReport struct {
	// UsedKillFile: cgroup.kill was written (one recursive SIGKILL by the
	// kernel, safe against concurrent forks).
	UsedKillFile bool
	// Signalled are the pids sent SIGKILL one by one (still listed after
	// cgroup.kill, or on hosts without it).
	Signalled []int
	// Survivors are the processes still in the cgroup when Kill gave up.
	Survivors []Process
	// Elapsed is how long Kill took.
	Elapsed time.Duration
}
