package units

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestServiceSpecDefaults(t *testing.T) {
	s, err := ServiceSpec{Name: "agent-fleet-broker-0123456789ab.service", Argv: []string{"/bin/agent-fleet", "broker"},
		LogFile: "/tmp/broker.log"}.WithDefaults()
	require.NoError(t, err)
	require.Equal(t, ServiceExec, s.Type)
	require.Equal(t, DefaultSlice, s.Slice)
	require.Equal(t, CollectInactiveOrFailed, s.Collect)
	require.Equal(t, s.Name, s.Description)
	require.Equal(t, Output("append:/tmp/broker.log"), s.Stdout)
	require.Equal(t, Output("append:/tmp/broker.log"), s.Stderr)
	require.Empty(t, s.NotifyAccess)

	s, err = ServiceSpec{Name: "agent-fleet-worker-w1-1a2b.service", Argv: []string{"/bin/agent-fleet"}, Type: ServiceNotify,
		Stderr: OutputNull, LogFile: "/tmp/w.log"}.WithDefaults()
	require.NoError(t, err)
	require.Equal(t, "main", s.NotifyAccess)
	require.Equal(t, OutputNull, s.Stderr, "an explicit stream wins over LogFile")

	for _, bad := range []ServiceSpec{
		{Name: "x@y.service", Argv: []string{"/bin/true"}},
		{Name: strings.Repeat("a", 250) + ".service", Argv: []string{"/bin/true"}},
		{Name: "x.service", Argv: []string{"/bin/true"}, Type: "forking"},
		{Name: "x.service", Argv: []string{"/bin/true"}, NotifyAccess: "none"},
		{Name: "x.service", Argv: []string{"/bin/true"}, Collect: "never"},
		{Name: "x.service", Argv: []string{"/bin/true"}, StopTimeout: -time.Second},
		{Name: "x.service", Argv: []string{"/bin/true"}, WorkingDirectory: "rel"},
		{Name: "x.service", Argv: []string{"/bin/true"}, Stdout: AppendTo("rel.log")},
		{Name: "x.service", Argv: []string{"/bin/true"}, StopPost: []string{"true"}},
		{Name: "x.service", Argv: []string{"/bin/true"}, ExitRecord: "rel"},
	} {
		_, err := bad.WithDefaults()
		require.ErrorIs(t, err, ErrInvalidSpec, "%+v", bad)
	}
}

func TestParseVersion(t *testing.T) {
	for raw, major := range map[string]int{"252.38-1~deb12u1": 252, "v256.7": 256, "systemd 245 (245.4-4ubuntu3)": 245, "junk": 0} {
		require.Equal(t, Version{Raw: raw, Major: major}, ParseVersion(raw))
	}
}

func TestParseExitRecord(t *testing.T) {
	r, err := parseExitRecord("SERVICE_RESULT=exit-code\nEXIT_CODE=exited\nEXIT_STATUS=3\nINVOCATION_ID=ab\n")
	require.NoError(t, err)
	require.Equal(t, ExitRecord{Result: "exit-code", Code: "exited", Status: "3", InvocationID: "ab"}, r)
	n, ok := r.ExitStatus()
	require.True(t, ok)
	require.Equal(t, 3, n)
	_, ok = ExitRecord{Result: "signal", Code: "killed", Status: "KILL"}.ExitStatus()
	require.False(t, ok)
	_, err = parseExitRecord("")
	require.ErrorIs(t, err, os.ErrNotExist)
	for _, partial := range []string{"SERVICE_RESULT=exit-code\nEXIT_CODE=exited\n", "SERVICE_RESULT=exit-code\nEXIT_CODE=exited\nEXIT_STATUS=3\nINVOCATION_ID=ab"} {
		_, err = parseExitRecord(partial)
		require.ErrorIs(t, err, os.ErrNotExist, "a record still being written is not there yet: %q", partial)
	}
	r, err = parseExitRecord("SERVICE_RESULT=exit-code\nEXIT_CODE=exited\nEXIT_STATUS=3\nINVOCATION_ID=\n")
	require.NoError(t, err, "an empty last value is complete")
	require.Equal(t, "exit-code", r.Result)
	_, err = ReadExitRecord(filepath.Join(t.TempDir(), "none"))
	require.Error(t, err)
}

