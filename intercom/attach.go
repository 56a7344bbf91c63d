package intercom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// HolderExtra handles holder operations beyond Ops (a scope switch, the
// shim's manager lookup); handled is false for operations it does not know.
type HolderExtra func(ctx context.Context, op string, args json.RawMessage) (result any, handled bool, err error)

// HoldConfig configures Hold.
type HoldConfig struct {
	// Session is the session to register; Hold sets Reconnect.
	Session SessionConfig
	// Wrap, when set, turns the registered session into the operations its
	// holder serves and the holder's extra operations (the Boss guard and
	// team service, the shim's turn tracker). nil serves the session.
	Wrap func(*Session) (Ops, HolderExtra)
	// AllowPeer admits holder clients by pid (HolderConfig.AllowPeer).
	AllowPeer func(pid int) bool
	// RequireHolder makes a holder socket that cannot be served an error;
	// otherwise the session is kept and the failure logged (another
	// process's holder then answers for it).
	RequireHolder bool
	// While runs on its own goroutine while this process holds the
	// session, until Close cancels its ctx (a manager's janitor).
	While func(ctx context.Context)
}

// Held is a session this process registered and serves through its holder
// socket.
type Held struct {
	// Session is the registered session.
	Session *Session
	// Ops are the operations its holder serves (HoldConfig.Wrap's).
	Ops Ops

	once sync.Once
	stop func()
}

// Hold registers a session for as long as the process needs it (mcp,
// intercom listen, the worker shim: docs/architecture.md "Session holders
// and the local API") and serves its holder socket, so that other
// processes under the same id act through it. Close releases both.
func Hold(ctx context.Context, cfg HoldConfig) (*Held, error) {
	sc := cfg.Session
	sc.Reconnect = true
	log := sc.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sess, err := OpenSession(ctx, sc)
	if err != nil {
		return nil, err
	}
	h := &Held{Session: sess, Ops: sess}
	var extra HolderExtra
	if cfg.Wrap != nil {
		h.Ops, extra = cfg.Wrap(sess)
	}
	hctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	holder, err := ListenHolder(HolderConfig{Paths: sc.Paths, SessionID: sc.Identity.SessionID, Ops: h.Ops, Logger: log,
		AllowPeer: cfg.AllowPeer, Extra: extra})
	switch {
	case err != nil && cfg.RequireHolder:
		cancel()
		sess.Close()
		return nil, fmt.Errorf("%w: %w", ErrHolderNotServed, err)
	case err != nil:
		log.Warn("cannot serve the holder socket", "err", err)
	default:
		running.Go(func() { _ = holder.Serve(hctx) })
	}
	if cfg.While != nil {
		running.Go(func() { cfg.While(hctx) })
	}
	h.stop = func() {
		cancel()
		running.Wait()
		_ = sess.Close() // keeps the outbox and defers open asks
	}
	return h, nil
}

// Close stops what Hold started and closes the session. Safe to call
// twice.
func (h *Held) Close() { h.once.Do(h.stop) }

// AttachMode is how a process reaches the session of its identity
// (docs/architecture.md "Identity").
type AttachMode int

const (
	// AttachOnce: a one-shot command acts through the live holder of its
	// id, else registers the session until Close (keeping its outbox).
	AttachOnce AttachMode = iota
	// AttachHold: a long-lived holder (mcp, listen) acts through the live
	// holder of its id and takes the session over when that holder goes,
	// else holds the session itself (Hold).
	AttachHold
	// AttachThrough: a fleet worker's turn acts only through the worker
	// shim's holder, never registering a second connection; the holder is
	// waited for up to AttachConfig.HolderWait.
	AttachThrough
)

// AttachConfig configures Attach.
type AttachConfig struct {
	Mode AttachMode
	// Hold is the session and how it is held; AttachOnce registers
	// Hold.Session without reconnecting or serving a holder.
	Hold HoldConfig
	// Through wraps another process's holder (the Boss guard, the team
	// service going through it); nil uses the holder client as it is.
	Through func(*HolderClient) Ops
	// Own wraps a session a one-shot command registered; nil uses it as
	// it is.
	Own func(*Session) Ops
	// HolderWait bounds AttachThrough's wait for the holder (default 2 s).
	HolderWait time.Duration
}

// Attached is the session a process acts as.
type Attached struct {
	Ops Ops
	// Holder: the operations go through another process's holder (at
	// least at first: an AttachHold session may take it over later).
	Holder bool
	// Session is the session this process registered (nil through a
	// holder).
	Session *Session

	once  sync.Once
	close func()
}

