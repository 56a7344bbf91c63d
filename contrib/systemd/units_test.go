package systemd

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBinaryReadsBackWhatRenderWrote(t *testing.T) {
	for _, bin := range []string{"/usr/local/bin/agent-fleet", "/opt/my tools/agent-fleet", `/odd/100%/$HOME/"q"\b/agent-fleet`, "/tab\tdir/agent-fleet"} {
		files := Render(Params{Binary: bin, AgentDir: "/home/u/.pi/agent", BrokerSocket: "/home/u/.pi/agent/intercom/broker.sock"})
		for _, name := range []string{BrokerService, CleanupService, NodeService} {
			got, ok := Binary(files[name])
			require.True(t, ok, name)
			require.Equal(t, bin, got, "%s of %q", name, files[name])
		}
	}
	_, ok := Binary([]byte("[Unit]\nDescription=x\n"))
	require.False(t, ok)
}

func TestEveryTemplateIsRenderedAndEnabledUnitsInstall(t *testing.T) {
	files := Render(Params{Binary: "/b/agent-fleet", AgentDir: "/a", BrokerSocket: "/a/intercom/broker.sock"})
	require.Len(t, files, len(NodeNames))
	for _, name := range append(Enabled, NodeEnabled...) {
		require.Contains(t, string(files[name]), "\n[Install]\nWantedBy=", name)
	}
	require.NotContains(t, string(files[BrokerService]), "[Install]", "the socket starts the broker")
	for name, data := range files {
		require.NotRegexp(t, `@[A-Z_]+@`, string(data), "%s has an unfilled placeholder", name)
	}
}
