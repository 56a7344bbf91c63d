package fleet

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each runtime-dir fix works where it is shown: following it does not
// lead back to the same finding with the same advice.
func TestRuntimeDirFixFitsTheHost(t *testing.T) {
	dirs := func(ds ...string) func(string) bool {
		return func(p string) bool {
			for _, d := range ds {
				if p == d {
					return true
				}
			}
			return false
		}
	}
	const privateFix = `as root, boot a private user manager, which sets it for this shell: eval "$(agent-fleet user-manager start)"`

	_, st, _, fix := runtimeDirCheck("/run/user/0", dirs("/run/user/0"), true, 0)
	require.Equal(t, CheckOK, st)
	require.Empty(t, fix)

	// A container (PID 1 not systemd): no login makes /run/user/0, so
	// exporting it cannot help, unset or set.
	_, st, detail, fix := runtimeDirCheck("", dirs(), true, 0)
	require.Equal(t, CheckWarn, st)
	require.Equal(t, "XDG_RUNTIME_DIR is not set; PID 1 is not systemd, so no login creates /run/user/0", detail)
	require.Equal(t, privateFix, fix)
	_, st, detail, fix = runtimeDirCheck("/run/user/0", dirs(), true, 0)
	require.Equal(t, CheckFail, st)
	require.Equal(t, "/run/user/0 does not exist; PID 1 is not systemd, so no login creates /run/user/0", detail)
	require.Equal(t, privateFix, fix)

	// The login's directory exists (su, sudo): point at it.
	_, st, _, fix = runtimeDirCheck("", dirs("/run/user/1000"), false, 1000)
	require.Equal(t, CheckWarn, st)
	require.Equal(t, "export XDG_RUNTIME_DIR=/run/user/1000", fix)
	_, _, _, fix = runtimeDirCheck("/tmp/gone", dirs("/run/user/1000"), true, 1000)
	require.Equal(t, "export XDG_RUNTIME_DIR=/run/user/1000", fix)

	// A systemd host without a login: a login or lingering makes it.
	_, st, _, fix = runtimeDirCheck("/run/user/1000", dirs(), false, 1000)
	require.Equal(t, CheckFail, st)
	require.Contains(t, fix, "loginctl enable-linger $USER, which creates /run/user/1000")
}

// Lingering where PID 1 is not systemd is nothing to fix.
func TestLingeringDoesNotApplyWithoutSystemdInit(t *testing.T) {
	noLogind := errors.New("exit status 1")
	_, st, detail, fix := lingerVerdict("root", "", noLogind, true)
	require.Equal(t, CheckOK, st)
	require.Contains(t, detail, "does not apply")
	require.Empty(t, fix)

	_, st, _, fix = lingerVerdict("alice", "", noLogind, false)
	require.Equal(t, CheckWarn, st)
	require.Contains(t, fix, "loginctl enable-linger alice")
	_, st, _, fix = lingerVerdict("alice", "no", nil, false)
	require.Equal(t, CheckWarn, st)
	require.Equal(t, "loginctl enable-linger alice", fix)
	_, st, _, _ = lingerVerdict("alice", "yes", nil, false)
	require.Equal(t, CheckOK, st)
}
