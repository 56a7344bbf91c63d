package intercom

import "sync"

// fileWriter writes the successive states of one durable file with
// WriteFileAtomic, for an owner that keeps the state in memory under its
// own mutex.
//
// Every change is numbered. A change that must be on disk before its caller
// goes on (an outbox entry before its send, an inbox batch before its
// acknowledgement) waits in sync for a write that includes it; changes made
// while a write is under way are written together by the next one, so
// concurrent callers share one fsync (group commit). A change that may be
// lost in a crash (a message marked read, an outbox entry whose outcome is
// known: replaying it is deduplicated) is written by whatever write comes
// next, or by a background write that soon starts.
//
// All methods are called with the owner's mutex held; sync and the
// background write release it while the file is written.
type fileWriter struct {
	path   string
	mu     *sync.Mutex
	render func(dst []byte) []byte // appends the current state to dst; called with mu held
	cond   *sync.Cond
	buf    []byte // the last rendering's memory, reused: one write at a time

	changes  uint64 // numbered changes made
	written  uint64 // changes on disk
	writing  bool   // a write is under way (mu released)
	queued   bool   // a background write is started
	failures uint64 // writes that failed
	err      error  // the last failure
	errUpTo  uint64 // changes the last failed write held
	writes   uint64 // writes started

	writeFile func(path string, data []byte) error // WriteFileAtomic; tests replace it
}

func newFileWriter(path string, mu *sync.Mutex, render func(dst []byte) []byte) *fileWriter {
	return &fileWriter{path: path, mu: mu, render: render, cond: sync.NewCond(mu), writeFile: WriteFileAtomic}
}

// changed numbers a change of the state and returns its number.
func (w *fileWriter) changed() uint64 {
	w.changes++
	return w.changes
}

// dirty reports whether some change is not on disk.
func (w *fileWriter) dirty() bool { return w.written < w.changes }

// sync returns once change n is on disk, writing the current state itself
// unless a write is under way. It returns the error of a write that held
// change n and failed while sync waited; a later sync tries again.
func (w *fileWriter) sync(n uint64) error {
	failures := w.failures
	for {
		switch {
		case w.written >= n:
			return nil
		case w.failures > failures && w.errUpTo >= n:
			return w.err
		case !w.writing:
			w.write()
		default:
			w.cond.Wait()
		}
	}
}

func (w *fileWriter) write() {
	w.writing = true
	w.writes++
	upTo := w.changes
	data := w.render(w.buf[:0])
	w.mu.Unlock()
	err := w.writeFile(w.path, data)
	w.mu.Lock()
	w.writing = false
	w.buf = data
	if err == nil {
		w.written = max(w.written, upTo)
	} else {
		w.failures++
		w.err, w.errUpTo = err, upTo
	}
	w.cond.Broadcast()
}

// soon makes sure the changes made so far are written without waiting for
// it: by a write under way or queued, else by a background write started
// now. A failed background write is retried by the next sync.
func (w *fileWriter) soon() {
	if w.queued || !w.dirty() {
		return
	}
	w.queued = true
	go func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.queued = false
		_ = w.sync(w.changes)
	}()
}
