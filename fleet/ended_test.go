package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// A record made terminal owes its manager exactly one notice, recorded in
// the same write; a later write of the ended record owes nothing more.
// Delivery composes the text and control once: an absent manager leaves
// the notice owed (counted), a later attempt sends the very same message,
// and once delivered nothing is owed; a refusal for good is not retried.
func TestEndedNoticeIsOwedOnceAndSentVerbatim(t *testing.T) {
	ctx := context.Background()
	path := registryPath(t)
	reg := openTestRegistry(t, path, newTestClock())
	logPath := filepath.Join(t.TempDir(), "w1.log")
	require.NoError(t, os.WriteFile(logPath, []byte("one\ntwo\nthree\n"), 0o600))
	w := &Worker{ID: "w1", Kind: "exec", Manager: "boss", FirstManager: "boss", LogPath: logPath}
	require.NoError(t, reg.Reserve(ctx, w))
	_, err := reg.Update(ctx, w.ID, w.RunID, func(r *Worker) error { r.State = StateRunning; return nil })
	require.NoError(t, err)
	owed, err := reg.OwedNotices(ctx, NoticeFilter{})
	require.NoError(t, err)
	require.Empty(t, owed, "a live worker owes nothing")

	_, err = reg.Update(ctx, w.ID, w.RunID, func(r *Worker) error {
		r.State, r.HasExit, r.ExitCode, r.ExitStatus = StateExited, true, "exited", 3
		return nil
	})
	require.NoError(t, err)
	_, err = reg.Update(ctx, w.ID, w.RunID, func(r *Worker) error { r.StopReason = ""; return nil })
	require.NoError(t, err)
	owed, err = reg.OwedNotices(ctx, NoticeFilter{Manager: "boss"})
	require.NoError(t, err)
	require.Len(t, owed, 1, "one notice per end")
	require.Equal(t, EndedMessageID("w1", w.RunID), owed[0].MessageID)

	var sent []*EndedNotice
	answer := &intercom.SendResult{Code: string(wire.FailSessionNotFound)}
	send := func(_ context.Context, n *EndedNotice) (*intercom.SendResult, error) {
		c := *n
		sent = append(sent, &c)
		return answer, nil
	}
	n, err := DeliverEnded(ctx, reg, NoticeFilter{}, send)
	require.NoError(t, err)
	require.Zero(t, n)
	got, err := reg.EndedNotice(ctx, "w1", w.RunID)
	require.NoError(t, err)
	require.True(t, got.SentAt.IsZero(), "still owed")
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, "agent-fleet: worker w1 (exec) exited with status 3 after 0s.\nLast lines of its log:\n  one\n  two\n  three\n"+
		"More: agent-fleet status w1, agent-fleet logs w1 (agent_fleet: action status or logs).", got.Text)
	var c struct {
		Type    string `json:"type"`
		Version int    `json:"version"`
		Data    Ended  `json:"data"`
	}
	require.NoError(t, json.Unmarshal(got.Control, &c))
	require.Equal(t, EndedControlType, c.Type)
	require.Equal(t, EndExited, c.Data.How)
	require.Equal(t, 3, *c.Data.ExitStatus)

	// The log changed meanwhile: the resend is still the first text.
	require.NoError(t, os.WriteFile(logPath, []byte("other\n"), 0o600))
	answer = &intercom.SendResult{OK: true, Delivered: true}
	n, err = DeliverEnded(ctx, reg, NoticeFilter{ID: "w1"}, send)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Len(t, sent, 2)
	require.Equal(t, sent[0].Text, sent[1].Text)
	require.Equal(t, sent[0].MessageID, sent[1].MessageID)
	require.JSONEq(t, string(sent[0].Control), string(sent[1].Control))
	owed, err = reg.OwedNotices(ctx, NoticeFilter{})
	require.NoError(t, err)
	require.Empty(t, owed)
	n, err = DeliverEnded(ctx, reg, NoticeFilter{}, send)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Len(t, sent, 2, "nothing is sent twice")

	// A refusal for good (not the manager's absence) is not retried; an
	// error from the sender leaves it owed.
	w2 := &Worker{ID: "w2", Kind: "exec", Manager: "boss"}
	require.NoError(t, reg.Reserve(ctx, w2))
	_, err = reg.Update(ctx, w2.ID, w2.RunID, func(r *Worker) error { r.State = StateFailed; r.LastError = "boom"; return nil })
	require.NoError(t, err)
	_, err = DeliverEnded(ctx, reg, NoticeFilter{}, func(context.Context, *EndedNotice) (*intercom.SendResult, error) {
		return nil, errors.New("no broker")
	})
	require.NoError(t, err)
	got, err = reg.EndedNotice(ctx, "w2", w2.RunID)
	require.NoError(t, err)
	require.True(t, got.SentAt.IsZero())
	require.Equal(t, "no broker", got.LastError)
	require.True(t, strings.HasPrefix(got.Text, "agent-fleet: worker w2 (exec) failed: boom after "), got.Text)
	answer = &intercom.SendResult{Code: string(wire.FailInvalidMessage), Reason: "Invalid message format"}
	_, err = DeliverEnded(ctx, reg, NoticeFilter{}, send)
	require.NoError(t, err)
	got, err = reg.EndedNotice(ctx, "w2", w2.RunID)
	require.NoError(t, err)
	require.False(t, got.SentAt.IsZero(), "given up")
	require.Contains(t, got.LastError, "refused: INVALID_MESSAGE")
}

