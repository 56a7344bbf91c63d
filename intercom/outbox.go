package intercom

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// MaxOutboxEntries bounds a session's durable outbox (spec §5.3).
const MaxOutboxEntries = 256

// OutboxEntry is one queued send, in the file format the TypeScript clients
// share: {"to","message","queuedAt"}.
type OutboxEntry struct {
	To       string          `json:"to"`
	Message  json.RawMessage `json:"message"`
	QueuedAt float64         `json:"queuedAt"` // epoch ms
	id       string
}

// MessageID is the id of the queued message.
func (e OutboxEntry) MessageID() string { return e.id }

// Outbox is a session's durable outbox (spec §5.3): every send is written
// here before its frame goes out and removed once the broker reports it
// delivered or definitively failed; whatever remains is replayed after the
// next registration under the same session id, by this process or the next.
//
// The file is journaled (journal.go, outbox_journal.go): a send is an
// "add" record appended and fsynced before Enqueue returns, and concurrent
// sends share one write (see fileWriter). A removal is a "remove" record
// written with the next write, or by the compaction a second after the
// last one, never on the path of a send: after a crash an entry whose
// outcome was known may be replayed, which the broker's and the
// receiver's deduplication absorb. Flush writes everything; Close, which
// Client.Close calls, also writes the whole outbox into its file and
// removes the journal. Safe for concurrent use.
type Outbox struct {
	path    string
	mu      sync.Mutex
	entries []OutboxEntry
	fps     map[string][32]byte // message id → fingerprint
	j       *journal
	w       *fileWriter // j's
}

// OpenOutbox loads (or starts) the outbox of sessionID: its file, with its
// journal replayed over it. A file that cannot be read as an outbox is kept
// aside as <file>.corrupt-<ms>.
func OpenOutbox(p Paths, sessionID string) (*Outbox, error) {
	path := p.Outbox(sessionID)
	if err := EnsureDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	data, journal, err := readJournaled(path)
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	o := newOutbox(path)
	if data != nil {
		var st struct {
			Version int           `json:"version"`
			Entries []OutboxEntry `json:"entries"`
		}
		if json.Unmarshal(data, &st) != nil || st.Version != 1 || st.Entries == nil || !o.adopt(st.Entries) {
			keepAside(path)
			o = newOutbox(path)
		}
	}
	o.replay(journal)
	// What the journal held goes into the file with the first write.
	o.j.replayed(len(journal))
	return o, nil
}

func newOutbox(path string) *Outbox {
	o := &Outbox{path: path, fps: make(map[string][32]byte)}
	o.j = newJournal(path, &o.mu, o.encode)
	o.w = o.j.w
	return o
}

func (o *Outbox) adopt(entries []OutboxEntry) bool {
	for _, e := range entries {
		if !o.add(e) {
			return false
		}
	}
	return true
}

// add takes e into memory unless its message is already queued; false
// when its message does not parse.
func (o *Outbox) add(e OutboxEntry) bool {
	m, err := wire.ParseMessage(e.Message)
	if err != nil {
		return false
	}
	if _, ok := o.fps[m.ID]; ok {
		return true
	}
	e.id = m.ID
	o.entries = append(o.entries, e)
	o.fps[m.ID] = m.Fingerprint(e.To)
	return true
}

// keepAside renames a corrupt state file to <path>.corrupt-<ms>.
func keepAside(path string) {
	aside := path + ".corrupt-" + strconv.FormatInt(time.Now().UnixMilli(), 10)
	if os.Rename(path, aside) == nil {
		_ = os.Chmod(aside, FileMode)
	}
}

// Enqueue durably records a send before it is written to the broker: it
// returns once the entry is on disk. It returns false when the same message
// is already queued (a retry).
func (o *Outbox) Enqueue(to string, m *wire.MessageInfo) (added bool, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fp := m.Fingerprint(to)
	if prev, ok := o.fps[m.ID]; ok {
		if prev != fp {
			return false, fmt.Errorf("%w: %s", ErrOutboxConflict, m.ID)
		}
		return false, o.w.sync(o.w.changes) // queued, perhaps not yet written
	}
	if len(o.entries) >= MaxOutboxEntries {
		return false, ErrOutboxFull
	}
	e := OutboxEntry{To: to, Message: m.Raw, QueuedAt: float64(time.Now().UnixMilli()), id: m.ID}
	o.entries = append(o.entries, e)
	o.fps[m.ID] = fp
	o.j.pending = appendAddRecord(o.j.pending, e)
	if err := o.w.sync(o.w.changed()); err != nil {
		// The write that failed makes the next one a snapshot, which
		// leaves this entry out of the file and the journal.
		o.drop(m.ID)
		o.w.changed()
		return false, err
	}
	return true, nil
}

// drop removes an entry from memory. Called with mu held.
func (o *Outbox) drop(messageID string) bool {
	if _, ok := o.fps[messageID]; !ok {
		return false
	}
	delete(o.fps, messageID)
	for i, e := range o.entries {
		if e.id == messageID {
			o.entries = append(o.entries[:i:i], o.entries[i+1:]...)
			break
		}
	}
	return true
}

// Remove drops a message once its outcome is known. The removal reaches
// the disk with the next write, or within about a second (journalIdle),
// without the caller waiting for it.
func (o *Outbox) Remove(messageID string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.drop(messageID) {
		o.j.pending = appendRemoveRecord(o.j.pending, messageID)
		o.w.changed()
		o.j.armIdle()
	}
	return nil
}

// Flush returns once every change so far is on disk (in the file or its
// journal).
func (o *Outbox) Flush() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.w.sync(o.w.changes)
}

// Close writes the whole outbox into its file, in the format the
// TypeScript clients read, and removes the journal. The outbox stays
// usable: later changes are written to the file directly.
func (o *Outbox) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.j.close()
}

// Has reports whether messageID is queued.
func (o *Outbox) Has(messageID string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.fps[messageID]
	return ok
}

// HasFor reports whether a queued send is addressed to session.
func (o *Outbox) HasFor(session string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range o.entries {
		if e.To == session {
			return true
		}
	}
	return false
}

// Entries returns the queued sends, oldest first.
func (o *Outbox) Entries() []OutboxEntry {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]OutboxEntry(nil), o.entries...)
}

// Len is the number of queued sends.
func (o *Outbox) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.entries)
}

// Clear drops every queued send (a session that ends for good, spec §5.3).
func (o *Outbox) Clear() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.entries) == 0 {
		return o.w.sync(o.w.changes)
	}
	o.entries, o.fps = nil, make(map[string][32]byte)
	o.j.compact = true
	return o.w.sync(o.w.changed())
}

// encode renders the outbox file. Called with mu held.
func (o *Outbox) encode(dst []byte) []byte {
	dst = append(dst, `{"version":1,"entries":[`...)
	for i, e := range o.entries {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '{')
		dst = appendEntryFields(dst, e)
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}

// appendEntryFields adds the fields of e's file form, without braces, in
// the order the TypeScript clients write them.
func appendEntryFields(dst []byte, e OutboxEntry) []byte {
	dst = append(dst, `"to":`...)
	dst = wire.AppendString(dst, e.To)
	dst = append(dst, `,"message":`...)
	dst = append(dst, e.Message...)
	dst = append(dst, `,"queuedAt":`...)
	return wire.AppendNumber(dst, e.QueuedAt)
}
