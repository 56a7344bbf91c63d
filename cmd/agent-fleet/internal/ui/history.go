package ui

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/history"
)

// historyBackfill is how many recent history entries the feed starts
// with.
const historyBackfill = 50

// followHistory feeds the activity with the agent directory's message
// history (intercom/history): every session's sent and received messages
// and their receipts, recent ones first, then each change as it is
// recorded, until ctx ends. Without a history the feed shows what the
// dashboard sees itself.
func (k *stateKeeper) followHistory(ctx context.Context) {
	store, err := k.f.OpenHistory(ctx, k.paths)
	if err != nil {
		k.log.Warn("no message history for the activity feed", "err", err)
		return
	}
	defer store.Close()
	recent, err := store.List(ctx, history.Query{Limit: historyBackfill})
	if err != nil {
		k.log.Warn("cannot read the message history", "err", err)
		return
	}
	var cursor int64
	for _, e := range recent {
		k.noteHistory(e)
		cursor = max(cursor, e.Cursor)
	}
	kick(k.inbox)
	err = store.Follow(ctx, cursor, 0, func(e history.Entry) error {
		k.noteHistory(e)
		kick(k.inbox)
		return nil
	})
	if err != nil && ctx.Err() == nil {
		k.log.Warn("the activity feed stopped following the message history", "err", err)
	}
}

// historyKey names a message once for both its sender's and its
// receiver's entries: its sender and id.
func historyKey(sender, messageID string) string { return sender + "/" + messageID }

// noteHistory adds a history entry to the feed: a message the first time
// either side's entry shows it, then a line for each receipt not shown
// yet.
func (k *stateKeeper) noteHistory(e history.Entry) {
	from, to := e.Session, peerLabel(e)
	if e.Direction == string(intercom.Received) {
		from, to = peerLabel(e), e.Session
	}
	got := e.Receipts()
	if e.Failed != "" {
		got = append(got, "failed ("+e.Failed+")")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	key := historyKey(senderOf(e), e.MessageID)
	shown, seen := k.histShown[key]
	var fresh []string
	for _, r := range got {
		if !slices.Contains(shown, r) {
			fresh = append(fresh, r)
		}
	}
	k.histShown[key] = append(shown, fresh...)
	if !seen {
		text := fmt.Sprintf("%s %s → %s: %s", e.Kind, from, to, intercom.Preview(e.Text, 160))
		if e.Team != "" {
			text += " [team " + e.Team + "]"
		}
		if len(fresh) > 0 {
			text += " (" + strings.Join(fresh, ", ") + ")"
		}
		k.addLocked(Activity{At: e.At, Kind: e.Kind, Who: from, Text: text})
		return
	}
	if len(fresh) > 0 {
		k.addLocked(Activity{At: latestReceipt(e), Kind: "receipt", Who: from,
			Text: fmt.Sprintf("%s's %s to %s: %s", from, e.Kind, to, strings.Join(fresh, ", "))})
	}
}

// senderOf is the session that sent e's message.
func senderOf(e history.Entry) string {
	if e.Direction == string(intercom.Received) {
		return e.Peer
	}
	return e.Session
}

func peerLabel(e history.Entry) string {
	if e.PeerName != "" && e.PeerName != e.Peer {
		return e.PeerName
	}
	return e.Peer
}

func latestReceipt(e history.Entry) int64 {
	return max(e.QueuedAt, e.AcceptedAt, e.DeliveredAt, e.ReadAt, e.At)
}
