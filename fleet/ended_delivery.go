package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// NoticeSender sends a composed notice to its manager as the notice's
// worker (n.ID's session) with n.MessageID, n.Text and n.ControlEnvelope.
// It returns the send's outcome, or an error when it cannot tell whether
// anything was sent; both leave the notice owed unless the outcome is a
// delivery or a refusal for good.
type NoticeSender func(ctx context.Context, n *EndedNotice) (*intercom.SendResult, error)

// SessionSender sends notices through ops, a session that is the worker's
// own: the shim's, while it still holds it.
func SessionSender(ops intercom.Ops) NoticeSender {
	return func(ctx context.Context, n *EndedNotice) (*intercom.SendResult, error) {
		return ops.Send(ctx, intercom.SendRequest{To: n.Manager, Text: n.Text, MessageID: n.MessageID, Control: n.ControlEnvelope()})
	}
}

// RegisteringSender sends each notice from a short registration of its
// worker's session id with the broker of p (never starting one: without a
// broker no manager is connected). A manager the broker's local API calls
// disconnected is not tried. An id registered already — a newer run of the
// same worker id, whose shim holds it — is SESSION_ID_IN_USE: that shim
// delivers its id's owed notices itself when it starts.
func RegisteringSender(p intercom.Paths) NoticeSender {
	return func(ctx context.Context, n *EndedNotice) (*intercom.SendResult, error) {
		api := &intercom.LocalAPIClient{Path: p.LocalAPISocket()}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		peer, err := api.Peer(pctx, n.Manager)
		cancel()
		if err == nil && peer != nil && !peer.Connected {
			return &intercom.SendResult{To: n.Manager, Code: string(wire.FailSessionNotFound), Reason: "the manager is not connected"}, nil
		}
		id := intercom.Identity{SessionID: n.ID, Name: n.ID, Model: "agent-fleet", Cwd: "/", PID: os.Getpid(),
			StartedAt: float64(time.Now().UnixMilli()), RuntimeID: intercom.NewMessageID()}
		sess, err := intercom.OpenSession(ctx, intercom.SessionConfig{Paths: p, Identity: id})
		if err != nil {
			return nil, err
		}
		defer sess.Close()
		return sess.Send(ctx, intercom.SendRequest{To: n.Manager, Text: n.Text, MessageID: n.MessageID, Control: n.ControlEnvelope()})
	}
}

// noticeAbsence: the failure is the manager's absence, which ends; the
// notice stays owed.
func noticeAbsence(code string) bool {
	switch wire.FailureCode(code) {
	case wire.FailSessionNotFound, wire.FailRecipientDisconnected, wire.FailDeliveryTimeout:
		return true
	}
	return false
}

// DeliverEnded sends the owed notices f selects, oldest first, each with
// send, and records each outcome; it returns how many reached their
// managers. A notice another deliverer is sending is skipped; one not yet
// composed is composed from its record and log first (and kept so). The
// first error that is not a delivery's own (the registry's) ends it.
func DeliverEnded(ctx context.Context, reg *Registry, f NoticeFilter, send NoticeSender) (int, error) {
	owed, err := reg.OwedNotices(ctx, f)
	if err != nil {
		return 0, err
	}
	delivered := 0
	for _, n := range owed {
		if ctx.Err() != nil {
			return delivered, ctx.Err()
		}
		ok, err := deliverNotice(ctx, reg, n, send)
		if err != nil {
			return delivered, err
		}
		if ok {
			delivered++
		}
	}
	return delivered, nil
}

func deliverNotice(ctx context.Context, reg *Registry, n *EndedNotice, send NoticeSender) (bool, error) {
	// A notice is composed once, by the first attempt, and sent verbatim
	// ever after: composed before the claim (reads only), it is stored by
	// the claim's write unless another attempt stored it first.
	var text string
	var control []byte
	var composeErr error
	if n.Text == "" {
		text, control, composeErr = composeOwed(ctx, reg, n)
	}
	claimed, err := reg.claimNotice(ctx, n.ID, n.RunID, time.Now(), text, control)
	if err != nil || !claimed {
		return false, err
	}
	if composeErr != nil {
		_ = reg.noticeOutcome(context.WithoutCancel(ctx), n.ID, n.RunID, false, composeErr.Error(), time.Now())
		return false, composeErr
	}
	if n.Text == "" {
		if n, err = reg.EndedNotice(ctx, n.ID, n.RunID); err != nil {
			return false, err
		}
	}
	res, err := send(ctx, n)
	now := time.Now()
	wctx := context.WithoutCancel(ctx)
	switch {
	case err != nil:
		return false, reg.noticeOutcome(wctx, n.ID, n.RunID, false, err.Error(), now)
	case res.OK:
		return true, reg.noticeOutcome(wctx, n.ID, n.RunID, true, "", now)
	case noticeAbsence(res.Code):
		return false, reg.noticeOutcome(wctx, n.ID, n.RunID, false, cmp.Or(res.Reason, res.Code), now)
	}
	// Refused for good (a message the broker will never take): retrying
	// would not change that.
	return false, reg.noticeOutcome(wctx, n.ID, n.RunID, true, "refused: "+res.Code+": "+res.Reason, now)
}

