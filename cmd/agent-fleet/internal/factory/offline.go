package factory

import (
	"context"
	"syscall"
	"time"

	"github.com/agent-fleet/agent-fleet/units"
)

// offlineUnits stands in for a user manager that cannot be reached when
// the fleet is opened for reading (ReadFleetAs): every call fails with why,
// so what the fleet reports comes from the registry and the files alone.
type offlineUnits struct{ err error }

var _ units.Manager = offlineUnits{}

func (o offlineUnits) StartService(context.Context, units.ServiceSpec) (units.UnitState, error) {
	return units.UnitState{}, o.err
}
func (o offlineUnits) StopUnit(context.Context, string) error                     { return o.err }
func (o offlineUnits) StopTimeout(context.Context, string) (time.Duration, error) { return 0, o.err }
func (o offlineUnits) ControlPID(context.Context, string) (int, error)            { return 0, o.err }
func (o offlineUnits) ResetFailed(context.Context, string) error                  { return o.err }
func (o offlineUnits) KillUnit(context.Context, string, syscall.Signal) error     { return o.err }
func (o offlineUnits) FreezeUnit(context.Context, string) error                   { return o.err }
func (o offlineUnits) ThawUnit(context.Context, string) error                     { return o.err }
func (o offlineUnits) Unit(_ context.Context, name string) (units.UnitState, error) {
	return units.UnitState{Name: name}, o.err
}
func (o offlineUnits) ListUnits(context.Context, ...string) ([]units.UnitSummary, error) {
	return nil, o.err
}
func (o offlineUnits) ServiceEnvironment(context.Context, string) ([]string, error) {
	return nil, o.err
}
func (o offlineUnits) ServiceCommand(context.Context, string) (units.ServiceCommand, error) {
	return units.ServiceCommand{}, o.err
}
func (o offlineUnits) Version(context.Context) (units.Version, error) { return units.Version{}, o.err }
func (o offlineUnits) Ping(context.Context) error                     { return o.err }
func (o offlineUnits) Close() error                                   { return nil }
