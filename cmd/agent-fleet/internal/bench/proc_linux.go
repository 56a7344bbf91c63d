package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// readProcUsage reads pid's CPU time from /proc/<pid>/stat (utime+stime,
// 10 ms resolution, including exited threads) and from its threads'
// schedstat (ns, live threads only; see cpuDelta), and its resident memory
// from /proc/<pid>/status (VmRSS, VmHWM).
func readProcUsage(pid int) (procUsage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procUsage{}, err
	}
	cpu, err := parseProcStatCPU(stat)
	if err != nil {
		return procUsage{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procUsage{}, err
	}
	u := procUsage{CPU: cpu, ok: true}
	u.RSSKiB, u.PeakKiB = parseProcStatusKiB(status, "VmRSS:"), parseProcStatusKiB(status, "VmHWM:")
	u.Exec, u.threads, u.exact = threadsExec(pid)
	return u, nil
}

// threadsExec sums the run time of pid's live threads
// (/proc/<pid>/task/<tid>/schedstat, first field, ns). exact is false when
// a thread could not be read (it may have exited between the reads).
func threadsExec(pid int) (exec time.Duration, tids []int, exact bool) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, nil, false
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(dir + "/" + e.Name() + "/schedstat")
		if err != nil {
			return 0, nil, false
		}
		ns, err := parseSchedstat(b)
		if err != nil {
			return 0, nil, false
		}
		exec += ns
		tids = append(tids, tid)
	}
	// A kernel without CONFIG_SCHED_INFO writes zeros.
	return exec, tids, len(tids) > 0 && exec > 0
}

// parseSchedstat returns the run time of a schedstat line "RUN WAIT SLICES"
// (ns ns count).
func parseSchedstat(b []byte) (time.Duration, error) {
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 0, fmt.Errorf("empty schedstat")
	}
	ns, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("schedstat: %w", err)
	}
	return time.Duration(ns), nil
}

// parseProcStatCPU returns utime+stime of a /proc/<pid>/stat line. The
// command name (field 2) may hold spaces and parentheses, so fields are
// counted from the last ')'.
func parseProcStatCPU(stat []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name")
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("too few fields")
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad utime/stime")
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// parseProcStatusKiB returns the value of a "Key:   123 kB" line, or 0.
func parseProcStatusKiB(status []byte, key string) int64 {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				v, _ := strconv.ParseInt(f[0], 10, 64)
				return v
			}
		}
	}
	return 0
}

// processName is /proc/<pid>/comm, or "" when unreadable.
func processName(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// privateMemory is pid's private resident memory (RssAnon: the binary's
// pages are shared) and its thread count, from /proc/<pid>/status.
func privateMemory(pid int) (kib, threads int64, ok bool) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, false
	}
	return parseProcStatusKiB(status, "RssAnon:"), parseProcStatusKiB(status, "Threads:"), true
}
