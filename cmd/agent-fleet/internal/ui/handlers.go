package ui

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"slices"
	"time"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/teams"
)

//go:embed assets
var assets embed.FS

// Actions are what the page may do to a worker, as the CLI verbs of the
// same names do them.
var Actions = []string{"stop", "renew", "pause", "resume", "adopt"}

// keepAlive is how often an idle event stream sends a comment, so that
// proxies and the browser keep it open.
const keepAlive = 25 * time.Second

// logTail is how many lines the worker page shows before following.
const logTail = 200

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	mux.Handle("GET /", files)
	mux.HandleFunc("GET /api/state", s.handleState)
	mux.HandleFunc("GET /api/events", s.handleEvents)
	mux.HandleFunc("GET /api/worker", s.handleWorker)
	mux.HandleFunc("GET /api/log", s.handleLog)
	mux.HandleFunc("POST /api/action", s.handleAction)
	return s.guard(mux)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = output.PrintJSON(w, v)
}

func (s *Server) handleState(w http.ResponseWriter, _ *http.Request) {
	data := s.state.latest()
	if data == nil {
		data = []byte("null")
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(data)
}

// sse is a server-sent event stream.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func startSSE(w http.ResponseWriter) (*sse, bool) {
	f, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return nil, false
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	f.Flush()
	return &sse{w: w, f: f}, true
}

// send writes one event; data is one line of JSON.
func (e *sse) send(event string, data []byte) error {
	if _, err := fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", event, data); err != nil {
		return err
	}
	e.f.Flush()
	return nil
}

func (e *sse) ping() error {
	if _, err := fmt.Fprint(e.w, ": keep-alive\n\n"); err != nil {
		return err
	}
	e.f.Flush()
	return nil
}

// handleEvents streams "state" events: the whole snapshot, first as it
// is, then each time it changes.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	ev, ok := startSSE(w)
	if !ok {
		return
	}
	changed, stop := s.state.subscribe()
	defer stop()
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ping.C:
			if ev.ping() != nil {
				return
			}
		case <-changed:
			if data := s.state.latest(); data != nil {
				if ev.send("state", data) != nil {
					return
				}
			}
		}
	}
}

// WorkerDetail is the worker page's data besides the record: the status
// (unit, processes, turns) and the messages the dashboard can see of it.
type WorkerDetail struct {
	Status output.Status `json:"status"`
	// Messages are what the feed saw come from this worker to the caller
	// and the answers of its turns (from its turn record).
	Messages []Activity `json:"messages"`
	// Asks wait in the worker's inbox, read without changing it; only
	// its manager sees them (AsksNote says why not otherwise).
	Asks     any    `json:"asks,omitempty"`
	AsksNote string `json:"asksNote,omitempty"`
}

func (s *Server) handleWorker(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if err := fleet.ValidID(id); err != nil {
		writeJSON(w, http.StatusBadRequest, output.Failure(err))
		return
	}
	k := s.state
	fe := k.env()
	st, err := fe.Fleet.Status(r.Context(), id)
	if err != nil {
		writeJSON(w, httpStatus(err), output.Failure(err))
		return
	}
	d := WorkerDetail{Status: output.StatusReport{St: st, LiveUnknown: fe.Offline != nil}.JSON().(output.Status), Messages: []Activity{}}
	k.mu.Lock()
	for _, a := range k.activity {
		if a.Who == id && (a.Kind == "message" || a.Kind == "ask" || a.Kind == "turn") {
			d.Messages = append(d.Messages, a)
		}
	}
	k.mu.Unlock()
	if t := st.Turns; t != nil && t.Last != nil && t.Last.Final != "" {
		last := Activity{At: t.Last.EndedAt.UnixMilli(), Kind: "answer", Who: id,
			Text: fmt.Sprintf("turn %d answered: %s", t.Last.N, t.Last.Final)}
		if len(t.Last.Delivered) > 0 {
			last.Text += fmt.Sprintf(" (sent to %v)", t.Last.Delivered)
		}
		d.Messages = append(d.Messages, last)
	}
	switch {
	case st.Worker.Manager != k.caller:
		d.AsksNote = "only its manager (" + st.Worker.Manager + ") sees the asks waiting for it"
	case !st.Worker.State.Live():
		d.AsksNote = "it has ended"
	default:
		if insp, err := teams.ReadInbox(k.paths, id, "", k.f.AskTTL(), time.Now()); err == nil {
			d.Asks = insp.Asks
		} else {
			d.AsksNote = err.Error()
		}
	}
	writeJSON(w, http.StatusOK, d)
}

