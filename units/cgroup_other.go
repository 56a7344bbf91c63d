//go:build !linux

package units

import "context"

// Kill returns ErrUnsupported off Linux.
func (c *Cgroups) Kill(ctx context.Context, cgroup string) (KillReport, error) {
	return KillReport{}, ErrUnsupported
}

// WaitExit returns ErrUnsupported off Linux.
func (c *Cgroups) WaitExit(ctx context.Context, pid int, cgroup string) error {
	return ErrUnsupported
}
