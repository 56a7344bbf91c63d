package remote

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
)

// roundTrip is err as a client gets it back from host h.
func roundTrip(t *testing.T, err error, extra ...Code) error {
	t.Helper()
	data, merr := json.Marshal(encodeError(err, extra))
	require.NoError(t, merr)
	var we wireError
	require.NoError(t, json.Unmarshal(data, &we))
	return decodeError("h", &we, extra)
}

func TestErrorsCrossAsThemselves(t *testing.T) {
	owner := fmt.Errorf("wrapped: %w", &fleet.OwnerError{ID: "w1", Owner: "boss", Caller: "other", Op: "stop"})
	got := roundTrip(t, owner)
	require.ErrorIs(t, got, fleet.ErrNotOwner)
	var oe *fleet.OwnerError
	require.ErrorAs(t, got, &oe)
	require.Equal(t, fleet.OwnerError{ID: "w1", Owner: "boss", Caller: "other", Op: "stop"}, *oe)
	require.Equal(t, "host h: "+owner.Error(), got.Error())

	spawn := &fleet.SpawnError{ID: "w2", RunID: "0123456789ab", Reason: "exited with status 3 before it was ready", LogTail: []string{"boom"}}
	got = roundTrip(t, spawn)
	require.ErrorIs(t, got, fleet.ErrSpawnFailed)
	var se *fleet.SpawnError
	require.ErrorAs(t, got, &se)
	require.Equal(t, []string{"boom"}, se.LogTail)

	wait := &fleet.WaitError{TimedOut: true, Waiting: []string{"w3"}}
	got = roundTrip(t, wait)
	require.ErrorIs(t, got, fleet.ErrWaitTimeout)
	var we *fleet.WaitError
	require.ErrorAs(t, got, &we)
	require.Equal(t, []string{"w3"}, we.Waiting)

	ended := &fleet.EndedError{ID: "w4", State: fleet.StateExited, Op: "adopt"}
	got = roundTrip(t, ended)
	require.ErrorIs(t, got, fleet.ErrEnded)

	for _, sentinel := range []error{fleet.ErrNotFound, fleet.ErrCleanupIncomplete, fleet.ErrInvalidID, fleet.ErrCommandNotFound, fleet.ErrConflict} {
		got = roundTrip(t, fmt.Errorf("stop w5: %w: details", sentinel))
		require.ErrorIs(t, got, sentinel)
		require.Contains(t, got.Error(), "details")
	}

	plain := roundTrip(t, errors.New("disk on fire"))
	var re *Error
	require.ErrorAs(t, plain, &re)
	require.Equal(t, "", re.Code)
	require.Nil(t, errors.Unwrap(plain))

	own := errors.New("no user manager")
	got = roundTrip(t, fmt.Errorf("%w: dbus", own), Code{Code: "no_systemd", Err: own})
	require.ErrorIs(t, got, own)
}