// Close releases what Attach registered or took over. Safe to call twice.
func (a *Attached) Close() { a.once.Do(a.close) }

// inUseAttempts and inUseWait bound the retries of a registration refused
// as SESSION_ID_IN_USE beyond the client's own InUseRetry: a holder may
// have appeared meanwhile, to act through.
const (
	inUseAttempts = 3
	inUseWait     = 500 * time.Millisecond
)

// Attach reaches the session of cfg.Hold.Session.Identity in cfg.Mode:
// through its live holder when one answers, else by registering it. It is
// the one place where that policy is written; the CLI's verbs, listen, the
// MCP server and a worker's turns all call it.
func Attach(ctx context.Context, cfg AttachConfig) (*Attached, error) {
	sc := cfg.Hold.Session
	through := func(hc *HolderClient) Ops {
		if cfg.Through != nil {
			return cfg.Through(hc)
		}
		return hc
	}
	if cfg.Mode == AttachHold {
		// No holder of this id can ever be served there: refuse at once
		// (exit 2, as spawn does) rather than hold a session no other
		// command can act through.
		if err := CheckSocketPath(sc.Paths.HolderSocket(sc.Identity.SessionID)); err != nil {
			return nil, err
		}
	}
	if cfg.Mode == AttachThrough {
		wait := cfg.HolderWait
		if wait <= 0 {
			wait = 2 * time.Second
		}
		hc, err := waitHolder(ctx, sc.Paths, sc.Identity.SessionID, wait)
		if err != nil {
			return nil, err
		}
		return &Attached{Ops: through(hc), Holder: true, close: func() {}}, nil
	}
	if hc, err := DialHolder(ctx, sc.Paths, sc.Identity.SessionID); err == nil {
		a := &Attached{Ops: through(hc), Holder: true, close: func() {}}
		if cfg.Mode == AttachHold {
			fo := NewFailover(a.Ops, func(ctx context.Context) (Ops, func(), error) { return takeOver(ctx, cfg, through) }, sc.Logger)
			a.Ops, a.close = fo, fo.Close
		}
		return a, nil
	}
	if cfg.Mode == AttachOnce {
		sess, err := OpenSession(ctx, sc)
		if err != nil {
			return nil, err
		}
		a := &Attached{Ops: Ops(sess), Session: sess, close: func() { _ = sess.Close() }}
		if cfg.Own != nil {
			a.Ops = cfg.Own(sess)
		}
		return a, nil
	}
	h, hc, err := holdOrThrough(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if hc != nil {
		return &Attached{Ops: through(hc), Holder: true, close: func() {}}, nil
	}
	return &Attached{Ops: h.Ops, Session: h.Session, close: h.Close}, nil
}

// takeOver is an AttachHold session's failover: hold the session whose
// holder went away, or act through the one that replaced it.
func takeOver(ctx context.Context, cfg AttachConfig, through func(*HolderClient) Ops) (Ops, func(), error) {
	h, hc, err := holdOrThrough(ctx, cfg)
	switch {
	case err != nil:
		return nil, nil, err
	case hc != nil:
		return through(hc), func() {}, nil
	default:
		return h.Ops, h.Close, nil
	}
}

// holdOrThrough holds the session, or — when a holder appeared meanwhile
// and the registration is refused as in use — returns that holder.
func holdOrThrough(ctx context.Context, cfg AttachConfig) (*Held, *HolderClient, error) {
	sc := cfg.Hold.Session
	for attempt := 1; ; attempt++ {
		h, err := Hold(ctx, cfg.Hold)
		if err == nil {
			return h, nil, nil
		}
		if errors.Is(err, ErrSessionIDInUse) {
			if hc, herr := DialHolder(ctx, sc.Paths, sc.Identity.SessionID); herr == nil {
				return nil, hc, nil
			}
		}
		if attempt >= inUseAttempts || ctx.Err() != nil || errors.As(err, new(inUseFinal)) {
			return nil, nil, err
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(inUseWait):
		}
	}
}

// waitHolder dials the holder of id until it answers or wait runs out.
func waitHolder(ctx context.Context, p Paths, id string, wait time.Duration) (*HolderClient, error) {
	deadline := time.Now().Add(wait)
	for {
		hc, err := DialHolder(ctx, p, id)
		if err == nil {
			return hc, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil, fmt.Errorf("no holder serves session %q: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
