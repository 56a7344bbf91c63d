package output

import (
	"fmt"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet"
)

// Resources is what a live worker's cgroup uses now beside its limits,
// as status --json prints it: memoryBytes (memory.current), cpuUsageUsec
// (CPU time so far, µs), tasks (pids.current), oomKills (processes the
// OOM killer killed), frozen (the cgroup2 freezer's state). An absent
// number could not be read (its controller is not enabled for the cgroup).
type Resources struct {
	MemoryBytes  *uint64 `json:"memoryBytes,omitempty"`
	CPUUsageUsec *int64  `json:"cpuUsageUsec,omitempty"`
	Tasks        *uint64 `json:"tasks,omitempty"`
	OOMKills     uint64  `json:"oomKills"`
	Frozen       *bool   `json:"frozen,omitempty"`
}

// viewResources is u's JSON view (nil for nil).
func viewResources(u *fleet.CgroupUsage) *Resources {
	if u == nil {
		return nil
	}
	r := &Resources{MemoryBytes: u.MemoryBytes, Tasks: u.Tasks, OOMKills: u.OOMKills, Frozen: u.Frozen}
	if u.CPU != nil {
		us := u.CPU.Microseconds()
		r.CPUUsageUsec = &us
	}
	return r
}

// Bytes is n bytes for people, in powers of 1024: "64 MiB", "1.5 GiB".
func Bytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	v := fmt.Sprintf("%.1f", float64(n)/float64(div))
	return strings.TrimSuffix(v, ".0") + " " + string("KMGTP"[exp]) + "iB"
}

// LimitsText is a worker's limits for people: "memory 64 MiB, cpu 50%,
// tasks 32"; "" without any.
func LimitsText(l fleet.Limits) string {
	var parts []string
	if l.MemoryMax > 0 {
		parts = append(parts, "memory "+Bytes(l.MemoryMax))
	}
	if l.CPUQuotaPercent > 0 {
		parts = append(parts, fmt.Sprintf("cpu %d%%", l.CPUQuotaPercent))
	}
	if l.TasksMax > 0 {
		parts = append(parts, fmt.Sprintf("tasks %d", l.TasksMax))
	}
	return strings.Join(parts, ", ")
}

// usageText is what a live worker uses, against its limits: "memory
// 12 MiB of 64 MiB, cpu 1.2s, 5 tasks of 32, 1 process OOM-killed".
func usageText(u *fleet.CgroupUsage, l fleet.Limits) string {
	var parts []string
	if u.MemoryBytes != nil {
		t := "memory " + Bytes(*u.MemoryBytes)
		if l.MemoryMax > 0 {
			t += " of " + Bytes(l.MemoryMax)
		}
		parts = append(parts, t)
	}
	if u.CPU != nil {
		t := "cpu " + u.CPU.Round(10*time.Millisecond).String()
		if l.CPUQuotaPercent > 0 {
			t += fmt.Sprintf(" (quota %d%%)", l.CPUQuotaPercent)
		}
		parts = append(parts, t)
	}
	if u.Tasks != nil {
		t := plural(int(*u.Tasks), "task")
		if l.TasksMax > 0 {
			t += fmt.Sprintf(" of %d", l.TasksMax)
		}
		parts = append(parts, t)
	}
	if u.OOMKills > 0 {
		parts = append(parts, plural(int(u.OOMKills), "process")+" OOM-killed")
	}
	return strings.Join(parts, ", ")
}

// pausedText says since when a worker is paused and what that means.
func pausedText(w *fleet.Worker, u *fleet.CgroupUsage, s Surface) string {
	t := "since " + HumanWhen(w.FrozenAt, time.Now()) + ": its processes are frozen"
	if u != nil && u.Frozen != nil && !*u.Frozen {
		t = "since " + HumanWhen(w.FrozenAt, time.Now()) + ", but its cgroup is not frozen now (thawed outside agent-fleet?)"
	}
	if !w.LeaseDeadline.IsZero() {
		t += "; its idle lease is held"
	}
	if s == Tool {
		return t + "; resume it (action resume) to let it run"
	}
	return t + "; agent-fleet resume " + Inline(w.ID) + " lets it run"
}
