package intercom

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
)

// A session holder serves its session to other processes of the same user
// on <dir>/s/<16 hex of sha256(id)>.sock (docs/architecture.md "Session holders"):
// JSON lines, one request and one response per line, and a "listen"
// request that streams messages until the caller closes.

// HolderRequest is one request line.
type HolderRequest struct {
	Op      string          `json:"op"`
	Args    json.RawMessage `json:"args,omitempty"`
	Session string          `json:"session,omitempty"` // the id the caller expects
}

// HolderResponse is one response line; a listen stream sends Event lines.
type HolderResponse struct {
	OK     bool            `json:"ok"`
	Error  *OpError        `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Event  *MessageView    `json:"event,omitempty"`
}

// Holder operations.
const (
	HolderOpPing       = "ping"
	HolderOpWhoami     = "whoami"
	HolderOpList       = "list"
	HolderOpSend       = "send"
	HolderOpAsk        = "ask"
	HolderOpReply      = "reply"
	HolderOpPending    = "pending"
	HolderOpStatus     = "status"
	HolderOpSetSummary = "set_summary"
	HolderOpListen     = "listen"
)

// HolderConfig configures a HolderServer.
type HolderConfig struct {
	Paths     Paths
	SessionID string
	Ops       Ops
	Logger    *slog.Logger
	// AllowPeer, when set, must accept the connecting process's pid; the
	// worker shim uses it to admit only processes in the worker's cgroup.
	// The peer's uid is always checked.
	AllowPeer func(pid int) bool
	// Extra handles operations beyond Ops (e.g. a scope switch); it
	// returns handled=false for unknown operations.
	Extra func(ctx context.Context, op string, args json.RawMessage) (result any, handled bool, err error)
}

// HolderServer serves one session's holder socket.
type HolderServer struct {
	cfg  HolderConfig
	ln   net.Listener
	path string
	wg   sync.WaitGroup
	mu   sync.Mutex
	cons map[net.Conn]struct{}
}

// ListenHolder binds the holder socket of cfg.SessionID (ListenSocket). A
// socket file that nobody answers on is stale and replaced; a live holder
// is ErrHeld.
func ListenHolder(cfg HolderConfig) (*HolderServer, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	path := cfg.Paths.HolderSocket(cfg.SessionID)
	ul, err := ListenSocket(path)
	var inUse *SocketInUseError
	if errors.As(err, &inUse) {
		return nil, fmt.Errorf("%w (%s)", ErrHeld, cfg.SessionID)
	}
	if err != nil {
		return nil, err
	}
	h := &HolderServer{cfg: cfg, ln: ul, path: path, cons: make(map[net.Conn]struct{})}
	return h, nil
}

// Serve answers requests until ctx ends; then it removes the socket file
// and waits for its connections to finish.
func (h *HolderServer) Serve(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		h.ln.Close()
		h.mu.Lock()
		for c := range h.cons {
			c.Close()
		}
		h.mu.Unlock()
	}()
	defer func() {
		_ = os.Remove(h.path)
		h.wg.Wait()
	}()
	for {
		nc, err := h.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		pid, ok := h.admit(nc)
		if !ok {
			nc.Close()
			continue
		}
		h.mu.Lock()
		if ctx.Err() != nil { // accepted as Serve ended: the closing pass may be over
			h.mu.Unlock()
			nc.Close()
			return nil
		}
		h.cons[nc] = struct{}{}
		h.mu.Unlock()
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			h.serveConn(withListenerPID(ctx, pid), nc)
			h.mu.Lock()
			delete(h.cons, nc)
			h.mu.Unlock()
			nc.Close()
		}()
	}
}

// admit checks the peer's credentials and returns its pid (0 where the
// platform cannot tell).
func (h *HolderServer) admit(nc net.Conn) (int, bool) {
	uid, pid, err := PeerCredentials(nc)
	if err != nil {
		return 0, h.cfg.AllowPeer == nil // no credentials here: only without a pid rule
	}
	if uid != os.Getuid() {
		h.cfg.Logger.Warn("holder refused a connection from another user", "uid", uid)
		return 0, false
	}
	if h.cfg.AllowPeer != nil && !h.cfg.AllowPeer(pid) {
		// Not a warning: the user's own sessions probe holder sockets as
		// they go (whether a sender takes read receipts, on every message
		// it sends): a worker's log would fill with them.
		h.cfg.Logger.Debug("holder refused a process outside its worker", "pid", pid)
		return 0, false
	}
	return pid, true
}

type listenerPIDKey struct{}

// withListenerPID says which process a listen served on ctx is for: the
// holder client's, not the holder's.
func withListenerPID(ctx context.Context, pid int) context.Context {
	if pid <= 0 {
		return ctx
	}
	return context.WithValue(ctx, listenerPIDKey{}, pid)
}

// listenerPID is the process a listen on ctx prints for: a holder
// client's (withListenerPID), else this process.
func listenerPID(ctx context.Context) int {
	if pid, ok := ctx.Value(listenerPIDKey{}).(int); ok {
		return pid
	}
	return os.Getpid()
}

func (h *HolderServer) serveConn(ctx context.Context, nc net.Conn) {
	sc := bufio.NewScanner(nc)
	sc.Buffer(make([]byte, 0, 4096), 2<<20)
	enc := json.NewEncoder(nc)
	var wmu sync.Mutex
	write := func(r *HolderResponse) error {
		wmu.Lock()
		defer wmu.Unlock()
		return enc.Encode(r)
	}
	for sc.Scan() {
		var req HolderRequest
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			_ = write(&HolderResponse{Error: &OpError{Kind: "invalid", Message: "bad request: " + err.Error()}})
			return
		}
		if req.Session != "" && req.Session != h.cfg.SessionID {
			_ = write(&HolderResponse{Error: &OpError{Kind: "invalid", Message: "this holder serves " + h.cfg.SessionID}})
			return
		}
		if req.Op == HolderOpListen {
			var lr ListenRequest
			_ = json.Unmarshal(req.Args, &lr)
			lctx, cancel := context.WithCancel(ctx)
			go func() {
				// The caller closing its end stops the stream.
				buf := make([]byte, 1)
				_, _ = nc.Read(buf)
				cancel()
			}()
			// The stream is acknowledged once the listen runs, so that a
			// refused one (ErrListening) is the caller's first line.
			lr.Started = func() { _ = write(&HolderResponse{OK: true}) }
			err := h.cfg.Ops.Listen(lctx, lr, func(m *MessageView) error {
				return write(&HolderResponse{OK: true, Event: m})
			})
			if err != nil && lctx.Err() == nil {
				_ = write(&HolderResponse{Error: toOpError(err)})
			}
			cancel()
			return
		}
		result, err := h.do(ctx, req)
		resp := &HolderResponse{OK: err == nil}
		if err != nil {
			resp.Error = toOpError(err)
		}
		if result != nil {
			resp.Result, _ = json.Marshal(result)
		}
		if write(resp) != nil {
			return
		}
	}
}

func toOpError(err error) *OpError {
	var oe *OpError
	if errors.As(err, &oe) {
		return oe
	}
	oe = &OpError{Kind: errorKind(err), Message: err.Error()}
	var coded Coded
	if errors.As(err, &coded) {
		oe.Code = coded.ErrorCode()
	}
	return oe
}

func (h *HolderServer) do(ctx context.Context, req HolderRequest) (any, error) {
	ops := h.cfg.Ops
	decode := func(v any) error {
		if len(req.Args) == 0 {
			return nil
		}
		if err := json.Unmarshal(req.Args, v); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidInput, err)
		}
		return nil
	}
	switch req.Op {
	case HolderOpPing, HolderOpWhoami:
		r, err := ops.Whoami(ctx)
		if r != nil {
			r.Holder = true
		}
		return r, err
	case HolderOpList:
		var a ListRequest
		if err := decode(&a); err != nil {
			return nil, err
		}
		return ops.List(ctx, a)
	case HolderOpSend:
		var a SendRequest
		if err := decode(&a); err != nil {
			return nil, err
		}
		return ops.Send(ctx, a)
	case HolderOpAsk:
		var a AskRequest
		if err := decode(&a); err != nil {
			return nil, err
		}
		return ops.Ask(ctx, a)
	case HolderOpReply:
		var a ReplyRequest
		if err := decode(&a); err != nil {
			return nil, err
		}
		return ops.Reply(ctx, a)
	case HolderOpPending:
		var a PendingRequest
		if err := decode(&a); err != nil {
			return nil, err
		}
		return ops.Pending(ctx, a)
	case HolderOpStatus:
		r, err := ops.Status(ctx)
		if r != nil {
			r.Holder = true
		}
		return r, err
	case HolderOpSetSummary:
		var a struct {
			Summary string `json:"summary"`
		}
		if err := decode(&a); err != nil {
			return nil, err
		}
		return nil, ops.SetSummary(ctx, a.Summary)
	}
	if h.cfg.Extra != nil {
		if r, handled, err := h.cfg.Extra(ctx, req.Op, req.Args); handled {
			return r, err
		}
	}
	return nil, fmt.Errorf("%w: unknown holder operation %q", ErrInvalidInput, req.Op)
}

// HolderAlive reports whether a live holder answers for sessionID.
func HolderAlive(p Paths, sessionID string) bool {
	hc, err := DialHolder(context.Background(), p, sessionID)
	if err != nil {
		return false
	}
	hc.Close()
	return true
}

// HolderClient performs Ops through a session's holder. Each call uses its
// own connection, so it is safe for concurrent use.
type HolderClient struct {
	path      string
	sessionID string
}

// DialHolder returns a client of the holder of sessionID once it answered
// a ping; a stale socket file is ErrNoHolder.
func DialHolder(ctx context.Context, p Paths, sessionID string) (*HolderClient, error) {
	hc := &HolderClient{path: p.HolderSocket(sessionID), sessionID: sessionID}
	if _, err := os.Stat(hc.path); err != nil {
		return nil, ErrNoHolder
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var who WhoamiResult
	if err := hc.call(ctx, HolderOpPing, nil, &who); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoHolder, err)
	}
	if who.SessionID != sessionID {
		return nil, ErrNoHolder
	}
	return hc, nil
}

// Close releases nothing (calls are per connection); it exists for symmetry.
func (hc *HolderClient) Close() {}

func (hc *HolderClient) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", hc.path)
}

// Call performs one holder operation, decoding its result into out.
func (hc *HolderClient) Call(ctx context.Context, op string, args any, out any) error {
	return hc.call(ctx, op, args, out)
}

func (hc *HolderClient) call(ctx context.Context, op string, args any, out any) error {
	nc, err := hc.dial(ctx)
	if err != nil {
		if ctx.Err() == nil {
			// Nothing reached a holder: the call can be made elsewhere.
			return fmt.Errorf("%w: %v", ErrNoHolder, err)
		}
		return err
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	req := HolderRequest{Op: op, Session: hc.sessionID}
	if args != nil {
		req.Args, _ = json.Marshal(args)
	}
	line, _ := json.Marshal(req)
	if _, err := nc.Write(append(line, '\n')); err != nil {
		return err
	}
	sc := bufio.NewScanner(nc)
	sc.Buffer(make([]byte, 0, 4096), 2<<20)
	if !sc.Scan() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		cause := sc.Err()
		if cause == nil {
			cause = io.EOF
		}
		switch op {
		case HolderOpSend, HolderOpAsk, HolderOpReply:
			// It may have sent the message before it went (its outbox
			// has it, for the next holder to replay): a retry could
			// deliver it twice.
			return fmt.Errorf("%w: the session's holder went away during the %s (%v)", ErrOutcomeUnknown, op, cause)
		}
		return fmt.Errorf("holder closed the connection: %v", cause)
	}
	var resp HolderResponse
	if err := json.Unmarshal(sc.Bytes(), &resp); err != nil {
		return fmt.Errorf("bad holder response: %w", err)
	}
	if resp.Error != nil {
		return resp.Error
	}
	if out != nil && len(resp.Result) > 0 {
		return json.Unmarshal(resp.Result, out)
	}
	return nil
}

// Whoami implements Ops.
func (hc *HolderClient) Whoami(ctx context.Context) (*WhoamiResult, error) {
	var r WhoamiResult
	return &r, hc.call(ctx, HolderOpWhoami, nil, &r)
}

// List implements Ops.
func (hc *HolderClient) List(ctx context.Context, req ListRequest) (*ListResult, error) {
	var r ListResult
	return &r, hc.call(ctx, HolderOpList, req, &r)
}

// Send implements Ops.
func (hc *HolderClient) Send(ctx context.Context, req SendRequest) (*SendResult, error) {
	var r SendResult
	return &r, hc.call(ctx, HolderOpSend, req, &r)
}

// Ask implements Ops.
func (hc *HolderClient) Ask(ctx context.Context, req AskRequest) (*AskResult, error) {
	var r AskResult
	return &r, hc.call(ctx, HolderOpAsk, req, &r)
}

// Reply implements Ops.
func (hc *HolderClient) Reply(ctx context.Context, req ReplyRequest) (*SendResult, error) {
	var r SendResult
	return &r, hc.call(ctx, HolderOpReply, req, &r)
}

// Pending implements Ops.
func (hc *HolderClient) Pending(ctx context.Context, req PendingRequest) (*PendingResult, error) {
	var r PendingResult
	return &r, hc.call(ctx, HolderOpPending, req, &r)
}

// Status implements Ops.
func (hc *HolderClient) Status(ctx context.Context) (*StatusResult, error) {
	var r StatusResult
	return &r, hc.call(ctx, HolderOpStatus, nil, &r)
}

// SetSummary implements Ops.
func (hc *HolderClient) SetSummary(ctx context.Context, summary string) error {
	return hc.call(ctx, HolderOpSetSummary, map[string]string{"summary": summary}, nil)
}

// Listen implements Ops: it streams from the holder until ctx ends.
func (hc *HolderClient) Listen(ctx context.Context, req ListenRequest, emit func(*MessageView) error) error {
	nc, err := hc.dial(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	args, _ := json.Marshal(req)
	line, _ := json.Marshal(HolderRequest{Op: HolderOpListen, Args: args, Session: hc.sessionID})
	if _, err := nc.Write(append(line, '\n')); err != nil {
		return err
	}
	sc := bufio.NewScanner(nc)
	sc.Buffer(make([]byte, 0, 4096), 4<<20)
	for sc.Scan() {
		var resp HolderResponse
		if err := json.Unmarshal(sc.Bytes(), &resp); err != nil {
			return fmt.Errorf("bad holder response: %w", err)
		}
		if resp.Error != nil {
			return resp.Error
		}
		if resp.Event != nil {
			if err := emit(resp.Event); err != nil {
				return err
			}
		} else if req.Started != nil {
			req.Started()
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	// The holder went away (it exited, or was killed): what it had not
	// streamed is still unread in the session's inbox, so the listen can
	// go on wherever the session is held next (Failover takes it over).
	return fmt.Errorf("%w: the holder of %q went away", ErrNoHolder, hc.sessionID)
}

// holderListening reports whether something accepts connections on the
// holder socket of sessionID: a holder, whether or not it would serve
// this process (a worker's admits only the worker's own processes).
func holderListening(ctx context.Context, p Paths, sessionID string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := (&HolderClient{path: p.HolderSocket(sessionID), sessionID: sessionID}).dial(ctx)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
