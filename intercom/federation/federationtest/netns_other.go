//go:build !linux

package federationtest

import (
	"errors"
	"net"
	"os/exec"
	"testing"
)

// Netns is a host's network namespace; there are none off Linux.
type Netns struct{}

// NetnsSupported says that only Linux has network namespaces.
func NetnsSupported() error { return errors.New("network namespaces need Linux") }

// NewNetns fails the test: see NetnsSupported.
func NewNetns(t testing.TB) *Netns {
	t.Helper()
	t.Fatal(NetnsSupported())
	return nil
}

// Path is "".
func (n *Netns) Path() string { return "" }

// Listen fails: see NetnsSupported.
func (n *Netns) Listen(string) (net.Listener, error) { return nil, NetnsSupported() }

// Command is exec.Command: there is no namespace to enter.
func (n *Netns) Command(name string, args ...string) *exec.Cmd { return exec.Command(name, args...) }
