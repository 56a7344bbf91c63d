package unitstest_test

import (
	"testing"

	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

func TestConformanceFake(t *testing.T) {
	unitstest.RunConformance(t, func(t *testing.T) units.Manager { return unitstest.NewFake(unitstest.FakeOptions{}) })
}

// TestConformanceFakeWithoutFreezer: the fake as a hybrid host's manager,
// which cannot freeze units.
func TestConformanceFakeWithoutFreezer(t *testing.T) {
	unitstest.RunConformance(t, func(t *testing.T) units.Manager {
		return unitstest.NewFake(unitstest.FakeOptions{FreezeUnsupported: true})
	})
}

// TestConformanceSystemd runs the same suite against a real user manager.
func TestConformanceSystemd(t *testing.T) {
	inst := unitstest.Require(t)
	t.Logf("user manager: pid %d (0: not booted by the tests), bus %s, cgroup %q", inst.PID, inst.Bus.Address, inst.Cgroup)
	unitstest.RunConformance(t, func(t *testing.T) units.Manager { return unitstest.Manager(t) })
}
