package bench

import (
	"context"
	"fmt"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// busyLoops keep every CPU out of its idle state while a load is measured
// (bench broker and bench client --awake): one busy loop per CPU (a
// /bin/sh that runs `:` forever), each at SCHED_IDLE, the lowest priority
// Linux has, so it runs only where nothing else would and gives way at
// once to any process that wakes. A wake-up is then a context switch, not
// an exit from idle: on a VM a halted vCPU is woken by the hypervisor,
// which adds 0.1–0.6 ms to a share of wake-ups and so to every broker's
// tail latency alike. The loops are processes of their own: their CPU is
// neither the broker's nor the bench's.
type busyLoops struct {
	cmds []*exec.Cmd
}

// keepAwake starts cpus busy loops. Errors: a loop that could not be
// started, or not be given SCHED_IDLE (one at normal priority would take
// CPU from the brokers under test); what was started is stopped first.
func keepAwake(ctx context.Context, cpus int) (*busyLoops, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b := &busyLoops{}
	for range cpus {
		c := exec.Command("/bin/sh", "-c", "while :; do :; done")
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the bench
		if err := c.Start(); err != nil {
			b.stop()
			return nil, fmt.Errorf("keep the CPUs awake: %w", err)
		}
		b.cmds = append(b.cmds, c)
		if err := idlePriority(c.Process.Pid); err != nil {
			b.stop()
			return nil, fmt.Errorf("keep the CPUs awake: pid %d: %w", c.Process.Pid, err)
		}
	}
	return b, nil
}

// pids are the loops' process ids.
func (b *busyLoops) pids() []int {
	var pids []int
	for _, c := range b.cmds {
		pids = append(pids, c.Process.Pid)
	}
	return pids
}

// stop kills the loops (SIGKILL, by pid: they are this process's
// children) and reaps them.
func (b *busyLoops) stop() {
	for _, c := range b.cmds {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	b.cmds = nil
}

// idlePriority gives the single-threaded process pid SCHED_IDLE and reads
// it back.
func idlePriority(pid int) error {
	if err := unix.SchedSetAttr(pid, &unix.SchedAttr{Policy: unix.SCHED_IDLE}, 0); err != nil {
		return fmt.Errorf("set SCHED_IDLE: %w", err)
	}
	attr, err := unix.SchedGetAttr(pid, 0)
	if err != nil {
		return fmt.Errorf("read its scheduling policy: %w", err)
	}
	if attr.Policy != unix.SCHED_IDLE {
		return fmt.Errorf("its scheduling policy stayed %d", attr.Policy)
	}
	return nil
}
