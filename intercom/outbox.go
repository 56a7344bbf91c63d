package intercom

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
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
// Concurrent sends share writes (see fileWriter). A removal is written
// with the next write, or soon in the background, never on the path of a
// send: after a crash an entry whose outcome was known may be replayed,
// which the broker's and the receiver's deduplication absorb. Flush writes
// everything; Client.Close calls it. Safe for concurrent use.
type Outbox struct {
	path    string
	mu      sync.Mutex
	entries []OutboxEntry
	fps     map[string][32]byte // message id → fingerprint
	w       *fileWriter
}

// OpenOutbox loads (or starts) the outbox of sessionID. A file that cannot
// be read as an outbox is kept aside as <file>.corrupt-<ms>.
func OpenOutbox(p Paths, sessionID string) (*Outbox, error) {
	path := p.Outbox(sessionID)
	if err := EnsureDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	o := &Outbox{path: path, fps: make(map[string][32]byte)}
	o.w = newFileWriter(path, &o.mu, o.encode)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return o, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	var st struct {
		Version int           `json:"version"`
		Entries []OutboxEntry `json:"entries"`
	}
	if json.Unmarshal(data, &st) != nil || st.Version != 1 || st.Entries == nil || !o.adopt(st.Entries) {
		keepAside(path)
		o.entries, o.fps = nil, make(map[string][32]byte)
	}
	return o, nil
}

func (o *Outbox) adopt(entries []OutboxEntry) bool {
	for _, e := range entries {
		m, err := wire.ParseMessage(e.Message)
		if err != nil {
			return false
		}
		e.id = m.ID
		o.entries = append(o.entries, e)
		o.fps[m.ID] = m.Fingerprint(e.To)
	}
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
	o.entries = append(o.entries, OutboxEntry{To: to, Message: m.Raw, QueuedAt: float64(time.Now().UnixMilli()), id: m.ID})
	o.fps[m.ID] = fp
	if err := o.w.sync(o.w.changed()); err != nil {
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
// the disk soon, without the caller waiting for it.
func (o *Outbox) Remove(messageID string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.drop(messageID) {
		o.w.changed()
		o.w.soon()
	}
	return nil
}

// Flush returns once every change so far is on disk.
func (o *Outbox) Flush() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.w.sync(o.w.changes)
}

// Has reports whether messageID is queued.
func (o *Outbox) Has(messageID string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.fps[messageID]
	return ok
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
	return o.w.sync(o.w.changed())
}

// encode renders the outbox file. Called with mu held.
func (o *Outbox) encode(dst []byte) []byte {
	b := bytes.NewBuffer(dst)
	b.WriteString(`{"version":1,"entries":[`)
	for i, e := range o.entries {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"to":`)
		b.Write(wire.AppendString(nil, e.To))
		b.WriteString(`,"message":`)
		b.Write(e.Message)
		b.WriteString(`,"queuedAt":`)
		b.Write(wire.AppendNumber(nil, e.QueuedAt))
		b.WriteByte('}')
	}
	b.WriteString("]}")
	return b.Bytes()
}
