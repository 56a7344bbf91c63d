package intercom

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// A state file the ecosystem reads whole — an inbox, an outbox — costs a
// rewrite (temp file, fsync, rename, fsync of the directory) per change if
// it is kept only in its own format. So changes are appended as JSON lines
// to a journal beside it, <file>.journal, fsynced where the caller waits
// for the disk, and the file is rewritten whole (a snapshot, spec §5.5)
// only when the journal has grown as large as the file (at least
// journalMin), a second after the last append, when the owner asks for it,
// and on close, which also removes the journal. Opening replays the
// journal over the file.
//
// A reader in another process that reads the journal before the file sees
// a complete state even while the file is being compacted: the snapshot is
// written before the journal is emptied. A reader that knows only the file
// (a TypeScript client) sees a complete one after a clean close; after a
// crash, what only the journal holds reaches it once agent-fleet has
// opened the state again.

const (
	// journalMin is the journal size below which it is never compacted
	// for its size.
	journalMin = 64 << 10
	// journalIdle is how long after the last append a non-empty journal
	// is compacted into the file.
	journalIdle = time.Second
)

// writeKind is what the next write does with its data.
type writeKind int

const (
	writeRecords  writeKind = iota // append to the journal
	writeSnapshot                  // replace the file, empty the journal
)

func journalPath(file string) string { return file + ".journal" }

// journal is the write side of such a file: the render and writeFile of
// its fileWriter (w). The owner's mutex, which the fileWriter holds, guards
// everything but what the one write under way uses (file, bytes,
// snapBytes). The owner appends records to pending and numbers the change
// (w.changed); sets compact where a change has no record.
type journal struct {
	path     string                  // the state file
	snapshot func(dst []byte) []byte // appends the whole state in the file's format
	w        *fileWriter

	pending      []byte // records not yet written
	compact      bool   // the next write is a snapshot
	kind         writeKind
	failuresSeen uint64
	file         *os.File
	bytes        int64 // journal bytes on disk
	snapBytes    int64 // size of the last snapshot written
	idle         *time.Timer
	closed       bool
}

func newJournal(path string, mu *sync.Mutex, snapshot func(dst []byte) []byte) *journal {
	j := &journal{path: path, snapshot: snapshot}
	j.w = newFileWriter(path, mu, j.render)
	j.w.writeFile = j.persist
	// Made once and only reset or stopped after: the write under way
	// arms it without the mutex.
	j.idle = time.AfterFunc(time.Hour, j.idleCompact)
	j.idle.Stop()
	return j
}

// replayed notes that a journal of n bytes, read at open, was applied: the
// first write puts it into the file and removes it.
func (j *journal) replayed(n int) {
	if n > 0 {
		j.compact = true
		j.bytes = int64(n)
	}
}

// render is the fileWriter's: the records not yet written, or the whole
// state when a snapshot is due. Called with mu held.
func (j *journal) render(dst []byte) []byte {
	if j.w.failures != j.failuresSeen {
		// A failed append may have left a torn line: only a snapshot
		// (which empties the journal) is safe now.
		j.failuresSeen = j.w.failures
		j.compact = true
	}
	if j.compact || j.closed || j.bytes+int64(len(j.pending)) >= max(journalMin, j.snapBytes) {
		j.kind, j.compact = writeSnapshot, false
		j.pending = j.pending[:0]
		out := j.snapshot(dst)
		j.snapBytes = int64(len(out))
		return out
	}
	j.kind = writeRecords
	out := append(dst, j.pending...)
	j.pending = j.pending[:0]
	return out
}

