package demo

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/units"
)

// The demo says why no user manager answered in one clause, never a
// sentence of the advice cut in half.
func TestFirstClause(t *testing.T) {
	nb := &units.NoUserBusError{NoSystemdInit: true}
	wrapped := fmt.Errorf("connect: %w", nb)
	require.Equal(t, "no user D-Bus bus: DBUS_SESSION_BUS_ADDRESS and XDG_RUNTIME_DIR are both unset", firstClause(wrapped))
	require.Contains(t, nb.Error(), "packages; agent-fleet user-manager stop", "the advice that was cut mid-sentence")
	require.Equal(t, "the user manager did not answer", firstClause(errors.New("the user manager did not answer; try again.\nmore")))
}
