package mcpserver

import (
	"fmt"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/teams"
)

// A target shared in several teams is settled by naming the team: the
// advice says so, not "use the full session id" (which was given).
func TestFailureAdviceForAmbiguity(t *testing.T) {
	text := func(err error) string { return failure(err).Content[0].(*mcp.TextContent).Text }
	shared := fmt.Errorf("%w: you and %q share teams alpha, beta2; say which team this message is in (--team NAME, or team in the tools)", teams.ErrTeamChoice, "ann")
	require.Equal(t, shared.Error()+" — call again with team set to one of those teams.", text(shared))
	require.NotContains(t, text(shared), "full session id")
	several := fmt.Errorf("%w: 2 members of your teams are named %q", intercom.ErrAmbiguousTarget, "eve")
	require.Contains(t, text(several), "use the full session id from intercom_list")
}