// composeOwed composes n's text and control from its worker's record and
// log.
func composeOwed(ctx context.Context, reg *Registry, n *EndedNotice) (text string, control []byte, err error) {
	w, err := reg.GetRun(ctx, n.ID, n.RunID)
	var e Ended
	switch {
	case errors.Is(err, ErrNotFound):
		// Forgotten before its notice went out: say what is known.
		e = Ended{ID: n.ID, RunID: n.RunID, Kind: "exec", Manager: n.Manager, How: "ended", State: "forgotten",
			StartedAt: stamp(n.CreatedAt), EndedAt: stamp(n.CreatedAt), LogTail: []string{}}
	case err != nil:
		return "", nil, err
	default:
		e = EndedOf(w, workerLogTail(ctx, reg, w, endedLogLines))
	}
	data, err := json.Marshal(e)
	if err != nil {
		return "", nil, err
	}
	control, err = json.Marshal(wire.Control{Type: EndedControlType, Version: EndedControlVersion, Data: data})
	if err != nil {
		return "", nil, err
	}
	return e.Text(), control, nil
}

// workerLogTail is the last n lines of w's log (none when it cannot be
// read). A spawn records the log file only once the shim is ready, and
// a command that ended at once may be told of before that: its file, if
// it has one, is the one of its id and run beside reg.
func workerLogTail(ctx context.Context, reg *Registry, w *Worker, n int) []string {
	path := w.LogPath
	if path == "" && reg.Path() != "" {
		path = logFileIn(logDirIn(filepath.Dir(reg.Path())), w.ID, w.RunID)
		if _, err := os.Stat(path); err != nil {
			path = "" // journald keeps it
		}
	}
	if path != "" {
		return tailLines(path, n)
	}
	lines, err := journalTail(ctx, w.Unit, n)
	if err != nil {
		return nil
	}
	return lines
}

// deliverEnded sends the notice of w, which a write of this process just
// made terminal (and any other owed for its id), when the fleet has a
// sender; a manager that is not connected gets it later.
func (f *Fleet) deliverEnded(ctx context.Context, after *Worker) {
	if f.cfg.Notices == nil || after == nil || !after.State.Terminal() {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endedDeliveryBudget)
	defer cancel()
	if _, err := DeliverEnded(dctx, f.cfg.Registry, NoticeFilter{ID: after.ID}, f.cfg.Notices); err != nil {
		f.log.Debug("ended notice not delivered yet", "id", after.ID, "err", err)
	}
}

// endedDeliveryBudget bounds what delivering a notice adds to the
// operation that ended the worker; what is left is delivered later.
const endedDeliveryBudget = 5 * time.Second

// DeliverOwed sends every owed notice whose manager is connected (the
// janitor's run, a holder that just registered); it returns how many went
// out.
func (f *Fleet) DeliverOwed(ctx context.Context, filter NoticeFilter) (int, error) {
	if f.cfg.Notices == nil {
		return 0, nil
	}
	n, err := DeliverEnded(ctx, f.cfg.Registry, filter, f.cfg.Notices)
	if err != nil {
		return n, fmt.Errorf("deliver ended notices: %w", err)
	}
	return n, nil
}

// foldSessionFiles folds what the session of w's id left in journals
// into its inbox and outbox files (intercom.FoldJournals): the shim that
// held the session does so when it ends in order, but one that was killed
// cannot, and the TypeScript clients read only the files. It runs while
// the record is still live, so no new incarnation of the id can hold the
// session meanwhile; a failure is logged and leaves the journals, which
// the next holder of the id replays.
func (f *Fleet) foldSessionFiles(w *Worker) {
	if err := intercom.FoldJournals(f.cfg.Paths, w.ID); err != nil {
		f.log.Warn("could not fold a worker's session journals into its files", "id", w.ID, "err", err)
	}
}
