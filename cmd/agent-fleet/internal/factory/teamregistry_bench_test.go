package factory

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// BenchmarkWorkersViewRefresh is the work each registry write of a process
// leaves to the change hook: workers.json rewritten from the live workers.
func BenchmarkWorkersViewRefresh(b *testing.B) {
	for _, live := range []int{1, 50, 200} {
		b.Run(fmt.Sprintf("live=%d", live), func(b *testing.B) {
			ctx := context.Background()
			p := intercom.NewPaths(b.TempDir())
			reg, err := fleet.OpenRegistry(ctx, fleet.RegistryPath(p))
			require.NoError(b, err)
			defer reg.Close()
			for i := range live {
				require.NoError(b, reg.Reserve(ctx, &fleet.Worker{ID: fmt.Sprintf("w%d", i), Kind: "exec", Manager: "boss", Role: "bench"}))
			}
			reg.AwaitChangeHook()
			b.ReportAllocs()
			for b.Loop() {
				refreshWorkersView(ctx, reg)
			}
		})
	}
}
