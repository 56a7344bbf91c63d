package units

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Limits are a service's resource limits (docs/systemd.md "Limits"). A
// zero field sets no limit.
type Limits struct {
	// MemoryMax is MemoryMax= in bytes: past it the kernel reclaims, then
	// its OOM killer kills a process of the unit.
	MemoryMax uint64
	// CPUQuotaPercent is CPUQuota= in percent of one CPU (150 = one and a
	// half CPUs), at most MaxCPUQuotaPercent.
	CPUQuotaPercent uint32
	// TasksMax is TasksMax=: processes and threads; a fork past it fails.
	TasksMax uint64
}

// MaxCPUQuotaPercent bounds Limits.CPUQuotaPercent: 100 CPUs.
const MaxCPUQuotaPercent = 10000

// IsZero reports whether no limit is set.
func (l Limits) IsZero() bool { return l == Limits{} }

// Controllers names the cgroup controllers the set limits need: memory,
// cpu, pids.
func (l Limits) Controllers() []string {
	var out []string
	if l.MemoryMax > 0 {
		out = append(out, "memory")
	}
	if l.CPUQuotaPercent > 0 {
		out = append(out, "cpu")
	}
	if l.TasksMax > 0 {
		out = append(out, "pids")
	}
	return out
}

// limitControllers are the controllers Limits use, as cgroup mount
// options name them (cpuacct counts a v1 cgroup's CPU time).
var limitControllers = []string{"memory", "cpu", "cpuacct", "pids"}

// ControllerSupport says which resource controllers a user manager can
// give its units, and why not where it cannot.
type ControllerSupport struct {
	// Root is the user manager's own cgroup (its init.scope's parent).
	Root string
	// Available are the controllers of memory, cpu and pids it can apply.
	Available []string
	// Why says, for each missing controller, why it is not available.
	Why map[string]string
}

// Has reports whether controller is available.
func (c ControllerSupport) Has(controller string) bool {
	return slices.Contains(c.Available, controller)
}

// ManagerControllers finds which of memory, cpu and pids a systemd
// manager whose cgroup is root can apply to its units, by systemd's own
// rule: on a unified host the controllers delegated to root (its
// cgroup.controllers, which its parent's cgroup.subtree_control grants);
// on hybrid and legacy hosts, where systemd uses the v1 hierarchies for
// resource control, a controller whose hierarchy has root's cgroup with a
// writable cgroup.procs.
func (c *Cgroups) ManagerControllers(root string) (ControllerSupport, error) {
	if root == "" || root == "/" {
		return ControllerSupport{}, fmt.Errorf("controllers of the user manager: refusing the root cgroup %q", root)
	}
	sup := ControllerSupport{Root: root, Why: map[string]string{}}
	want := []string{"memory", "cpu", "pids"}
	if c.Layout == LayoutUnified {
		dir := c.Dirs(root)[0]
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
		if err != nil {
			return sup, fmt.Errorf("controllers of the user manager: %w", err)
		}
		have := strings.Fields(string(data))
		for _, ctrl := range want {
			if slices.Contains(have, ctrl) {
				sup.Available = append(sup.Available, ctrl)
			} else {
				sup.Why[ctrl] = fmt.Sprintf("not delegated to the user manager's cgroup %s (its cgroup.controllers: %q); "+
					"delegate it with Delegate= on user@.service", root, strings.Join(have, " "))
			}
		}
		return sup, nil
	}
	for _, ctrl := range want {
		mount := c.V1[ctrl]
		if mount == "" {
			sup.Why[ctrl] = fmt.Sprintf("no %s controller hierarchy is mounted (%s cgroup layout)", ctrl, c.Layout)
			continue
		}
		procs := filepath.Join(mount, filepath.Clean("/"+root), "cgroup.procs")
		if _, err := os.Stat(procs); err != nil {
			sup.Why[ctrl] = fmt.Sprintf("the %s layout keeps %s in a v1 hierarchy (%s), where the user manager has no cgroup; "+
				"only the system manager applies limits there", c.Layout, ctrl, mount)
			continue
		}
		if !writable(procs) {
			sup.Why[ctrl] = fmt.Sprintf("the user manager may not write its cgroup %s in the v1 %s hierarchy", root, ctrl)
			continue
		}
		sup.Available = append(sup.Available, ctrl)
	}
	return sup, nil
}

