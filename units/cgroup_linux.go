//go:build linux

package units

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// killDefaultTimeout bounds Kill when ctx has no deadline.
const killDefaultTimeout = 5 * time.Second

// Kill SIGKILLs every process in the cgroup and its descendant cgroups, in
// every hierarchy that tracks units, and waits until none is listed or ctx
// ends (default 5 s). Where cgroup2 has cgroup.kill (kernel ≥ 5.14) it is
// written first; whatever is still listed after that (or on hosts without
// it) is signalled one pid at a time, repeating every 5–100 ms. A pid is
// signalled through a pidfd and only after /proc/<pid>/cgroup confirmed it
// is still in this cgroup, so a recycled pid is never hit. Processes left
// at the deadline are returned in the report's Survivors with an error
// matching ErrCgroupNotEmpty. Kill works only on the real host (Root "").
func (c *Cgroups) Kill(ctx context.Context, cgroup string) (KillReport, error) {
	var rep KillReport
	if c.Root != "" && c.Root != "/" {
		return rep, fmt.Errorf("kill cgroup %s: refusing to signal processes under the fixture root %q", cgroup, c.Root)
	}
	if cgroup == "" || cgroup == "/" {
		return rep, fmt.Errorf("kill cgroup: refusing the root cgroup %q", cgroup)
	}
	started := time.Now()
	ctx, cancel := withDefaultDeadline(ctx, killDefaultTimeout)
	defer cancel()
	if kf := c.KillFile(cgroup); kf != "" {
		// EOPNOTSUPP in threaded cgroups; ENOENT if the cgroup just went:
		// either way the loop below finishes the job.
		rep.UsedKillFile = os.WriteFile(kf, []byte("1"), 0) == nil
	}
	signalled := map[int]bool{}
	delay := 5 * time.Millisecond
	for pass := 0; ; pass++ {
		pids, err := c.Procs(cgroup)
		if err != nil {
			rep.Elapsed = time.Since(started)
			return rep, fmt.Errorf("kill cgroup %s: %w", cgroup, err)
		}
		if len(pids) == 0 {
			rep.Elapsed = time.Since(started)
			return rep, nil
		}
		// Give cgroup.kill one round to take effect before going pid by pid.
		if !rep.UsedKillFile || pass > 0 {
			for _, pid := range pids {
				if c.killMember(pid, cgroup) && !signalled[pid] {
					signalled[pid] = true
					rep.Signalled = append(rep.Signalled, pid)
				}
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			left, _ := c.Procs(cgroup)
			rep.Survivors = c.Processes(left)
			rep.Elapsed = time.Since(started)
			if len(left) == 0 {
				return rep, nil
			}
			return rep, fmt.Errorf("kill cgroup %s: %w after %s: pids %v",
				cgroup, ErrCgroupNotEmpty, rep.Elapsed.Round(time.Millisecond), left)
		}
		delay = min(delay*2, 100*time.Millisecond)
	}
}

// killMember sends SIGKILL to pid if it is still in cgroup. It reports
// whether a signal was sent.
func (c *Cgroups) killMember(pid int, cgroup string) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if !errors.Is(err, unix.ENOSYS) {
			return false // gone (ESRCH) or not ours to signal
		}
		fd = -1 // kernel < 5.3: fall back to kill(2) after the check
	} else {
		defer unix.Close(fd)
	}
	m, err := c.Membership(pid)
	if err != nil || !InCgroup(m.Path, cgroup) {
		return false
	}
	if fd >= 0 {
		return unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil
	}
	return unix.Kill(pid, unix.SIGKILL) == nil
}

// WaitExit waits until process pid, a member of cgroup (or of a cgroup
// below it), has exited, or until ctx ends (then ctx's error). A pid that
// is gone already, or that now lives elsewhere (its number was reused),
// has exited. The wait is a pidfd in Go's poller: no polling, and the
// membership is checked on the pidfd's process, so a reused pid is never
// waited for. Errors wrapping ErrUnsupported mean this host cannot watch
// the process (kernel < 5.3, a fixture Root): the caller must poll.
func (c *Cgroups) WaitExit(ctx context.Context, pid int, cgroup string) error {
	if c.Root != "" && c.Root != "/" {
		return fmt.Errorf("wait for pid %d: %w: fixture root %q", pid, ErrUnsupported, c.Root)
	}
	if pid <= 0 {
		return fmt.Errorf("wait for pid %d: %w: no such pid", pid, ErrUnsupported)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return nil
	case err != nil:
		return fmt.Errorf("wait for pid %d: %w: pidfd: %v", pid, ErrUnsupported, err)
	}
	if m, err := c.Membership(pid); err != nil || !InCgroup(m.Path, cgroup) {
		unix.Close(fd)
		return nil
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return fmt.Errorf("wait for pid %d: %w: %v", pid, ErrUnsupported, err)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("wait for pid %d: %w: %v", pid, ErrUnsupported, err)
	}
	if d, ok := ctx.Deadline(); ok {
		_ = f.SetReadDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	// A pidfd polls readable once its process has exited; the poller waits
	// for that whenever the callback says "not yet".
	err = rc.Read(func(fd uintptr) bool {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 0)
		return err != nil && !errors.Is(err, unix.EINTR) || n > 0
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, os.ErrDeadlineExceeded):
		return context.DeadlineExceeded // the poller's timer fired before ctx's
	}
	// The poller does not take this pidfd.
	return fmt.Errorf("wait for pid %d: %w: %v", pid, ErrUnsupported, err)
}
