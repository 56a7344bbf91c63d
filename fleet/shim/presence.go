package shim

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// Presence is the one owner of a worker session's presence status (v4
// presence.status; intercom list and the adapters' intercom_list show it),
// so that every client sees the worker's state without reading its
// screen. The status is made of three parts, published whenever one
// changes:
//
//   - the state, which the wake loop sets: "idle", "working · turn N",
//     "failed: …", "paused: …" ("working" for a command worker);
//   - an overlay, which wins over the state while it is set: a transient
//     condition a holder operation reports, such as "needs-input: …" while
//     a permission prompt waits for the manager (SetOverlay, ClearOverlay);
//   - a note, the worker's own intercom_set_summary / set-summary, kept
//     after " · " ("working · turn 3 · reading the parser").
//
// The whole is at most intercom.MaxSummaryChars characters (what
// set_summary takes; the wire allows 512), cut with "…". Safe for
// concurrent use; publishing happens under the lock, so statuses go out in
// the order they were set.
type Presence struct {
	ops intercom.Ops
	log *slog.Logger

	mu                   sync.Mutex
	state, overlay, note string
	published            string
}

// newPresence publishes through ops (the worker's held session).
func newPresence(ops intercom.Ops, log *slog.Logger) *Presence {
	return &Presence{ops: ops, log: log}
}

// SetState sets the worker's state ("" is idle).
func (p *Presence) SetState(ctx context.Context, state string) {
	p.update(ctx, func() { p.state = state })
}

// SetOverlay shows overlay ("needs-input: w1 wants to run npm install")
// instead of the state until ClearOverlay; "" clears it.
func (p *Presence) SetOverlay(ctx context.Context, overlay string) {
	p.update(ctx, func() { p.overlay = overlay })
}

// ClearOverlay shows the state again.
func (p *Presence) ClearOverlay(ctx context.Context) { p.SetOverlay(ctx, "") }

// setNote keeps the worker's own summary beside its state.
func (p *Presence) setNote(ctx context.Context, note string) error {
	note = strings.Join(strings.Fields(note), " ")
	if len([]rune(note)) > intercom.MaxSummaryChars {
		return errors.Join(intercom.ErrInvalidInput, errors.New("a summary has at most 400 characters"))
	}
	p.update(ctx, func() { p.note = note })
	return nil
}

// Status is what is published now (or would be).
func (p *Presence) Status() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.composeLocked()
}

func (p *Presence) composeLocked() string {
	s := p.state
	if p.overlay != "" {
		s = p.overlay
	}
	if s == "" {
		s = "idle"
	}
	if p.note != "" {
		s += " · " + p.note
	}
	if r := []rune(s); len(r) > intercom.MaxSummaryChars {
		s = string(r[:intercom.MaxSummaryChars-1]) + "…"
	}
	return s
}

func (p *Presence) update(ctx context.Context, change func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	change()
	s := p.composeLocked()
	if s == p.published {
		return
	}
	if err := p.ops.SetSummary(ctx, s); err != nil {
		if !errors.Is(err, context.Canceled) {
			p.log.Warn("could not publish the presence status", "err", err)
		}
		return
	}
	p.published = s
}

// presenceOps is the Ops a worker's holder serves: the session's, with
// set_summary kept as the presence's note instead of replacing the state.
type presenceOps struct {
	intercom.Ops
	p *Presence
}

// SetSummary implements intercom.Ops.
func (o presenceOps) SetSummary(ctx context.Context, summary string) error {
	return o.p.setNote(ctx, summary)
}
