package demo

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// The demo says why no user manager answered in one clause, never a
// sentence of the advice cut in half (the missing user bus's error is a
// reason line, then advice with "; " in it).
func TestFirstClause(t *testing.T) {
	noBus := fmt.Errorf("%w", errors.New("no user D-Bus bus: DBUS_SESSION_BUS_ADDRESS and XDG_RUNTIME_DIR are both unset.\n"+
		"Workers need a running systemd user manager with its user bus.\n"+
		"(it needs the systemd and dbus-user-session packages; agent-fleet user-manager stop ends it)"))
	require.Equal(t, "no user D-Bus bus: DBUS_SESSION_BUS_ADDRESS and XDG_RUNTIME_DIR are both unset", firstClause(noBus))
	require.Equal(t, "the user manager did not answer", firstClause(errors.New("the user manager did not answer; try again.\nmore")))
}
