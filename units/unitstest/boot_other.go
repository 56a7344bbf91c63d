//go:build !linux

package unitstest

import (
	"testing"

	"github.com/agent-fleet/agent-fleet/units"
)

// Bootable returns units.ErrUnsupported off Linux.
func Bootable() error { return units.ErrUnsupported }

// OwnManager ends the test through Unavailable off Linux.
func OwnManager(t testing.TB) Instance {
	t.Helper()
	Unavailable(t, units.ErrUnsupported)
	return Instance{}
}

func shared() (Instance, error) { return Instance{}, units.ErrUnsupported }