// LogLine is a "line" event of the log stream: the text and when it was
// written (RFC 3339; "" when unknown).
type LogLine struct {
	Text string `json:"text"`
	At   string `json:"at,omitempty"`
}

// handleLog streams a worker's log: "line" events for its last lines and
// then each new one, and an "end" event ({"state": "exited (exit 0)"})
// once the incarnation ended and everything it wrote was sent.
func (s *Server) handleLog(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if err := fleet.ValidID(id); err != nil {
		writeJSON(w, http.StatusBadRequest, output.Failure(err))
		return
	}
	ev, ok := startSSE(w)
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	lines := make(chan fleet.LogLine, 256)
	type ended struct {
		w   *fleet.Worker
		err error
	}
	done := make(chan ended, 1)
	go func() {
		wk, err := s.state.env().Fleet.FollowLog(ctx, id, fleet.LogQuery{Lines: logTail}, func(l fleet.LogLine) error {
			select {
			case lines <- l:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		close(lines)
		done <- ended{wk, err}
	}()
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ping.C:
			if ev.ping() != nil {
				return
			}
		case l, more := <-lines:
			if !more {
				e := <-done
				end := map[string]string{}
				if e.w != nil {
					end["state"] = output.StateText(e.w)
				}
				if e.err != nil {
					end["error"] = e.err.Error()
				}
				data, _ := json.Marshal(end)
				_ = ev.send("end", data)
				return
			}
			data, _ := json.Marshal(LogLine{Text: l.Text, At: output.Stamp(l.At)})
			if ev.send("line", data) != nil {
				return
			}
		}
	}
}

// ActionRequest is a POST /api/action body.
type ActionRequest struct {
	Action string `json:"action"`
	ID     string `json:"id"`
	// Force adopts a worker whose manager is still connected.
	Force bool `json:"force,omitempty"`
}

// handleAction runs one of Actions as the CLI verb of that name would,
// as the dashboard's caller: {"ok": true, "text": …, "report": …}, or
// {"ok": false, "error": …} with the HTTP status of the failure.
func (s *Server) handleAction(w http.ResponseWriter, r *http.Request) {
	var req ActionRequest
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, output.Failure(fmt.Errorf("bad request: %w", err)))
		return
	}
	if !slices.Contains(Actions, req.Action) {
		writeJSON(w, http.StatusBadRequest, output.Failure(fmt.Errorf("the dashboard does not %q (it can %v)", req.Action, Actions)))
		return
	}
	a := verbs.Args{Action: req.Action, ID: req.ID, Force: req.Force && req.Action == "adopt"}
	if req.ID == "" {
		writeJSON(w, http.StatusBadRequest, output.Failure(errors.New("which worker? (id)")))
		return
	}
	if err := a.Check(); err != nil {
		writeJSON(w, http.StatusBadRequest, output.Failure(err))
		return
	}
	fe, err := s.cfg.Factory.FleetAs(r.Context(), s.state.paths, s.state.caller)
	if err != nil {
		writeJSON(w, httpStatus(err), output.Failure(err))
		return
	}
	defer fe.Close()
	rep, err := verbs.Run(r.Context(), fe, a)
	if err != nil {
		res := output.Failure(err)
		if rep != nil {
			res["report"] = rep.JSON()
		}
		writeJSON(w, httpStatus(err), res)
		return
	}
	s.log.Info("dashboard action", "action", req.Action, "worker", req.ID)
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "text": rep.Text(output.CLI), "report": rep.JSON()})
}

// httpStatus is the HTTP status of a fleet error, by its kind.
func httpStatus(err error) int {
	switch {
	case errors.Is(err, fleet.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, fleet.ErrConflict), errors.Is(err, fleet.ErrNotOwner), errors.Is(err, fleet.ErrManagerConnected),
		errors.Is(err, fleet.ErrEnded):
		return http.StatusConflict
	case errors.Is(err, fleet.ErrInvalidID):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}
