//go:build !linux

package units

import "context"

// BootOptions configure BootPrivateManager (Linux only).
type BootOptions struct {
	Name          string
	ConfigHome    string
	Watch         int
	ReaperRemoves []string
}

// PrivateManager is a booted private user manager; off Linux there is none.
type PrivateManager struct {
	Name       string
	RuntimeDir string
	Bus        BusAddress
	PID        int
	StartTime  string
	Cgroup     string
	CgroupDirs []string
}

// CanBootPrivateManager returns ErrUnsupported off Linux.
func CanBootPrivateManager() error { return ErrUnsupported }

// BootPrivateManager returns ErrUnsupported off Linux.
func BootPrivateManager(ctx context.Context, opts BootOptions) (*PrivateManager, error) {
	return nil, ErrUnsupported
}

// Env returns nil off Linux.
func (m *PrivateManager) Env() []string { return nil }

// Stop does nothing off Linux.
func (m *PrivateManager) Stop() error { return nil }

// ProcessStartTime returns "" off Linux.
func ProcessStartTime(pid int) string { return "" }

// ProcessState returns "" off Linux.
func ProcessState(pid int) string { return "" }

// Record returns ErrUnsupported off Linux.
func (m *PrivateManager) Record() error { return ErrUnsupported }

// BootRecorded returns ErrUnsupported off Linux.
func BootRecorded(ctx context.Context, opts BootOptions) (*PrivateManager, error) {
	return nil, ErrUnsupported
}

// FindPrivateManager returns nil off Linux.
func FindPrivateManager(name string) *PrivateManager { return nil }

// StopPrivateManagerAt returns ErrUnsupported off Linux.
func StopPrivateManagerAt(rt string) error { return ErrUnsupported }
