package output

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/teams"
)

// A team's size shows for every team, the live count only when a broker
// could tell it (never a sentinel).
func TestNamedTeamsTextCounts(t *testing.T) {
	two := 2
	text := NamedTeamsText([]teams.NamedTeam{
		{Name: "alpha", ManagerSessionID: "ann", MemberCount: 3, Live: &two, Joined: true},
		{Name: "beta", ManagerSessionID: "ben", MemberCount: 2},
	}, CLI)
	require.Equal(t, "- alpha (manager: ann; 2 of 3 members live) [joined]\n- beta (manager: ben; 2 members, live unknown)", text)
}
