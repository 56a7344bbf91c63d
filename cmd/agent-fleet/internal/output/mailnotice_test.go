package output

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// A mail notice says how many messages came from whom and how many are
// asks, quotes only the first one's opening words, escaped, and says where
// to read and answer them.
func TestMailNoticeText(t *testing.T) {
	ask := intercom.MessageView{From: intercom.Sender{ID: "boss-1", Name: "Boss"}, MessageID: "m1", Text: "how many files?", ExpectsReply: true}
	msg := intercom.MessageView{From: intercom.Sender{ID: "w1"}, MessageID: "m2", Text: "done\n\x1b[2Jwiped"}
	require.Equal(t, `New intercom ask from Boss: "how many files?" — read it with intercom_pending, answer with intercom_reply.`,
		MailNoticeText([]intercom.MessageView{ask}, ToolReader))
	require.Equal(t, `New intercom message from w1: "done ^[[2Jwiped" — read it with agent-fleet intercom pending.`,
		MailNoticeText([]intercom.MessageView{msg}, CLIReader))
	require.Equal(t, `3 new intercom messages from w1 (2), Boss; 1 is an ask — first: "done ^[[2Jwiped" — read them with intercom_pending, answer with intercom_reply.`,
		MailNoticeText([]intercom.MessageView{msg, ask, msg}, ToolReader))
	n := NewMailNotice([]intercom.MessageView{msg, ask, msg}, ToolReader)
	require.Equal(t, MailNotice{Text: n.Text, Messages: 3, Asks: 1, From: []string{"w1", "boss-1"}, IDs: []string{"m2", "m1", "m2"}}, n)
	require.Empty(t, MailNoticeText(nil, ToolReader))
}
