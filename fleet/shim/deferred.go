//go:build !windows

package shim

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// Messages kept for the worker while its session was not connected
// (docs/architecture.md "Deferred delivery"): the shim takes them from the
// registry into the session's inbox after every registration — the first
// before the workload starts — and a coding agent's next turn shows them
// under their own heading. The inbox deduplicates by sender and message
// id, so a message taken twice (a crash between the inbox write and the
// registry's record; or its sender sent it again once the worker was
// connected) reaches the worker once.

// keptSet is the inbox keys of the messages taken from the queue whose turn
// has not run yet. A nil set is empty. Safe for concurrent use.
type keptSet struct {
	mu   sync.Mutex
	keys map[string]bool
}

func keptKey(fromID, messageID string) string { return fromID + "\x00" + messageID }

func (k *keptSet) add(fromID, messageID string) {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys == nil {
		k.keys = map[string]bool{}
	}
	k.keys[keptKey(fromID, messageID)] = true
}

func (k *keptSet) forget(fromID, messageID string) {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.keys, keptKey(fromID, messageID))
}

// has reports whether m was taken from the queue (and its turn has not run).
func (k *keptSet) has(m intercom.MessageView) bool {
	if k == nil {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys[keptKey(m.From.ID, m.MessageID)]
}

// split separates the kept messages of batch from the others, forgetting
// them: their turn is the one being prepared.
func (k *keptSet) split(batch []intercom.MessageView) (kept, rest []intercom.MessageView) {
	for _, m := range batch {
		if k.has(m) {
			kept = append(kept, m)
		} else {
			rest = append(rest, m)
		}
	}
	if k != nil {
		k.mu.Lock()
		for _, m := range kept {
			delete(k.keys, keptKey(m.From.ID, m.MessageID))
		}
		k.mu.Unlock()
	}
	return kept, rest
}

// withKept gives k the kept messages, under the heading of the worker's
// first turn or of a later one.
func (w *wakeLoop) withKept(k *turnWork, kept []intercom.MessageView) {
	if len(kept) == 0 {
		return
	}
	_, kept = w.cfg.Kept.split(kept) // forgotten: this turn shows them
	k.kept, k.keptHeading = kept, harness.KeptWhileAway
	if w.state.Turns == 0 {
		k.keptHeading = harness.KeptBeforeStart
	}
}

// takeKept moves what is kept for incarnation id/run into the session's
// inbox and records it delivered; kept (nil: none) names the messages new
// to the inbox.
func takeKept(ctx context.Context, sess *intercom.Session, regs *fleet.RegistryHandle, id, run string, kept *keptSet, log *slog.Logger) {
	reg, err := regs.Get(ctx)
	if err != nil || reg == nil {
		if err != nil {
			log.Warn("could not read the messages kept for the worker", "err", err)
		}
		return
	}
	queued, err := reg.DeferredFor(ctx, id, run)
	if err != nil {
		log.Warn("could not read the messages kept for the worker", "err", err)
		return
	}
	var done [][2]string
	for _, d := range queued {
		// Known before the inbox has it: the wake loop may read it at once.
		kept.add(d.From.ID, d.MessageID)
		dup, err := sess.Deliver(d)
		if dup || err != nil {
			kept.forget(d.From.ID, d.MessageID)
		}
		if err != nil && !errors.Is(err, intercom.ErrInvalidInput) {
			log.Warn("could not store a kept message; it stays queued", "from", d.From.ID, "err", err)
			break
		}
		if err != nil {
			log.Warn("dropping a kept message the inbox refuses", "from", d.From.ID, "err", err)
		}
		done = append(done, [2]string{d.From.ID, d.MessageID})
	}
	if err := reg.DeferredDelivered(context.WithoutCancel(ctx), id, run, done...); err != nil {
		log.Warn("could not record the kept messages as delivered", "err", err)
	}
}
