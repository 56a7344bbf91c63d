package intercom

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// Failover is the Ops of a long-lived process that found its session held
// by another (an MCP server started second for an id already held): it
// acts through that holder until the holder goes away, then takes the
// session over — registers it and serves its holder — and carries on, so
// the second process outlives the first. Only an operation that never
// reached a holder (ErrNoHolder) is made again. Safe for concurrent use.
type Failover struct {
	mu       sync.Mutex
	cur      Ops
	takeOver func(ctx context.Context) (Ops, func(), error)
	stops    []func()
	log      *slog.Logger
	// summary is the last summary set through f ("" none): the session
	// taken over publishes it again, as the holder that went had.
	summary string
}

var _ Ops = (*Failover)(nil)

// NewFailover acts through cur; takeOver holds the session once cur's
// holder is gone (or acts through the holder that replaced it) and returns
// what stops it.
func NewFailover(cur Ops, takeOver func(ctx context.Context) (Ops, func(), error), log *slog.Logger) *Failover {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Failover{cur: cur, takeOver: takeOver, log: log}
}

func (f *Failover) get() Ops {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}

// next replaces failed (whose holder is gone) with the session taken over,
// or returns what another call already replaced it with.
func (f *Failover) next(ctx context.Context, failed Ops) (Ops, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur != failed {
		return f.cur, nil
	}
	ops, stop, err := f.takeOver(ctx)
	if err != nil {
		return nil, err
	}
	f.log.Info("the session's holder went away; this process holds it now")
	if f.summary != "" {
		if err := ops.SetSummary(ctx, f.summary); err != nil {
			f.log.Warn("could not publish the summary again", "err", err)
		}
	}
	f.cur = ops
	f.stops = append(f.stops, stop)
	return f.cur, nil
}

// Close ends what the takeovers started. Safe to call twice.
func (f *Failover) Close() {
	f.mu.Lock()
	stops := f.stops
	f.stops = nil
	f.mu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
}

// failover runs op, and once more on the session taken over when the
// holder op acted through is gone.
func failover[T any](ctx context.Context, f *Failover, op func(Ops) (T, error)) (T, error) {
	ops := f.get()
	r, err := op(ops)
	if !errors.Is(err, ErrNoHolder) {
		return r, err
	}
	next, terr := f.next(ctx, ops)
	if terr != nil {
		return r, fmt.Errorf("%w; taking the session over failed: %v", err, terr)
	}
	return op(next)
}

// Whoami implements Ops.
func (f *Failover) Whoami(ctx context.Context) (*WhoamiResult, error) {
	return failover(ctx, f, func(o Ops) (*WhoamiResult, error) { return o.Whoami(ctx) })
}

// List implements Ops.
func (f *Failover) List(ctx context.Context, req ListRequest) (*ListResult, error) {
	return failover(ctx, f, func(o Ops) (*ListResult, error) { return o.List(ctx, req) })
}

// Send implements Ops.
func (f *Failover) Send(ctx context.Context, req SendRequest) (*SendResult, error) {
	return failover(ctx, f, func(o Ops) (*SendResult, error) { return o.Send(ctx, req) })
}

// Ask implements Ops.
func (f *Failover) Ask(ctx context.Context, req AskRequest) (*AskResult, error) {
	return failover(ctx, f, func(o Ops) (*AskResult, error) { return o.Ask(ctx, req) })
}

// Reply implements Ops.
func (f *Failover) Reply(ctx context.Context, req ReplyRequest) (*SendResult, error) {
	return failover(ctx, f, func(o Ops) (*SendResult, error) { return o.Reply(ctx, req) })
}

// Pending implements Ops.
func (f *Failover) Pending(ctx context.Context, req PendingRequest) (*PendingResult, error) {
	return failover(ctx, f, func(o Ops) (*PendingResult, error) { return o.Pending(ctx, req) })
}

// Status implements Ops.
func (f *Failover) Status(ctx context.Context) (*StatusResult, error) {
	return failover(ctx, f, func(o Ops) (*StatusResult, error) { return o.Status(ctx) })
}

// SetSummary implements Ops.
func (f *Failover) SetSummary(ctx context.Context, summary string) error {
	_, err := failover(ctx, f, func(o Ops) (struct{}, error) { return struct{}{}, o.SetSummary(ctx, summary) })
	if err == nil {
		f.mu.Lock()
		f.summary = summary
		f.mu.Unlock()
	}
	return err
}

// Listen implements Ops.
func (f *Failover) Listen(ctx context.Context, req ListenRequest, emit func(*MessageView) error) error {
	_, err := failover(ctx, f, func(o Ops) (struct{}, error) { return struct{}{}, o.Listen(ctx, req, emit) })
	return err
}
