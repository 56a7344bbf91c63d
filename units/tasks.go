package units

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// TaskLimit is the limit on tasks (processes and threads: what TasksMax=
// counts) with the least room left over a process: the pids.max of its
// pids cgroup and of each ancestor up to the hierarchy's root, and the
// kernel's own (kernel.pid_max, kernel.threads-max). A worker takes a task
// per thread of its shim and command (about 9 for a shim running sleep),
// so this is how many more workers a user manager can start.
type TaskLimit struct {
	// Where is the limit: a cgroup path with its pids.max, or "kernel".
	// "" when nothing limits the process.
	Where string
	// Current and Max are the tasks counted against it and its maximum.
	Current, Max int
}

// Room is how many more tasks the limit allows (0 when it is reached).
func (t TaskLimit) Room() int { return max(0, t.Max-t.Current) }

// String is "4695 of 4700 tasks (pids.max of /user.slice/user-1000.slice)".
func (t TaskLimit) String() string {
	switch t.Where {
	case "":
		return "no task limit"
	case "kernel":
		return fmt.Sprintf("%d of %d tasks (the kernel's pid_max and threads-max)", t.Current, t.Max)
	}
	return fmt.Sprintf("%d of %d tasks (pids.max of %s)", t.Current, t.Max, t.Where)
}

// TasksOf finds the tightest task limit over process pid (TaskLimit),
// reading <root>/proc and <root>/sys ("" is the host). A cgroup without a
// pids controller, or whose pids.max is "max", does not limit; neither
// does a kernel whose limits cannot be read.
func TasksOf(root string, pid int) (TaskLimit, error) {
	data, err := os.ReadFile(filepath.Join(root, "/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return TaskLimit{}, fmt.Errorf("task limit of pid %d: %w", pid, err)
	}
	best := kernelTasks(root)
	mount, path := pidsCgroup(root, data)
	for dir := filepath.Join(mount, path); mount != "" && strings.HasPrefix(dir, mount); dir = filepath.Dir(dir) {
		if lim, ok := readPidsLimit(dir); ok && (best.Where == "" || lim.Room() < best.Room()) {
			lim.Where = "/" + strings.TrimPrefix(strings.TrimPrefix(dir, mount), "/")
			best = lim
		}
		if dir == mount {
			break
		}
	}
	return best, nil
}

// pidsCgroup is the mount point of the hierarchy holding the pids
// controller and the process's path in it, from /proc/<pid>/cgroup's text:
// a v1 "N:pids:/path" line on legacy and hybrid hosts, else the cgroup2
// "0::/path" line; "" when neither is mounted.
func pidsCgroup(root string, procCgroup []byte) (mount, path string) {
	var v1, v2 string
	for line := range strings.SplitSeq(string(procCgroup), "\n") {
		id, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		controllers, p, ok := strings.Cut(rest, ":")
		switch {
		case !ok:
		case id == "0" && controllers == "":
			v2 = p
		case slices.Contains(strings.Split(controllers, ","), "pids"):
			v1 = p
		}
	}
	info, err := os.ReadFile(filepath.Join(root, "/proc/self/mountinfo"))
	if err != nil {
		return "", ""
	}
	var v1Mount, v2Mount string
	for m := range mounts(info) {
		switch {
		case m.fstype == "cgroup" && m.hasOption("pids"):
			v1Mount = m.point
		case m.fstype == "cgroup2" && v2Mount == "":
			v2Mount = m.point
		}
	}
	switch {
	case v1 != "" && v1Mount != "":
		return filepath.Join(root, v1Mount), v1
	case v2 != "" && v2Mount != "":
		return filepath.Join(root, v2Mount), v2
	}
	return "", ""
}

// readPidsLimit reads a cgroup directory's pids.max and pids.current; ok
// is false without a limit there.
func readPidsLimit(dir string) (TaskLimit, bool) {
	maxText, err := os.ReadFile(filepath.Join(dir, "pids.max"))
	if err != nil {
		return TaskLimit{}, false
	}
	limit, err := strconv.Atoi(strings.TrimSpace(string(maxText)))
	if err != nil { // "max"
		return TaskLimit{}, false
	}
	curText, err := os.ReadFile(filepath.Join(dir, "pids.current"))
	if err != nil {
		return TaskLimit{}, false
	}
	cur, err := strconv.Atoi(strings.TrimSpace(string(curText)))
	if err != nil {
		return TaskLimit{}, false
	}
	return TaskLimit{Current: cur, Max: limit}, true
}

// kernelTasks is the kernel's limit, the smaller of pid_max and
// threads-max, against every task of the machine (the total of
// /proc/loadavg's "running/total" field); no limit when unreadable.
func kernelTasks(root string) TaskLimit {
	limit := 0
	for _, name := range []string{"pid_max", "threads-max"} {
		b, err := os.ReadFile(filepath.Join(root, "/proc/sys/kernel", name))
		if err != nil {
			return TaskLimit{}
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return TaskLimit{}
		}
		if limit == 0 || n < limit {
			limit = n
		}
	}
	load, err := os.ReadFile(filepath.Join(root, "/proc/loadavg"))
	if err != nil {
		return TaskLimit{}
	}
	f := strings.Fields(string(load))
	if len(f) < 4 {
		return TaskLimit{}
	}
	_, total, ok := strings.Cut(f[3], "/")
	cur, err := strconv.Atoi(total)
	if !ok || err != nil {
		return TaskLimit{}
	}
	return TaskLimit{Where: "kernel", Current: cur, Max: limit}
}