func TestResolveBus(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

	rt := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(rt, "bus"))
	require.NoError(t, err)
	defer ln.Close()

	b, err := ResolveBus(env(map[string]string{"XDG_RUNTIME_DIR": rt}))
	require.NoError(t, err)
	require.Equal(t, BusAddress{Address: "unix:path=" + filepath.Join(rt, "bus"), Source: SourceRuntimeDir}, b)

	b, err = ResolveBus(env(map[string]string{"XDG_RUNTIME_DIR": "/nowhere", "DBUS_SESSION_BUS_ADDRESS": "unix:path=" + filepath.Join(rt, "bus")}))
	require.NoError(t, err)
	require.Equal(t, SourceBusEnv, b.Source, "the variable wins")

	b, err = ResolveBus(env(map[string]string{"DBUS_SESSION_BUS_ADDRESS": "unix:abstract=/tmp/dbus-x,guid=1"}))
	require.NoError(t, err, "non-path addresses are taken as given")
	require.Equal(t, "unix:abstract=/tmp/dbus-x,guid=1", b.Address)

	// Nothing: a typed error that says what is missing and how to fix it.
	_, err = ResolveBus(env(nil))
	require.ErrorIs(t, err, ErrNoUserBus)
	var nb *NoUserBusError
	require.ErrorAs(t, err, &nb)
	for _, want := range []string{"DBUS_SESSION_BUS_ADDRESS and XDG_RUNTIME_DIR are both unset", "dbus-user-session",
		"never starts a bus with dbus-launch"} {
		require.Contains(t, err.Error(), want)
	}
	require.Equal(t, NoSystemdInit(), nb.NoSystemdInit)

	empty := t.TempDir()
	_, err = ResolveBus(env(map[string]string{"XDG_RUNTIME_DIR": empty}))
	require.ErrorIs(t, err, ErrNoUserBus)
	require.Contains(t, err.Error(), filepath.Join(empty, "bus")+" does not exist")

	_, err = ResolveBus(env(map[string]string{"DBUS_SESSION_BUS_ADDRESS": "unix:path=" + filepath.Join(empty, "bus")}))
	require.ErrorIs(t, err, ErrNoUserBus)
	require.Contains(t, err.Error(), "points at "+filepath.Join(empty, "bus"))
}

func TestValidUnitName(t *testing.T) {
	long := strings.Repeat("a", 255-len(".service")) + ".service"
	for name, want := range map[string]bool{
		"agent-fleet-worker-w1-0123456789ab.service": true,
		"a:b_c.d-e.service":                          true,
		long:                                         true,
		"a" + long:                                   false, // 256 bytes
		".service":                                   false,
		"x@1.service":                                false, // a template instance
		"x.socket":                                   false,
		"x y.service":                                false,
		"x.service\n":                                false,
		"":                                           false,
	} {
		require.Equal(t, want, ValidUnitName(name), "%q", name)
	}
}

// The no-bus message is a few short lines, and its fix fits the host: a
// login or lingering where PID 1 is systemd, the private manager of
// `agent-fleet user-manager start` where it is not (lingering cannot work
// there).
func TestNoUserBusMessageFitsTheHost(t *testing.T) {
	for _, e := range []*NoUserBusError{
		{}, {NoSystemdInit: true}, {RuntimeDir: "/run/user/1000", Missing: "/run/user/1000/bus"},
		{Hint: "/run/user/1000/bus", NoSystemdInit: true},
	} {
		msg := e.Error()
		lines := strings.Split(msg, "\n")
		require.GreaterOrEqual(t, len(lines), 4, msg)
		for _, l := range lines {
			require.LessOrEqual(t, len(l), 100, "a line of at most 100 characters: %q", l)
		}
		require.True(t, strings.HasPrefix(msg, e.Reason()+".\n"), msg)
		if e.NoSystemdInit {
			require.Contains(t, msg, "PID 1 is not systemd here")
			require.Contains(t, msg, `eval "$(agent-fleet user-manager start)"`)
			require.NotContains(t, msg, "loginctl enable-linger $USER", "lingering cannot work without systemd as PID 1")
		} else {
			require.Contains(t, msg, "loginctl enable-linger $USER")
			require.Contains(t, msg, "export XDG_RUNTIME_DIR=/run/user/$(id -u)")
			require.NotContains(t, msg, "user-manager start")
		}
		if e.Hint != "" {
			require.Contains(t, msg, "a user bus exists at /run/user/1000/bus: export XDG_RUNTIME_DIR=/run/user/1000")
		}
	}
}
