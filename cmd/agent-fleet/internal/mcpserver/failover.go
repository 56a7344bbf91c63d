package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// failoverOps acts through another process's holder of the session (an
// MCP server started second for an id already held) until that holder goes
// away; then it takes the session over — registers it and serves its
// holder — and carries on, so the second server outlives the first. Only
// an operation that never reached a holder (intercom.ErrNoHolder) is made
// again. Safe for concurrent use.
type failoverOps struct {
	mu       sync.Mutex
	cur      intercom.Ops
	through  bool // cur acts through another process's holder
	takeOver func(ctx context.Context) (*mcpSession, error)
	stops    []func()
	log      *slog.Logger
}

var _ intercom.Ops = (*failoverOps)(nil)

func (f *failoverOps) get() (intercom.Ops, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur, f.through
}

// next replaces failed (whose holder is gone) with the session taken over,
// or returns what another call already replaced it with.
func (f *failoverOps) next(ctx context.Context, failed intercom.Ops) (intercom.Ops, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur != failed {
		return f.cur, nil
	}
	ms, err := f.takeOver(ctx)
	if err != nil {
		return nil, err
	}
	f.log.Info("the session's holder went away; this server holds it now")
	f.cur, f.through = ms.ops, ms.session == nil
	f.stops = append(f.stops, ms.stop)
	return f.cur, nil
}

// stop ends what the takeovers started.
func (f *failoverOps) stop() {
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
func failover[T any](ctx context.Context, f *failoverOps, op func(intercom.Ops) (T, error)) (T, error) {
	ops, through := f.get()
	r, err := op(ops)
	if !through || !errors.Is(err, intercom.ErrNoHolder) {
		return r, err
	}
	next, terr := f.next(ctx, ops)
	if terr != nil {
		return r, fmt.Errorf("%w; taking the session over failed: %v", err, terr)
	}
	return op(next)
}

// Whoami implements intercom.Ops.
func (f *failoverOps) Whoami(ctx context.Context) (*intercom.WhoamiResult, error) {
	return failover(ctx, f, func(o intercom.Ops) (*intercom.WhoamiResult, error) { return o.Whoami(ctx) })
}

// List implements intercom.Ops.
func (f *failoverOps) List(ctx context.Context, req intercom.ListRequest) (*intercom.ListResult, error) {
	return failover(ctx, f, func(o intercom.Ops) (*intercom.ListResult, error) { return o.List(ctx, req) })
}

// Send implements intercom.Ops.
func (f *failoverOps) Send(ctx context.Context, req intercom.SendRequest) (*intercom.SendResult, error) {
	return failover(ctx, f, func(o intercom.Ops) (*intercom.SendResult, error) { return o.Send(ctx, req) })
}

// Ask implements intercom.Ops.
func (f *failoverOps) Ask(ctx context.Context, req intercom.AskRequest) (*intercom.AskResult, error) {
	return failover(ctx, f, func(o intercom.Ops) (*intercom.AskResult, error) { return o.Ask(ctx, req) })
}

// Reply implements intercom.Ops.
func (f *failoverOps) Reply(ctx context.Context, req intercom.ReplyRequest) (*intercom.SendResult, error) {
	return failover(ctx, f, func(o intercom.Ops) (*intercom.SendResult, error) { return o.Reply(ctx, req) })
}

// Pending implements intercom.Ops.
func (f *failoverOps) Pending(ctx context.Context, req intercom.PendingRequest) (*intercom.PendingResult, error) {
	return failover(ctx, f, func(o intercom.Ops) (*intercom.PendingResult, error) { return o.Pending(ctx, req) })
}

// Status implements intercom.Ops.
func (f *failoverOps) Status(ctx context.Context) (*intercom.StatusResult, error) {
	return failover(ctx, f, func(o intercom.Ops) (*intercom.StatusResult, error) { return o.Status(ctx) })
}

// SetSummary implements intercom.Ops.
func (f *failoverOps) SetSummary(ctx context.Context, summary string) error {
	_, err := failover(ctx, f, func(o intercom.Ops) (struct{}, error) { return struct{}{}, o.SetSummary(ctx, summary) })
	return err
}

// Listen implements intercom.Ops.
func (f *failoverOps) Listen(ctx context.Context, req intercom.ListenRequest, emit func(*intercom.MessageView) error) error {
	_, err := failover(ctx, f, func(o intercom.Ops) (struct{}, error) { return struct{}{}, o.Listen(ctx, req, emit) })
	return err
}
