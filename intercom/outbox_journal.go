package intercom

import (
	"bufio"
	"bytes"
	"encoding/json"
	"slices"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// The outbox's journal records (journal.go): "add" is a queued send in the
// file's entry form, "remove" the ids of sends whose outcome is known.
// Replaying is idempotent: an add of a message already queued is skipped,
// and a removal of one that is gone does nothing.

// outboxRecord is one line of an outbox journal.
type outboxRecord struct {
	Op string `json:"op"`
	OutboxEntry
	IDs []string `json:"ids,omitempty"`
}

// appendAddRecord adds the journal line of a queued send to dst.
func appendAddRecord(dst []byte, e OutboxEntry) []byte {
	dst = append(dst, `{"op":"add",`...)
	dst = appendEntryFields(dst, e)
	return append(dst, "}\n"...)
}

func appendRemoveRecord(dst []byte, ids ...string) []byte {
	return appendListRecord(dst, "remove", "ids", ids)
}

// replay applies journal lines over the loaded file. It stops at the
// first line that does not decode: the last line of a journal whose writer
// died mid-append (no Enqueue returned for it) or damage, after which
// nothing can be trusted.
func (o *Outbox) replay(data []byte) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 2*wire.MaxFrameBytes)
	for sc.Scan() {
		var r outboxRecord
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			return
		}
		switch r.Op {
		case "add":
			if !o.add(r.OutboxEntry) {
				return
			}
		case "remove":
			for _, id := range r.IDs {
				if _, ok := o.fps[id]; ok {
					delete(o.fps, id)
					o.entries = slices.DeleteFunc(o.entries, func(e OutboxEntry) bool { return e.id == id })
				}
			}
		default:
			return
		}
	}
}
