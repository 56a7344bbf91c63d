package teams

import (
	"context"
	"errors"
	"sync"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// fakeRegistry is a fleet registry in memory.
type fakeRegistry struct {
	mu      sync.Mutex
	workers []WorkerRecord // every incarnation
	err     error
}

func (r *fakeRegistry) Worker(_ context.Context, id, runID string) (*WorkerRecord, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return nil, r.err
	}
	var latest *WorkerRecord
	for i := range r.workers {
		w := r.workers[i]
		if w.ID != id || (runID != "" && w.RunID != runID) {
			continue
		}
		if w.Live {
			return &w, nil
		}
		latest = &w
	}
	return latest, nil
}

func (r *fakeRegistry) LiveWorkers(context.Context) ([]WorkerRecord, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return nil, r.err
	}
	var out []WorkerRecord
	for _, w := range r.workers {
		if w.Live {
			out = append(out, w)
		}
	}
	return out, nil
}

func (r *fakeRegistry) setManager(id, manager string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.workers {
		if r.workers[i].ID == id && r.workers[i].Live {
			r.workers[i].Manager = manager
		}
	}
}

func live(id, run, manager, harness, role string) WorkerRecord {
	return WorkerRecord{ID: id, RunID: run, Manager: manager, Harness: harness, Role: role, State: "running", Live: true}
}

func ended(id, run, manager string) WorkerRecord {
	return WorkerRecord{ID: id, RunID: run, Manager: manager, Harness: "exec", State: "exited"}
}

// fakeOps is a session: fixed sessions, recorded sends, a pending list.
type fakeOps struct {
	intercom.Ops // nil: methods not overridden panic
	mu           sync.Mutex
	self         string
	sessions     []intercom.SessionView
	asks         []intercom.AskView
	sent         []string
	replies      []intercom.ReplyRequest
	listErr      error
}

func (o *fakeOps) Whoami(context.Context) (*intercom.WhoamiResult, error) {
	return &intercom.WhoamiResult{SessionID: o.self, Name: o.self}, nil
}

func (o *fakeOps) List(_ context.Context, req intercom.ListRequest) (*intercom.ListResult, error) {
	if o.listErr != nil {
		return nil, o.listErr
	}
	res := &intercom.ListResult{Sessions: []intercom.SessionView{}}
	for _, s := range o.sessions {
		if s.ID == o.self && !req.IncludeSelf {
			continue
		}
		res.Sessions = append(res.Sessions, s)
	}
	return res, nil
}

func (o *fakeOps) Send(_ context.Context, req intercom.SendRequest) (*intercom.SendResult, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sent = append(o.sent, req.To)
	return &intercom.SendResult{OK: true, To: req.To, TargetID: req.To}, nil
}

func (o *fakeOps) Ask(_ context.Context, req intercom.AskRequest) (*intercom.AskResult, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sent = append(o.sent, req.To)
	return &intercom.AskResult{SendResult: intercom.SendResult{OK: true, To: req.To}}, nil
}

func (o *fakeOps) Reply(_ context.Context, req intercom.ReplyRequest) (*intercom.SendResult, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.replies = append(o.replies, req)
	return &intercom.SendResult{OK: true}, nil
}

func (o *fakeOps) Pending(context.Context, intercom.PendingRequest) (*intercom.PendingResult, error) {
	return &intercom.PendingResult{Unread: []intercom.MessageView{}, Asks: o.asks}, nil
}

func (o *fakeOps) Status(context.Context) (*intercom.StatusResult, error) {
	return &intercom.StatusResult{Connected: true, SessionID: o.self, ActiveSessions: len(o.sessions)}, nil
}

func (o *fakeOps) SetSummary(context.Context, string) error { return nil }

func (o *fakeOps) Listen(context.Context, intercom.ListenRequest, func(*intercom.MessageView) error) error {
	return errors.New("not in this fake")
}

func sessionViews(ids ...string) []intercom.SessionView {
	out := make([]intercom.SessionView, len(ids))
	for i, id := range ids {
		out[i] = intercom.SessionView{ID: id, Name: id, Model: "cli"}
	}
	return out
}

func sessionsOf(ids ...string) []Session {
	return SessionsOf(&intercom.ListResult{Sessions: sessionViews(ids...)})
}
