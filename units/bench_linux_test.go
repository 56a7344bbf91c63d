package units_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// BenchmarkUnitRead is one Unit read of a running service: what every start
// does after its job and every stop's polling repeats.
func BenchmarkUnitRead(b *testing.B) {
	inst := unitstest.Require(b)
	m := unitstest.Connect(b, inst)
	ctx := context.Background()
	name := fmt.Sprintf("agent-fleet-bench-read-%d.service", time.Now().UnixNano())
	unitstest.Cleanup(b, m, name)
	_, err := m.StartService(ctx, units.ServiceSpec{Name: name, Argv: []string{"/bin/sleep", "300"}, Type: units.ServiceExec, MaxRuntime: time.Minute})
	require.NoError(b, err)
	for b.Loop() {
		st, err := m.Unit(ctx, name)
		if err != nil || st.MainPID == 0 || st.ControlGroup == "" || st.InvocationID == "" {
			b.Fatalf("%+v %v", st, err)
		}
	}
}
