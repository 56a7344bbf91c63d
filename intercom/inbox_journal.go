package intercom

import (
	"bufio"
	"bytes"
	"encoding/json"
	"slices"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// An inbox that remembers MaxSeenKeys keys is half a megabyte; rewriting
// it for every message that arrives cost more CPU than everything else a
// client does. So it is journaled (journal.go): what arrives is a "stage"
// record, fsynced before it is acknowledged, and messages marked read a
// "consume" record; answering, deferring or pruning an ask, and a
// fingerprint learnt for a remembered key, are written as snapshots.
//
// Replaying the journal over the file is idempotent: a staged message
// whose key the file remembers is skipped, and marking read removes what
// is already gone, so a crash between a compaction and the journal's
// truncation loses and repeats nothing.

// inboxRecord is one line of the journal: "stage" (a message arrived;
// the fields of the stored message and its fingerprint) or "consume"
// (keys marked read).
type inboxRecord struct {
	Op string `json:"op"`
	storedMessage
	Fingerprint string   `json:"fp,omitempty"`
	Keys        []string `json:"keys,omitempty"`
}

// appendStageRecord adds the journal line of a staged message to dst.
func appendStageRecord(dst []byte, m *InboundMessage, fp string) []byte {
	dst = append(dst, `{"op":"stage",`...)
	dst = appendStoredFields(dst, m)
	dst = append(dst, `,"fp":`...)
	dst = wire.AppendString(dst, fp)
	return append(dst, "}\n"...)
}

func appendConsumeRecord(dst []byte, keys []string) []byte {
	return appendListRecord(dst, "consume", "keys", keys)
}

// replay applies journal lines over the loaded file and reports whether
// any applied. It stops at the first line that does not decode: the last
// line of a journal whose writer died mid-append (nothing on it was
// acknowledged) or damage, after which nothing can be trusted.
func (in *Inbox) replay(data []byte) (applied bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 2*wire.MaxFrameBytes)
	for sc.Scan() {
		var r inboxRecord
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			return applied
		}
		switch r.Op {
		case "stage":
			m, err := decodeStored(r.storedMessage)
			if err != nil {
				return applied
			}
			if _, seen := in.seenSet[m.Key]; seen {
				continue
			}
			// Sequences are the file's: a Pi client may have numbered
			// others since.
			m.Sequence = max(m.Sequence, in.next)
			in.next = m.Sequence + 1
			in.entries = append(in.entries, m)
			if m.Message.ExpectsReply {
				in.asks = append(in.asks, m)
			}
			in.remember(m.Key)
			fp := r.Fingerprint
			if fp == "" {
				fp = hashedFingerprint(m.Message)
			}
			in.fps[m.Key] = fp
			in.trimSeen(MaxSeenKeys + seenSlack)
		case "consume":
			drop := map[string]bool{}
			for _, k := range r.Keys {
				drop[k] = true
			}
			in.entries = slices.DeleteFunc(in.entries, func(m *InboundMessage) bool { return drop[m.Key] })
		default:
			return applied
		}
		applied = true
	}
	return applied
}
