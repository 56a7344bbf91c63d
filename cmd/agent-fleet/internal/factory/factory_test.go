package factory

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/units"
)

func withEnv(kv map[string]string) *Factory {
	f := New(&IOStreams{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard}, "test")
	f.Getenv = func(k string) string { return kv[k] }
	return f
}

// The configuration comes from the factory's environment, read when asked
// and refused with the variable named when malformed.
func TestEnvironmentConfiguration(t *testing.T) {
	t.Parallel()
	f := withEnv(map[string]string{"PI_CODING_AGENT_DIR": "/srv/agents", "AGENT_INTERCOM_SESSION_ID": "alice",
		AskTimeoutEnv: "90000", AskWaitEnv: "999999", EnvLease: "45m"})
	p, id, err := f.Identity()
	require.NoError(t, err)
	require.Equal(t, intercom.NewPaths("/srv/agents"), p)
	require.Equal(t, "alice", id.SessionID)
	require.Equal(t, 90*time.Second, f.AskTTL())
	require.Equal(t, intercom.MaxAskWait, f.AskWait(), "capped at the ask limit")
	ttl, err := f.BrokerAskTTL()
	require.NoError(t, err)
	require.Equal(t, 90*time.Second, ttl)
	policy, err := f.LeasePolicy()
	require.NoError(t, err)
	require.Equal(t, 45*time.Minute, policy.Default)

	bad := withEnv(map[string]string{AskTimeoutEnv: "soon", EnvLeaseGrace: "-1m", "AGENT_INTERCOM_SESSION_ID": "no spaces"})
	require.Equal(t, intercom.DefaultAskTTL, bad.AskTTL(), "a session keeps the default")
	_, err = bad.BrokerAskTTL()
	var ue *UsageError
	require.ErrorAs(t, err, &ue, "the broker refuses it")
	require.Contains(t, err.Error(), AskTimeoutEnv)
	_, err = bad.LeasePolicy()
	require.ErrorAs(t, err, &ue)
	require.Contains(t, err.Error(), EnvLeaseGrace)
	_, _, err = bad.Identity()
	require.ErrorAs(t, err, &ue)
	require.ErrorIs(t, err, intercom.ErrInvalidSessionID)
}

// Off Linux the fleet answers unsupported before touching anything, and
// says what works instead.
func TestWorkerPlatform(t *testing.T) {
	t.Parallel()
	f := withEnv(nil)
	f.GOOS = "darwin"
	err := f.RequireWorkerPlatform()
	require.ErrorIs(t, err, units.ErrUnsupported)
	require.Contains(t, err.Error(), "this is darwin; the broker, the intercom CLI verbs and the MCP intercom tools work here")
	_, err = f.FleetAs(t.Context(), intercom.NewPaths(t.TempDir()), "caller")
	require.ErrorIs(t, err, units.ErrUnsupported)
	f.GOOS = "linux"
	require.NoError(t, f.RequireWorkerPlatform())
}

// A user manager that cannot be reached is ErrNoSystemd (exit 6), with
// the reason.
func TestFleetWithoutAUserManager(t *testing.T) {
	t.Parallel()
	f := withEnv(map[string]string{"PI_CODING_AGENT_DIR": t.TempDir(), "DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent/bus"})
	_, err := f.Fleet(t.Context())
	require.ErrorIs(t, err, ErrNoSystemd)
	require.Contains(t, err.Error(), "/nonexistent/bus")
}

func TestBuildVersion(t *testing.T) {
	t.Parallel()
	require.Equal(t, "v1.2.3", BuildVersion("v1.2.3"), "the linked version wins")
	require.NotEmpty(t, BuildVersion(""))
}
