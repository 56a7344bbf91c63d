package intercom

import (
	"context"
	"slices"
	"time"
)

// Batching of inbound messages for a wake-up: a batch is due BatchQuiet
// after its last message and at most BatchMaxWait after its first, so a
// burst of mail wakes an agent once (the worker shim batches its turns
// the same way).
const (
	BatchQuiet   = 300 * time.Millisecond
	BatchMaxWait = time.Second
)

// batchSeen bounds how many message ids a watch remembers to drop
// repeats: a takeover re-lists the unread messages, never this many.
const batchSeen = 4096

// WatchBatches watches the inbox of ops without consuming it (a listen of
// req with KeepUnread set) and calls emit with each batch of messages,
// oldest first: what is unread when the watch starts is the first batch. A message is in one batch only, also when the listen lists
// it again after a takeover of the session. It returns nil when ctx ends,
// else the error of emit or of the listen (a batch that was due is
// emitted first).
func WatchBatches(ctx context.Context, ops Ops, req ListenRequest, emit func([]MessageView) error) error {
	req.KeepUnread = true
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	arrived := make(chan MessageView)
	ended := make(chan error, 1)
	go func() {
		ended <- ops.Listen(lctx, req, func(m *MessageView) error {
			select {
			case arrived <- *m:
				return nil
			case <-lctx.Done():
				return lctx.Err()
			}
		})
	}()
	seen := make(map[string]bool)
	var order []string
	var batch []MessageView
	var first time.Time
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	flush := func() error {
		b := stillUnread(ctx, ops, batch)
		batch = nil
		if len(b) == 0 {
			return nil
		}
		return emit(b)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-ended:
			if ctx.Err() != nil {
				return nil
			}
			if ferr := flush(); ferr != nil {
				return ferr
			}
			return err
		case m := <-arrived:
			if m.MessageID != "" {
				if seen[m.MessageID] {
					continue
				}
				seen[m.MessageID] = true
				order = append(order, m.MessageID)
				if len(order) > batchSeen {
					delete(seen, order[0])
					order = order[1:]
				}
			}
			now := time.Now()
			if len(batch) == 0 {
				first = now
			}
			batch = append(batch, m)
			wait := min(BatchQuiet, first.Add(BatchMaxWait).Sub(now))
			timer.Reset(max(wait, 0))
		case <-timer.C:
			if err := flush(); err != nil {
				return err
			}
		}
	}
}

// stillUnread is the part of batch that is still unread; all of it when
// the inbox cannot be read.
func stillUnread(ctx context.Context, ops Ops, batch []MessageView) []MessageView {
	if len(batch) == 0 {
		return nil
	}
	ids := make([]string, len(batch))
	for i, m := range batch {
		ids[i] = m.MessageID
	}
	res, err := ops.Pending(ctx, PendingRequest{IDs: ids})
	if err != nil {
		return batch
	}
	unread := make(map[string]bool, len(res.Unread))
	for _, m := range res.Unread {
		unread[m.MessageID] = true
	}
	return slices.DeleteFunc(batch, func(m MessageView) bool { return !unread[m.MessageID] })
}
