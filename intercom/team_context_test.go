package intercom_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Messages carry their team (content.team) through a real broker; asks in
// two teams need an exact selector; a reply keeps the original team and
// cannot change it; a context id answers any message.
func TestTeamContextsOfRepliesAndAsks(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	planner := open(t, p, "planner", "Planner")
	lead := open(t, p, "lead", "Lead")
	front := open(t, p, "front", "Front")
	for team, asker := range map[string]*intercom.Session{"alpha": planner, "beta": lead} {
		res, err := asker.Ask(ctx, intercom.AskRequest{To: "front", Text: "q " + team, Team: team, Wait: 50 * time.Millisecond})
		require.NoError(t, err)
		require.True(t, res.Pending, "%+v", res)
		require.Equal(t, team, res.Team)
	}
	sent, err := planner.Send(ctx, intercom.SendRequest{To: "front", Text: "fyi"})
	require.NoError(t, err)
	require.True(t, sent.OK)

	pend, err := front.Pending(ctx, intercom.PendingRequest{})
	require.NoError(t, err)
	require.Len(t, pend.Asks, 2)
	if pend.Asks[0].Team != "alpha" {
		pend.Asks[0], pend.Asks[1] = pend.Asks[1], pend.Asks[0]
	}
	require.Equal(t, []string{"alpha", "beta"}, []string{pend.Asks[0].Team, pend.Asks[1].Team})
	require.Len(t, pend.Unread, 3)
	fyi := pend.Unread[2]
	require.Equal(t, "fyi", fyi.Text)
	require.Equal(t, "", fyi.Team)
	require.Regexp(t, `^ctx-[A-Za-z0-9_-]{43}$`, fyi.ContextID)

	_, err = front.Reply(ctx, intercom.ReplyRequest{Text: "which?"})
	require.ErrorIs(t, err, intercom.ErrAmbiguousTarget, "two asks in two teams need a selector")
	_, err = front.Reply(ctx, intercom.ReplyRequest{Text: "wrong team", AskID: pend.Asks[0].AskID, Team: "beta"})
	require.ErrorIs(t, err, intercom.ErrInvalidInput)
	r, err := front.Reply(ctx, intercom.ReplyRequest{Text: "answer alpha", AskID: pend.Asks[0].AskID})
	require.NoError(t, err)
	require.True(t, r.OK)
	require.Equal(t, "alpha", r.Team, "inherited")
	_, err = front.Reply(ctx, intercom.ReplyRequest{Text: "stale", AskID: pend.Asks[0].AskID})
	require.ErrorIs(t, err, intercom.ErrNoPendingAsk)
	_, err = front.Reply(ctx, intercom.ReplyRequest{Text: "stale context", ContextID: pend.Asks[0].ContextID})
	require.ErrorIs(t, err, intercom.ErrNoPendingAsk, "an answered ask's context is not open any more")
	r, err = front.Reply(ctx, intercom.ReplyRequest{Text: "answer beta", ContextID: pend.Asks[1].ContextID})
	require.NoError(t, err)
	require.Equal(t, "beta", r.Team)
	_, err = front.Reply(ctx, intercom.ReplyRequest{Text: "x", ContextID: "ctx-unknown"})
	require.ErrorIs(t, err, intercom.ErrNoPendingAsk)
	_, err = front.Reply(ctx, intercom.ReplyRequest{Text: "x", ContextID: fyi.ContextID, To: "outsider"})
	require.ErrorIs(t, err, intercom.ErrNoPendingAsk)
	r, err = front.Reply(ctx, intercom.ReplyRequest{Text: "ack", ContextID: fyi.ContextID})
	require.NoError(t, err)
	require.True(t, r.OK)
	require.Empty(t, r.ReplyTo, "an ordinary message is answered by an ordinary one")
	require.Empty(t, r.Team)

	back, err := planner.Pending(ctx, intercom.PendingRequest{})
	require.NoError(t, err)
	got := map[string]string{}
	for _, m := range back.Unread {
		got[m.Text] = m.Team
	}
	require.Equal(t, map[string]string{"answer alpha": "alpha", "ack": ""}, got)
	back, err = lead.Pending(ctx, intercom.PendingRequest{})
	require.NoError(t, err)
	require.Len(t, back.Unread, 1)
	require.Equal(t, "beta", back.Unread[0].Team)
}

// A reply in another team does not answer a waiting ask (the Codex
// adapter's rule): it lands in the inbox, and the ask stays open.
func TestAReplyInAnotherTeamDoesNotAnswerTheAsk(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	planner := open(t, p, "planner", "Planner")
	front := intercomtest.Register(t, p, "front", intercomtest.RegisterOptions{Name: "Front"})
	type asked struct {
		res *intercom.AskResult
		err error
	}
	done := make(chan asked, 1)
	go func() {
		res, err := planner.Ask(ctx, intercom.AskRequest{To: "front", Text: "question", Team: "alpha", Wait: 500 * time.Millisecond})
		done <- asked{res, err}
	}()
	ask := front.Expect(wire.TypeMessage)
	front.Ack(ask.DeliveryID)
	inBeta := func(m *wire.Message) { m.Team = "beta" }
	front.Send("planner", intercomtest.Message("wrong-reply", "beta answer", intercomtest.ReplyTo(ask.MessageID), inBeta))
	front.Expect(wire.TypeDeliveryAccepted)
	front.Expect(wire.TypeDelivered)
	got := <-done
	require.NoError(t, got.err)
	require.False(t, got.res.Replied, "%+v", got.res)
	require.True(t, got.res.Pending)
	pend, _ := planner.Pending(ctx, intercom.PendingRequest{})
	require.Len(t, pend.Unread, 1)
	require.Equal(t, "beta answer", pend.Unread[0].Text)
	require.Equal(t, "beta", pend.Unread[0].Team)
}
