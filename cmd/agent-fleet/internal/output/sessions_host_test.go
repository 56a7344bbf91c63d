package output

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
)

func TestSessionsTableHostColumn(t *testing.T) {
	res := &intercom.ListResult{Sessions: []intercom.SessionView{
		{ID: "alice", Cwd: "/a", Model: "m"},
		{ID: "bob", Cwd: "/b", Model: "m", Origin: "remote", RemoteHostID: "build-1"},
	}}
	lines := strings.Split(HostSessionsText(res, "machine", CLI, "laptop"), "\n")
	require.Len(t, lines, 3)
	require.Regexp(t, `^HOST +SESSION +MODEL +STATUS +CWD$`, lines[0])
	require.Regexp(t, `^laptop +alice +m +- +/a$`, lines[1])
	require.Regexp(t, `^build-1 +bob +m +- +/b$`, lines[2])

	// No node name: this host's sessions are "local" when another host's
	// are listed, and the column is left out when none are.
	lines = strings.Split(SessionsText(res, "machine", CLI), "\n")
	require.Regexp(t, `^local +alice `, lines[1])
	res.Sessions = res.Sessions[:1]
	require.Regexp(t, `^SESSION +MODEL`, SessionsText(res, "machine", CLI))

	// A model's text stays the adapters' lines.
	require.Equal(t, "- alice - /a (m)", SessionsText(res, "machine", Tool))
}

// With nobody else to list, people are told the list is of their scope
// (sessions of other scopes are neither listed nor counted); a model gets
// the adapters' intercom_list text.
func TestSessionsTextWhenNoneIsListed(t *testing.T) {
	none := &intercom.ListResult{}
	require.Equal(t, "No other session is connected in this session's scope.", SessionsText(none, "machine", CLI))
	require.Equal(t, "No intercom sessions connected.", SessionsText(none, "machine", Tool))
}