// EndOf names each kind of end a wait and a notice report.
func TestEndOf(t *testing.T) {
	for _, c := range []struct {
		w    Worker
		want string
	}{
		{Worker{State: StateRunning}, ""},
		{Worker{State: StateExited, HasExit: true, ExitCode: "exited"}, EndExited},
		{Worker{State: StateExited, HasExit: true, ExitCode: "killed", ExitStatus: 9}, EndKilled},
		{Worker{State: StateExited, HasExit: true, ExitCode: "killed", ExitStatus: 15, StopReason: StopMaxRuntime}, EndMaxRuntime},
		{Worker{State: StateStopped, StopReason: "manager-requested"}, EndStopped},
		{Worker{State: StateStopped, StopReason: "lease-expired"}, EndLeaseExpired},
		{Worker{State: StateFailed, StopReason: "manager-requested"}, EndFailed},
		{Worker{State: StateLost}, EndLost},
	} {
		require.Equal(t, c.want, EndOf(&c.w), "%+v", c.w)
	}
}

// An ended notice is told by its control, or by its id where a TypeScript
// broker dropped the control; it renews no lease: the activity recorder
// leaves it alone and checks the next ordinary message.
func TestEndedNoticeIsNoActivity(t *testing.T) {
	parse := func(raw string) *wire.MessageInfo {
		t.Helper()
		m, err := wire.ParseMessage([]byte(raw))
		require.NoError(t, err)
		return m
	}
	byControl := parse(`{"id":"m1","timestamp":1,"content":{"text":"ended","control":{"type":"` + EndedControlType + `","version":1}}}`)
	byID := parse(`{"id":"` + EndedMessageID("w1", "0123456789ab") + `","timestamp":1,"content":{"text":"ended"}}`)
	plain := parse(`{"id":"m2","timestamp":1,"content":{"text":"progress"}}`)
	require.True(t, IsEndedNotice(byControl))
	require.True(t, IsEndedNotice(byID))
	require.False(t, IsEndedNotice(plain))

	seen := make(chan string, 8)
	rec := StartActivityRecorder(ActivityConfig{Paths: intercom.NewPaths(t.TempDir()), Manager: "boss",
		Recorded: func(from, _ string, _ error) { seen <- from }})
	rec.OnMessage(&intercom.InboundMessage{From: wire.SessionInfo{ID: "w1"}, Message: byID})
	rec.OnMessage(&intercom.InboundMessage{From: wire.SessionInfo{ID: "w2"}, Message: plain})
	require.Equal(t, "w2", <-seen)
	rec.Close() // after the checks in flight: anything of w1 would be in seen now
	close(seen)
	for from := range seen {
		require.NotEqual(t, "w1", from, "an ended notice was taken for activity")
	}
}

// A notice's text is stored by the first claim that brings one: a
// deliverer that read the notice before another composed it keeps the
// first text; a held claim keeps a second deliverer out.
func TestNoticeClaimStoresTheFirstText(t *testing.T) {
	ctx := context.Background()
	reg := openTestRegistry(t, registryPath(t), newTestClock())
	w := &Worker{ID: "w1", Kind: "exec", Manager: "boss"}
	require.NoError(t, reg.Reserve(ctx, w))
	_, err := reg.Update(ctx, w.ID, w.RunID, func(r *Worker) error { r.State = StateStopped; return nil })
	require.NoError(t, err)

	now := time.Now()
	claimed, err := reg.claimNotice(ctx, "w1", w.RunID, now, "first", []byte(`{"n":1}`))
	require.NoError(t, err)
	require.True(t, claimed)
	claimed, err = reg.claimNotice(ctx, "w1", w.RunID, now, "second", []byte(`{"n":2}`))
	require.NoError(t, err)
	require.False(t, claimed, "held by the first deliverer")
	require.NoError(t, reg.noticeOutcome(ctx, "w1", w.RunID, false, "manager away", now))

	claimed, err = reg.claimNotice(ctx, "w1", w.RunID, now, "second", []byte(`{"n":2}`))
	require.NoError(t, err)
	require.True(t, claimed, "released by its outcome")
	got, err := reg.EndedNotice(ctx, "w1", w.RunID)
	require.NoError(t, err)
	require.Equal(t, "first", got.Text)
	require.JSONEq(t, `{"n":1}`, string(got.Control))
}
