//go:build !linux

package units

import "context"

// Reload returns ErrUnsupported off Linux.
func (s *Systemd) Reload(context.Context) error { return ErrUnsupported }

// EnableUnitFiles returns ErrUnsupported off Linux.
func (s *Systemd) EnableUnitFiles(context.Context, ...string) error { return ErrUnsupported }

// DisableUnitFiles returns ErrUnsupported off Linux.
func (s *Systemd) DisableUnitFiles(context.Context, ...string) error { return ErrUnsupported }

// StartUnit returns ErrUnsupported off Linux.
func (s *Systemd) StartUnit(context.Context, string) error { return ErrUnsupported }

// SocketListen returns ErrUnsupported off Linux.
func (s *Systemd) SocketListen(context.Context, string) ([]string, error) {
	return nil, ErrUnsupported
}

// UnitPath returns ErrUnsupported off Linux.
func (s *Systemd) UnitPath(context.Context) ([]string, error) { return nil, ErrUnsupported }