// writable reports whether this process may write path (access(2) W_OK,
// as systemd checks).
func writable(path string) bool {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// Usage is what a unit's cgroup uses now. A nil field was not readable:
// the controller is not enabled for the cgroup, or the cgroup is gone.
type Usage struct {
	// MemoryBytes is memory.current (v1: memory.usage_in_bytes).
	MemoryBytes *uint64
	// CPU is the CPU time used so far: cpu.stat usage_usec (v1:
	// cpuacct.usage).
	CPU *time.Duration
	// Tasks is pids.current.
	Tasks *uint64
	// OOMKills counts processes of the cgroup the OOM killer killed
	// (memory.events oom_kill; v1: memory.oom_control oom_kill).
	OOMKills uint64
	// Frozen is cgroup.events' frozen (cgroup2 only; nil elsewhere).
	Frozen *bool
}

// Usage reads what the cgroup uses now from its files: cgroup2 where the
// file exists there, else the v1 controller hierarchies (hybrid, legacy).
// A cgroup that is gone gives an empty Usage, not an error.
func (c *Cgroups) Usage(cgroup string) (Usage, error) {
	var u Usage
	if cgroup == "" || cgroup == "/" {
		return u, fmt.Errorf("read cgroup usage: refusing the root cgroup %q", cgroup)
	}
	var v2 string
	if c.Unified != "" {
		v2 = c.Dirs(cgroup)[0]
	}
	v1 := func(ctrl string) string {
		if c.V1[ctrl] == "" {
			return ""
		}
		return filepath.Join(c.V1[ctrl], filepath.Clean("/"+cgroup))
	}
	if n, ok := readUint(v2, "memory.current"); ok {
		u.MemoryBytes = &n
	} else if n, ok := readUint(v1("memory"), "memory.usage_in_bytes"); ok {
		u.MemoryBytes = &n
	}
	if n, ok := readKeyed(v2, "memory.events", "oom_kill"); ok {
		u.OOMKills = n
	} else if n, ok := readKeyed(v1("memory"), "memory.oom_control", "oom_kill"); ok {
		u.OOMKills = n
	}
	if n, ok := readKeyed(v2, "cpu.stat", "usage_usec"); ok {
		d := time.Duration(n) * time.Microsecond
		u.CPU = &d
	} else if n, ok := readUint(v1("cpuacct"), "cpuacct.usage"); ok {
		d := time.Duration(n)
		u.CPU = &d
	}
	if n, ok := readUint(v2, "pids.current"); ok {
		u.Tasks = &n
	} else if n, ok := readUint(v1("pids"), "pids.current"); ok {
		u.Tasks = &n
	}
	if n, ok := readKeyed(v2, "cgroup.events", "frozen"); ok {
		f := n == 1
		u.Frozen = &f
	}
	return u, nil
}

// readUint reads a file of one number in dir ("" or a missing file: not
// ok; "max" is not a number either).
func readUint(dir, name string) (uint64, bool) {
	if dir == "" {
		return 0, false
	}
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	return n, err == nil
}

// readKeyed reads key's number from a flat-keyed file ("key value" lines).
func readKeyed(dir, name, key string) (uint64, bool) {
	if dir == "" {
		return 0, false
	}
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// freezeDefaultTimeout bounds SetFrozen when ctx has no deadline.
const freezeDefaultTimeout = 10 * time.Second

// SetFrozen freezes (true) or thaws (false) the cgroup and its
// descendants with the kernel's cgroup2 freezer (cgroup.freeze), and waits
// until cgroup.events says it is done (ctx, default 10 s). It is what
// fleet falls back on where systemd does not freeze units itself (it
// supports FreezeUnit only with every hierarchy unified) while cgroup2
// still tracks the unit's processes: hybrid hosts. ErrFreezeUnsupported
// without a cgroup2 freezer (legacy layout, kernel < 5.2); a cgroup that
// is gone gives an error wrapping fs.ErrNotExist.
func (c *Cgroups) SetFrozen(ctx context.Context, cgroup string, frozen bool) error {
	what := "thaw"
	if frozen {
		what = "freeze"
	}
	if cgroup == "" || cgroup == "/" {
		return fmt.Errorf("%s cgroup: refusing the root cgroup %q", what, cgroup)
	}
	if c.Unified == "" {
		return fmt.Errorf("%s cgroup %s: %w: no cgroup2 hierarchy (%s layout)", what, cgroup, ErrFreezeUnsupported, c.Layout)
	}
	dir := c.Dirs(cgroup)[0]
	file := filepath.Join(dir, "cgroup.freeze")
	if _, err := os.Stat(file); err != nil {
		if _, derr := os.Stat(dir); derr != nil {
			return fmt.Errorf("%s cgroup %s: %w", what, cgroup, derr)
		}
		return fmt.Errorf("%s cgroup %s: %w: the kernel has no cgroup2 freezer (cgroup.freeze)", what, cgroup, ErrFreezeUnsupported)
	}
	val := "0"
	if frozen {
		val = "1"
	}
	if err := os.WriteFile(file, []byte(val), 0); err != nil {
		return fmt.Errorf("%s cgroup %s: %w", what, cgroup, err)
	}
	ctx, cancel := withDefaultDeadline(ctx, freezeDefaultTimeout)
	defer cancel()
	delay := 2 * time.Millisecond
	for {
		n, ok := readKeyed(dir, "cgroup.events", "frozen")
		switch {
		case !ok:
			if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%s cgroup %s: %w", what, cgroup, err)
			}
		case (n == 1) == frozen:
			return nil
		}
		if err := sleepFor(ctx, delay); err != nil {
			return fmt.Errorf("%s cgroup %s: %w: cgroup.events does not say frozen %s yet (%w)", what, cgroup, ErrTimeout, val, err)
		}
		delay = min(delay*2, 50*time.Millisecond)
	}
}
