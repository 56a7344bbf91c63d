//go:build !linux

package units

import (
	"context"
	"syscall"
	"time"
)

// Systemd is the real Manager. Off Linux there is no systemd user manager:
// Connect and Probe return ErrUnsupported and so does every method.
type Systemd struct{}

var _ Manager = (*Systemd)(nil)

// Connect returns ErrUnsupported off Linux.
func Connect(ctx context.Context, opts Options) (*Systemd, error) { return nil, ErrUnsupported }

// Probe returns ErrUnsupported off Linux.
func Probe(ctx context.Context, opts Options) (ProbeResult, error) {
	return ProbeResult{}, ErrUnsupported
}

// Bus returns the zero BusAddress off Linux.
func (s *Systemd) Bus() BusAddress { return BusAddress{} }

// StartService returns ErrUnsupported.
func (s *Systemd) StartService(context.Context, ServiceSpec) (UnitState, error) {
	return UnitState{}, ErrUnsupported
}

// StopUnit returns ErrUnsupported.
func (s *Systemd) StopUnit(context.Context, string) error { return ErrUnsupported }

// ControlPID returns ErrUnsupported.
func (s *Systemd) ControlPID(context.Context, string) (int, error) { return 0, ErrUnsupported }

// StopTimeout returns ErrUnsupported.
func (s *Systemd) StopTimeout(context.Context, string) (time.Duration, error) {
	return 0, ErrUnsupported
}

// ServiceEnvironment is unsupported off Linux.
func (s *Systemd) ServiceEnvironment(context.Context, string) ([]string, error) {
	return nil, ErrUnsupported
}

// ServiceCommand is unsupported off Linux.
func (s *Systemd) ServiceCommand(context.Context, string) (ServiceCommand, error) {
	return ServiceCommand{}, ErrUnsupported
}

// ResetFailed returns ErrUnsupported.
func (s *Systemd) ResetFailed(context.Context, string) error { return ErrUnsupported }

// KillUnit returns ErrUnsupported.
func (s *Systemd) KillUnit(context.Context, string, syscall.Signal) error { return ErrUnsupported }

// FreezeUnit returns ErrUnsupported.
func (s *Systemd) FreezeUnit(context.Context, string) error { return ErrUnsupported }

// ThawUnit returns ErrUnsupported.
func (s *Systemd) ThawUnit(context.Context, string) error { return ErrUnsupported }

// Unit returns ErrUnsupported.
func (s *Systemd) Unit(_ context.Context, name string) (UnitState, error) {
	return UnitState{Name: name}, ErrUnsupported
}

// ListUnits returns ErrUnsupported.
func (s *Systemd) ListUnits(context.Context, ...string) ([]UnitSummary, error) {
	return nil, ErrUnsupported
}

// Version returns ErrUnsupported.
func (s *Systemd) Version(context.Context) (Version, error) { return Version{}, ErrUnsupported }

// Ping returns ErrUnsupported.
func (s *Systemd) Ping(context.Context) error { return ErrUnsupported }

// Close does nothing.
func (s *Systemd) Close() error { return nil }

// ManagerPID is the user manager's pid; unsupported off Linux.
func (s *Systemd) ManagerPID(context.Context) (int, error) { return 0, ErrUnsupported }

// Controllers are the user manager's resource controllers; unsupported
// off Linux.
func (s *Systemd) Controllers(context.Context) (ControllerSupport, error) {
	return ControllerSupport{}, ErrUnsupported
}

// TaskLimit is the user manager's task limit; unsupported off Linux.
func (s *Systemd) TaskLimit(context.Context) (TaskLimit, error) { return TaskLimit{}, ErrUnsupported }

// ProbeSandboxOptions configures ProbeSandbox.
type ProbeSandboxOptions struct {
	CacheFile, Home string
}

// ProbeSandbox returns ErrUnsupported.
func (s *Systemd) ProbeSandbox(context.Context, ProbeSandboxOptions) (SandboxSupport, error) {
	return SandboxSupport{}, ErrUnsupported
}
