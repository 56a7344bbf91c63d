package output

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
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

// A team send that some members missed says so on its error line: not
// "was not delivered" (others got it), and to whom it was not.
func TestPartialTeamSendErrorLine(t *testing.T) {
	res := &intercom.SendResult{To: "team:alpha", Code: "PARTIAL_DELIVERY", Reason: "1 of 3 recipients did not get it: bob (SESSION_NOT_FOUND)",
		Recipients: []intercom.SendResult{{OK: true, To: "ann"}, {To: "bob"}, {OK: true, To: "cat"}}}
	err := DeliveryFailed(`message to "team:alpha"`, NotDelivered(res), res.Code, res.Reason, false)
	require.EqualError(t, err, `message to "team:alpha" was not delivered to every recipient: PARTIAL_DELIVERY: 1 of 3 recipients did not get it: bob (SESSION_NOT_FOUND)`)
	require.Equal(t, "was not delivered", NotDelivered(&intercom.SendResult{To: "ann"}))
}
