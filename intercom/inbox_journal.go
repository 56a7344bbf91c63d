package intercom

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// An inbox that remembers MaxSeenKeys keys is half a megabyte; rewriting
// it for every message that arrives cost more CPU than everything else a
// client does. So what arrives is appended to a journal beside the inbox
// file (<inbox>.journal, JSON lines) and fsynced before it is
// acknowledged, and the inbox file is rewritten whole (compacted) only
// when the journal has grown as large as the file, when an ask is
// answered, deferred or pruned, after a second without arrivals, and on
// Close. The inbox file stays in the Pi format (spec §5.4): a Pi client
// that takes the session over after a clean release, or an inspecting
// manager, reads a complete file; one that takes it over after a crash
// misses what only the journal holds until agent-fleet opens the inbox
// again.
//
// Replaying the journal over the file is idempotent: a staged message
// whose key the file remembers is skipped, and marking read removes what
// is already gone, so a crash between a compaction and the journal's
// truncation loses and repeats nothing.

const (
	// journalMin is the journal size below which it is never compacted
	// for its size.
	journalMin = 64 << 10
	// journalIdle is how long after the last arrival a non-empty journal
	// is compacted into the inbox file.
	journalIdle = time.Second
)

// journalRecord is one line of the journal: "stage" (a message arrived;
// the fields of the stored message and its fingerprint) or "consume"
// (keys marked read).
type journalRecord struct {
	Op string `json:"op"`
	storedMessage
	Fingerprint string   `json:"fp,omitempty"`
	Keys        []string `json:"keys,omitempty"`
}

// writeKind is what the next inbox write does with its data.
type writeKind int

const (
	writeRecords  writeKind = iota // append to the journal
	writeSnapshot                  // replace the inbox file, empty the journal
)

func journalPath(inbox string) string { return inbox + ".journal" }

// appendStageRecord adds the journal line of a staged message to dst.
func appendStageRecord(dst []byte, m *InboundMessage, fp string) []byte {
	dst = append(dst, `{"op":"stage",`...)
	dst = appendStoredFields(dst, m)
	dst = append(dst, `,"fp":`...)
	dst = wire.AppendString(dst, fp)
	return append(dst, "}\n"...)
}

func appendConsumeRecord(dst []byte, keys []string) []byte {
	dst = append(dst, `{"op":"consume","keys":[`...)
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = wire.AppendString(dst, k)
	}
	return append(dst, "]}\n"...)
}

// replay applies journal lines over the loaded file and reports whether
// any applied. It stops at the first line that does not decode: the last
// line of a journal whose writer died mid-append (nothing on it was
// acknowledged) or damage, after which nothing can be trusted.
func (in *Inbox) replay(data []byte) (applied bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 2*wire.MaxFrameBytes)
	for sc.Scan() {
		var r journalRecord
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

// render is the fileWriter's: the journal lines not yet written, or the
// whole inbox when a compaction is due. Called with mu held.
func (in *Inbox) render(dst []byte) []byte {
	if in.w.failures != in.failuresSeen {
		// A failed append may have left a torn line: only a snapshot
		// (which empties the journal) is safe now.
		in.failuresSeen = in.w.failures
		in.compact = true
	}
	if in.compact || in.jbytes+int64(len(in.jpending)) >= max(journalMin, in.snapBytes) {
		in.kind, in.compact = writeSnapshot, false
		in.jpending = in.jpending[:0]
		out := in.encode(dst)
		in.snapBytes = int64(len(out))
		return out
	}
	in.kind = writeRecords
	out := append(dst, in.jpending...)
	in.jpending = in.jpending[:0]
	return out
}

// persist is the fileWriter's writeFile: it carries out what render
// prepared. Writes are serialized by the fileWriter, so the journal state
// it touches is never used by two at once.
func (in *Inbox) persist(path string, data []byte) error {
	if in.kind == writeSnapshot {
		if err := WriteFileAtomic(path, data); err != nil {
			return err
		}
		// Losing this in a crash is harmless: replay skips what the file
		// holds.
		switch {
		case in.journal != nil && in.jbytes > 0:
			if err := in.journal.Truncate(0); err != nil {
				return fmt.Errorf("empty the inbox journal: %w", err)
			}
		case in.journal == nil && in.jbytes > 0: // the one replayed at open
			if err := os.Remove(journalPath(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove the inbox journal: %w", err)
			}
		}
		in.jbytes = 0
		return nil
	}
	if len(data) == 0 {
		return nil
	}
	if in.journal == nil {
		f, err := os.OpenFile(journalPath(path), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("open the inbox journal: %w", err)
		}
		if err := syncDir(filepath.Dir(path)); err != nil {
			f.Close()
			return err
		}
		in.journal = f
	}
	n, err := in.journal.Write(data)
	in.jbytes += int64(n)
	if err == nil {
		err = in.journal.Sync()
	}
	if err != nil {
		return fmt.Errorf("append to the inbox journal: %w", err)
	}
	in.armIdle()
	return nil
}

// armIdle schedules a compaction once arrivals stop, so the inbox file
// catches up for other readers.
func (in *Inbox) armIdle() {
	if in.idle != nil {
		in.idle.Reset(journalIdle)
		return
	}
	in.idle = time.AfterFunc(journalIdle, func() {
		in.mu.Lock()
		defer in.mu.Unlock()
		if in.closed || (in.jbytes == 0 && len(in.jpending) == 0) {
			return
		}
		in.compact = true
		in.changedSoon()
	})
}

// closeJournal compacts the journal into the inbox file and removes it.
// Called with mu held.
func (in *Inbox) closeJournal() error {
	in.closed = true
	if in.idle != nil {
		in.idle.Stop()
	}
	if in.path == "" {
		return nil
	}
	for in.w.writing { // the journal is the write's until it ends
		in.w.cond.Wait()
	}
	if in.journal != nil || in.jbytes > 0 || in.w.dirty() {
		in.compact = true
		if err := in.w.sync(in.w.changed()); err != nil {
			return err
		}
	}
	if in.journal != nil {
		err := in.journal.Close()
		in.journal = nil
		if err != nil {
			return err
		}
	}
	if err := os.Remove(journalPath(in.path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// readJournal returns the journal beside an inbox file; none is empty.
func readJournal(inbox string) ([]byte, error) {
	data, err := os.ReadFile(journalPath(inbox))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read inbox journal: %w", err)
	}
	return data, nil
}