// persist is the fileWriter's writeFile: it carries out what render
// prepared. Writes are serialized by the fileWriter, so the state it
// touches is never used by two at once.
func (j *journal) persist(path string, data []byte) error {
	if j.kind == writeSnapshot {
		if err := WriteFileAtomic(path, data); err != nil {
			return err
		}
		// Losing this in a crash is harmless: a replay skips what the
		// file holds.
		switch {
		case j.file != nil && j.bytes > 0:
			if err := j.file.Truncate(0); err != nil {
				return fmt.Errorf("empty %s: %w", journalPath(path), err)
			}
		case j.file == nil && j.bytes > 0: // the one replayed at open
			if err := os.Remove(journalPath(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove %s: %w", journalPath(path), err)
			}
		}
		j.bytes = 0
		return nil
	}
	if len(data) == 0 {
		return nil
	}
	if j.file == nil {
		f, err := os.OpenFile(journalPath(path), os.O_WRONLY|os.O_APPEND|os.O_CREATE, FileMode)
		if err != nil {
			return fmt.Errorf("open %s: %w", journalPath(path), err)
		}
		if err := syncDir(filepath.Dir(path)); err != nil {
			f.Close()
			return err
		}
		j.file = f
	}
	n, err := j.file.Write(data)
	j.bytes += int64(n)
	if err == nil {
		err = j.file.Sync()
	}
	if err != nil {
		return fmt.Errorf("append to %s: %w", journalPath(path), err)
	}
	j.armIdle()
	return nil
}

// armIdle schedules a compaction journalIdle from now, so the file catches
// up for other readers once changes stop. Called with mu held, or by the
// write under way.
func (j *journal) armIdle() { j.idle.Reset(journalIdle) }

// idleCompact is the idle timer's: it starts a snapshot unless the journal
// is empty. It waits out a write under way, which owns bytes.
func (j *journal) idleCompact() {
	j.w.mu.Lock()
	defer j.w.mu.Unlock()
	for j.w.writing {
		j.w.cond.Wait()
	}
	if j.closed || (j.bytes == 0 && len(j.pending) == 0) {
		return
	}
	j.compact = true
	j.w.changed()
	j.w.soon()
}

// close writes the whole state into the file and removes the journal; a
// later change is written as a snapshot. Called with mu held.
func (j *journal) close() error {
	j.closed = true
	j.idle.Stop()
	if j.path == "" {
		return nil
	}
	for j.w.writing { // the journal is the write's until it ends
		j.w.cond.Wait()
	}
	if j.file != nil || j.bytes > 0 || j.w.dirty() {
		j.compact = true
		if err := j.w.sync(j.w.changed()); err != nil {
			return err
		}
	}
	if j.file != nil {
		err := j.file.Close()
		j.file = nil
		if err != nil {
			return err
		}
	}
	if err := os.Remove(journalPath(j.path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// appendListRecord adds the journal line {"op":OP,"FIELD":[VALUES]} to
// dst: op and field are literals of the caller's, values any strings.
func appendListRecord(dst []byte, op, field string, values []string) []byte {
	dst = append(dst, `{"op":"`+op+`","`+field+`":[`...)
	for i, v := range values {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = wire.AppendString(dst, v)
	}
	return append(dst, "]}\n"...)
}

// readJournaled reads a state file and its journal; a missing one is nil.
// The journal is read first: a compaction by a process that still holds
// the state between the two reads puts what the journal held into the
// file read second, where replay skips it.
func readJournaled(file string) (data, journal []byte, err error) {
	removeStaleTemps(file)
	journal, err = os.ReadFile(journalPath(file))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("read %s: %w", journalPath(file), err)
	}
	data, err = os.ReadFile(file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("read %s: %w", file, err)
	}
	return data, journal, nil
}

// FoldJournals writes what the session sessionID left in the journals of
// its inbox and outbox into their files and removes the journals, as the
// session's Close does: for a session whose holder was killed, once
// nothing holds it. Where there is no journal nothing is opened or
// written.
func FoldJournals(p Paths, sessionID string) error {
	var errs []error
	if _, err := os.Stat(journalPath(p.Inbox(sessionID))); err == nil {
		in, err := OpenInbox(p, sessionID)
		if err == nil {
			err = in.Close()
		}
		errs = append(errs, err)
	}
	if _, err := os.Stat(journalPath(p.Outbox(sessionID))); err == nil {
		o, err := OpenOutbox(p, sessionID)
		if err == nil {
			err = o.Close()
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
