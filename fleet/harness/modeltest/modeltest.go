// Package modeltest is a scripted model endpoint for tests: an HTTP server
// on 127.0.0.1 that speaks the model APIs the coding-agent CLIs call
// (Anthropic Messages, OpenAI Responses, OpenAI Chat Completions) and
// answers each call from a script, so a real Claude Code, Codex, OpenCode
// or Pi runs whole turns offline: its agent loop, MCP client, tool calls,
// permission handling, JSON output and usage report are the real ones;
// only the model is scripted.
//
// A script is a sequence of Steps. A request the script did not expect
// fails the test; so does a step left untaken when the test ends (unless
// the server was told otherwise). How each CLI is pointed at the endpoint
// is in docs/harness-endpoints.md.
package modeltest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// maxBody bounds a request body: harness requests carry the whole
// conversation and every tool schema, far below this.
const maxBody = 32 << 20

// Server is a running scripted endpoint. Its methods may be called from
// any goroutine.
type Server struct {
	// URL is the endpoint's base, http://127.0.0.1:PORT, without a path.
	URL string

	t   testing.TB
	srv *http.Server

	mu       sync.Mutex
	steps    []Step
	next     int // index of the next step
	taken    int // answers given by steps[next] so far
	requests []*Request
	asides   []func(*Request) *Reply
	leftover bool // steps left at the end are not a failure
	ended    bool // the test is over: failures can no longer be reported
	done     chan struct{}
	doneShut bool
	seq      int
}

// Start serves steps on a new port of 127.0.0.1 until the test ends.
func Start(t testing.TB, steps ...Step) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("modeltest: listen: %v", err)
	}
	s := &Server{URL: "http://" + ln.Addr().String(), t: t, done: make(chan struct{})}
	s.Add(steps...)
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	t.Cleanup(s.close)
	return s
}

// Add appends steps to the script.
func (s *Server) Add(steps ...Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, steps...)
	switch {
	case s.next < len(s.steps) && s.doneShut:
		s.done, s.doneShut = make(chan struct{}), false
	case s.next >= len(s.steps) && !s.doneShut:
		close(s.done)
		s.doneShut = true
	}
}

// Aside answers requests that are not part of the conversation being
// scripted (a harness's title or summary calls): a request for which
// answer returns a Reply is answered with it and takes no step.
func (s *Server) Aside(answer func(*Request) *Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asides = append(s.asides, answer)
}

// AllowLeftover makes steps left untaken at the end of the test no failure
// (a test that stops a worker in the middle of its script).
func (s *Server) AllowLeftover() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leftover = true
}

// Done is closed once every step was taken (and reopened by Add).
func (s *Server) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

// Requests are the model calls received so far, asides included, oldest
// first.
func (s *Server) Requests() []*Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Request(nil), s.requests...)
}

// Remaining is the number of steps not yet taken.
func (s *Server) Remaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.steps) - s.next
}

func (s *Server) close() {
	_ = s.srv.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	left := len(s.steps) - s.next
	if left > 0 && !s.leftover && !s.t.Failed() {
		names := make([]string, 0, left)
		for i := s.next; i < len(s.steps); i++ {
			names = append(names, s.stepName(i))
		}
		s.t.Errorf("modeltest: %d scripted steps were never requested: %s\nrequests received:\n%s",
			left, strings.Join(names, ", "), s.requestLog())
	}
	s.ended = true
}

func (s *Server) stepName(i int) string {
	if s.steps[i].Name != "" {
		return fmt.Sprintf("step %d %q", i+1, s.steps[i].Name)
	}
	return fmt.Sprintf("step %d", i+1)
}

func (s *Server) requestLog() string {
	var b strings.Builder
	for i, r := range s.requests {
		fmt.Fprintf(&b, "  %d. %s\n", i+1, r.summary())
	}
	return b.String()
}

// fail reports a script failure from the serving goroutine.
func (s *Server) fail(format string, args ...any) {
	if !s.ended {
		s.t.Errorf("modeltest: "+format, args...)
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		http.Error(w, "modeltest: request body unreadable or too large", http.StatusRequestEntityTooLarge)
		return
	}
	c := codecFor(r.URL.Path)
	if c == nil {
		s.mu.Lock()
		s.fail("unexpected %s %s (no model API there)", r.Method, r.URL.Path)
		s.mu.Unlock()
		http.Error(w, "modeltest: no model API at "+r.URL.Path, http.StatusNotFound)
		return
	}
	if c.housekeeping(w, r, body) {
		return
	}
	if r.Method != http.MethodPost {
		http.Error(w, "modeltest: model calls are POST", http.StatusMethodNotAllowed)
		return
	}
	req := &Request{API: c.api(), Path: r.URL.Path, Header: r.Header.Clone(), Body: json.RawMessage(bytes.Clone(body))}
	if err := c.decode(body, req); err != nil {
		s.mu.Lock()
		s.fail("%s %s: undecodable request: %v", req.API, r.URL.Path, err)
		s.mu.Unlock()
		c.fail(w, &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: "modeltest: " + err.Error()})
		return
	}
	rep, id := s.take(req)
	if rep.Error != nil {
		c.fail(w, rep.Error)
		return
	}
	if rep.Model == "" {
		rep.Model = req.Model
	}
	rep.Usage = rep.Usage.orDefault()
	c.answer(w, req, &rep, id)
}

