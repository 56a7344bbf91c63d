package output

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// A team send's structuredContent has a single send's keys for each
// recipient (message_id, as intercom_send's own result), and leaves out
// what it does not have: no null team or offline list.
func TestTeamSendToolKeys(t *testing.T) {
	res := &intercom.SendResult{OK: true, To: "*", Recipients: []intercom.SendResult{
		{OK: true, To: "ann", TargetID: "ann", MessageID: "m1", Team: "alpha", Delivered: true, Accepted: true},
	}}
	_, structured, failed := SendTool(res, "*")
	require.False(t, failed)
	data, err := json.Marshal(structured)
	require.NoError(t, err)
	require.JSONEq(t, `{"ok":true,"to":"*","recipients":[{"ok":true,"to":"ann","message_id":"m1","team":"alpha"}]}`, string(data))

	res = &intercom.SendResult{OK: false, To: "team:alpha", Team: "alpha", Offline: []string{"amy"}, Recipients: []intercom.SendResult{
		{To: "ann", MessageID: "m2", Code: "SESSION_NOT_FOUND", Reason: "Session not found"},
	}}
	_, structured, failed = SendTool(res, "team:alpha")
	require.True(t, failed)
	data, err = json.Marshal(structured)
	require.NoError(t, err)
	require.JSONEq(t, `{"ok":false,"to":"team:alpha","team":"alpha","offline":["amy"],
		"recipients":[{"ok":false,"to":"ann","message_id":"m2","code":"SESSION_NOT_FOUND","reason":"Session not found"}]}`, string(data))
}

// A failure whose send may have arrived says so in its object (the CLI's
// --json and the MCP tools' structuredContent alike), beside the text.
func TestFailureSaysOutcomeUnknown(t *testing.T) {
	unknown := Failure(fmt.Errorf("%w (message m1)", intercom.ErrOutcomeUnknown))
	require.Equal(t, true, unknown["outcome_unknown"])
	require.Equal(t, false, unknown["ok"])
	require.NotContains(t, Failure(intercom.ErrTargetNotFound), "outcome_unknown", "not delivered: nothing unknown")

	rs := recipientsTool([]intercom.SendResult{{To: "bob", Code: intercom.CodeOutcomeUnknown, Reason: "cut"}, {To: "cat", Code: "SESSION_NOT_FOUND"}})
	require.Equal(t, true, rs[0]["outcome_unknown"], "a team send's recipient too")
	require.NotContains(t, rs[1], "outcome_unknown")
	err := DeliveryFailed(`message to "team:alpha"`, "was not delivered to every recipient", intercom.CodeOutcomeUnknown, "1 of 2 recipients may or may not have it: bob (OUTCOME_UNKNOWN)", false)
	require.ErrorIs(t, err, intercom.ErrOutcomeUnknown, "exit 8")
	require.Contains(t, err.Error(), "may or may not have reached them")
}
