package federationtest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Netns is a network namespace for one host: it has only a loopback
// interface, up, so a host's processes (run in it through Command) reach
// nothing outside it but what the test listens for inside it (Listen) —
// its NATS link's proxy. A process keeps the namespace alive; it ends
// with the test, or with the test process.
type Netns struct {
	holder *exec.Cmd
	path   string // /proc/<holder>/ns/net
}

// NetnsSupported says why this process cannot give each host a network
// namespace (not root, no nsenter, namespaces refused), or nil when it
// can.
func NetnsSupported() error {
	if os.Geteuid() != 0 {
		return errors.New("network namespaces need root")
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		return fmt.Errorf("network namespaces need nsenter (util-linux): %w", err)
	}
	probe := exec.Command("true")
	probe.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	if err := probe.Run(); err != nil {
		return fmt.Errorf("cannot create a network namespace: %w", err)
	}
	return nil
}

// NewNetns makes a network namespace with loopback up; it is removed when
// the test ends.
func NewNetns(t testing.TB) *Netns {
	t.Helper()
	// The holder lives until the test process does (tail --pid polls it),
	// or until the test's cleanup kills it.
	holder := exec.Command("tail", "--pid="+strconv.Itoa(os.Getpid()), "-f", "/dev/null")
	holder.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	if err := holder.Start(); err != nil {
		t.Fatalf("start a network namespace: %v", err)
	}
	n := &Netns{holder: holder, path: fmt.Sprintf("/proc/%d/ns/net", holder.Process.Pid)}
	t.Cleanup(func() {
		_ = holder.Process.Kill()
		_ = holder.Wait()
	})
	if err := n.do(loopbackUp); err != nil {
		t.Fatalf("bring loopback up in the namespace: %v", err)
	}
	return n
}

// Path is the namespace's file, for nsenter --net.
func (n *Netns) Path() string { return n.path }

// Listen opens a TCP listener on addr inside the namespace; the test
// process accepts on it from outside.
func (n *Netns) Listen(addr string) (net.Listener, error) {
	var ln net.Listener
	err := n.do(func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}

// Command is exec.Command(name, args...) run inside the namespace (through
// nsenter, which execs it: the process's pid is name's).
func (n *Netns) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + n.path, "--", name}, args...)...)
}

// do runs f on an OS thread that entered the namespace. The thread is
// never returned to the Go scheduler: it exits with the goroutine, so no
// other goroutine ever runs in the namespace. Sockets f creates stay in
// it.
func (n *Netns) do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread ends with this goroutine
		fd, err := unix.Open(n.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
