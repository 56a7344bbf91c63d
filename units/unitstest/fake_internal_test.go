package unitstest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSlicePath(t *testing.T) {
	require.Equal(t, "/agent.slice/agent-fleet.slice", slicePath("agent-fleet.slice"))
	require.Equal(t, "/app.slice", slicePath("app.slice"))
	require.Equal(t, "", slicePath("-.slice"))
}