// take records req and finds its answer: an aside's, or the next step's.
// A request nothing expected gets a 400 invalid_request_error, which no
// harness retries: a script failure ends the turn at once.
func (s *Server) take(req *Request) (Reply, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, req)
	s.seq++
	id := s.seq
	for _, a := range s.asides {
		if rep := a(req); rep != nil {
			return *rep, id
		}
	}
	if s.next >= len(s.steps) {
		s.fail("request after the script ended: %s", req.summary())
		return Reply{Error: unexpected("the script has no step for this request")}, id
	}
	st := s.steps[s.next]
	if st.API != "" && st.API != req.API {
		s.fail("%s expects a %s request, got %s", s.stepName(s.next), st.API, req.summary())
		return Reply{Error: unexpected("wrong API for " + s.stepName(s.next))}, id
	}
	if st.Expect != nil {
		if err := st.Expect(req); err != nil {
			s.fail("%s refused the request: %v\n  request: %s", s.stepName(s.next), err, req.summary())
			return Reply{Error: unexpected(s.stepName(s.next) + " refused the request")}, id
		}
	}
	s.taken++
	if s.taken >= max(st.Times, 1) {
		s.next, s.taken = s.next+1, 0
		if s.next >= len(s.steps) && !s.doneShut {
			close(s.done)
			s.doneShut = true
		}
	}
	rep := st.Reply
	if st.Respond != nil {
		rep = st.Respond(req)
	}
	rep.ToolCalls = append([]ToolCall(nil), rep.ToolCalls...)
	for i := range rep.ToolCalls {
		if rep.ToolCalls[i].ID == "" {
			rep.ToolCalls[i].ID = fmt.Sprintf("call_mt%d_%d", id, i)
		}
		if len(rep.ToolCalls[i].Input) == 0 {
			rep.ToolCalls[i].Input = json.RawMessage(`{}`)
		}
	}
	return rep, id
}

// unexpected is the answer to a request the script did not expect.
func unexpected(why string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: "modeltest: " + why}
}

// codec is one API's wire format.
type codec interface {
	api() API
	// path reports whether a request path is this API's model call or
	// one of its housekeeping endpoints.
	path(p string) bool
	// housekeeping answers what is not a model call (token counting,
	// model listing) and reports whether it did.
	housekeeping(w http.ResponseWriter, r *http.Request, body []byte) bool
	// decode reads a model call's body into req.
	decode(body []byte, req *Request) error
	// answer writes rep, streamed if req.Stream; seq numbers the ids it
	// makes up.
	answer(w http.ResponseWriter, req *Request, rep *Reply, seq int)
	// fail writes e in the API's error shape.
	fail(w http.ResponseWriter, e *Error)
}

var codecs = []codec{anthropicCodec{}, chatCodec{}, responsesCodec{}}

func codecFor(p string) codec {
	for _, c := range codecs {
		if c.path(p) {
			return c
		}
	}
	return nil
}

// retryAfter sets the retry-after header of an error answer.
func retryAfter(w http.ResponseWriter, e *Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("retry-after", fmt.Sprint(int((e.RetryAfter+time.Second-1)/time.Second)))
	}
}

// sse writes server-sent events and flushes after each.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("content-type", "text/event-stream")
	w.Header().Set("cache-control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

// event writes one event; name "" writes a data-only event (the OpenAI
// Chat Completions form). data is marshalled unless it is a string.
func (e *sse) event(name string, data any) {
	var payload []byte
	if s, ok := data.(string); ok {
		payload = []byte(s)
	} else {
		payload, _ = json.Marshal(data)
	}
	if name != "" {
		fmt.Fprintf(e.w, "event: %s\n", name)
	}
	fmt.Fprintf(e.w, "data: %s\n\n", payload)
	if e.f != nil {
		e.f.Flush()
	}
}

// writeJSON answers v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
