package fleet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// LogLine is one line of a worker's log and when it was written: the
// journal's time, or for a log file the time its shim saw the line land
// (logtimes.go); the zero time when that is unknown.
type LogLine struct {
	Text string
	At   time.Time
}

// LogQuery selects lines of a worker's log.
type LogQuery struct {
	// Lines is how many of the last lines to return (0: every line).
	Lines int
	// Since keeps only lines written at or after it (zero: no bound). A
	// file line of unknown time is kept unless the file was last written
	// before Since.
	Since time.Time
}

// tailWindow is how much of a log file's end a query for its last lines
// reads first; it reads the whole file when that holds fewer lines.
const tailWindow = 256 << 10

// ReadLog returns the lines of worker id's log (its newest incarnation's)
// that q selects, oldest first: from its log file, or from the journal
// where workers log there. A missing log file is an error wrapping
// fs.ErrNotExist.
func (f *Fleet) ReadLog(ctx context.Context, id string, q LogQuery) ([]LogLine, error) {
	w, err := f.cfg.Registry.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("logs %s: %w", id, err)
	}
	if w.LogPath == "" {
		lines, _, err := journalLines(ctx, w.Unit, q, "")
		if err != nil {
			return nil, fmt.Errorf("logs %s: %w", id, err)
		}
		return lines, nil
	}
	lines, _, err := readLogFile(w.LogPath, q)
	if err != nil {
		return nil, fmt.Errorf("logs %s: %w", id, err)
	}
	return lines, nil
}

// FollowLog emits the lines q selects of worker id's log, then every line
// it writes after them, until the incarnation ends (its record is final
// and everything it wrote was emitted; a last line without a newline is
// emitted then too) or ctx ends or emit fails. It returns the
// incarnation's record as it ended, or as last read when ctx ended (with
// ctx's error). New lines and the end are seen through Watch, not by
// polling.
func (f *Fleet) FollowLog(ctx context.Context, id string, q LogQuery, emit func(LogLine) error) (*Worker, error) {
	w, err := f.cfg.Registry.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("logs %s: %w", id, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fleetWatch, err := WatchFleet(ctx, f.cfg.Paths)
	if err != nil {
		return w, fmt.Errorf("logs %s: %w", id, err)
	}
	ended := func() bool {
		if latest, err := f.cfg.Registry.GetRun(ctx, w.ID, w.RunID); err == nil {
			w = latest
		}
		if w.State.Live() {
			w, _ = f.settle(ctx, w)
		}
		return !w.State.Live()
	}
	if w.LogPath == "" {
		return w, f.followJournal(ctx, w, q, emit, fleetWatch, ended)
	}
	logWatch, err := WatchFile(ctx, w.LogPath)
	if err != nil {
		return w, fmt.Errorf("logs %s: %w", id, err)
	}
	lines, off, err := readLogFile(w.LogPath, q)
	if err != nil {
		return w, fmt.Errorf("logs %s: %w", id, err)
	}
	for _, l := range lines {
		if err := emit(l); err != nil {
			return w, err
		}
	}
	fh, err := os.Open(w.LogPath)
	if err != nil {
		return w, fmt.Errorf("logs %s: %w", id, err)
	}
	defer fh.Close()
	var partial []byte
	buf := make([]byte, 32<<10)
	for {
		done := ended() // before reading: what it wrote until it ended is read below
		marks := readLogMarks(logTimesPath(w.LogPath))
		seen := func(end int64) time.Time { return seenAt(marks, end, time.Now()) }
		if fi, err := fh.Stat(); err == nil && fi.Size() < off {
			off, partial = 0, nil // capped in place (janitor): read it from its start again
		}
		for {
			n, rerr := fh.ReadAt(buf, off)
			off += int64(n)
			chunk := buf[:n]
			for len(chunk) > 0 {
				i := bytes.IndexByte(chunk, '\n')
				if i < 0 {
					partial = append(partial, chunk...)
					break
				}
				text := string(append(partial, chunk[:i]...))
				partial, chunk = partial[:0], chunk[i+1:]
				if err := emit(LogLine{Text: text, At: seen(off - int64(len(chunk)))}); err != nil {
					return w, err
				}
			}
			if rerr != nil || n == 0 {
				break
			}
		}
		if done {
			if len(partial) > 0 {
				if err := emit(LogLine{Text: string(partial), At: seen(off)}); err != nil {
					return w, err
				}
			}
			return w, nil
		}
		select {
		case <-ctx.Done():
			return w, ctx.Err()
		case <-logWatch.C:
		case <-fleetWatch.C:
		}
	}
}

// readLogFile returns the lines of the log file at path that q selects
// and the file's size as read.
func readLogFile(path string, q LogQuery) ([]LogLine, int64, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, 0, err
	}
	size := fi.Size()
	marks := readLogMarks(logTimesPath(path))
	start := int64(0)
	if q.Lines > 0 && q.Since.IsZero() && size > tailWindow {
		start = size - tailWindow
	}
	for {
		lines, err := scanLog(io.NewSectionReader(fh, start, size-start), start, start > 0, marks)
		if err != nil {
			return nil, 0, err
		}
		if q.Lines > 0 && len(lines) < q.Lines && start > 0 {
			start = 0 // the window held too few lines: read it all
			continue
		}
		lines = sinceLines(lines, q.Since, fi.ModTime())
		if q.Lines > 0 && len(lines) > q.Lines {
			lines = lines[len(lines)-q.Lines:]
		}
		return lines, size, nil
	}
}

// scanLog reads the lines of r, which begins at offset base of the file
// (dropping its first, partial line when skipFirst), with their times
// from marks.
func scanLog(r io.Reader, base int64, skipFirst bool, marks []logMark) ([]LogLine, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	off := base
	var out []LogLine
	for first := true; ; first = false {
		line, err := br.ReadBytes('\n')
		off += int64(len(line))
		if len(line) > 0 && !(first && skipFirst) {
			out = append(out, LogLine{Text: string(bytes.TrimSuffix(line, []byte("\n"))), At: markTime(marks, off)})
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// sinceLines drops the lines written before since; a line of unknown
// time is dropped only when the whole file was last written before it.
func sinceLines(lines []LogLine, since, modTime time.Time) []LogLine {
	if since.IsZero() {
		return lines
	}
	out := lines[:0]
	for _, l := range lines {
		if (!l.At.IsZero() && !l.At.Before(since)) || (l.At.IsZero() && !modTime.Before(since)) {
			out = append(out, l)
		}
	}
	return out
}

// journalEntry is what journalctl -o json gives of an entry (MESSAGE is
// a string, or an array of bytes when it is not valid UTF-8).
type journalEntry struct {
	Cursor   string          `json:"__CURSOR"`
	Realtime string          `json:"__REALTIME_TIMESTAMP"`
	Message  json.RawMessage `json:"MESSAGE"`
}

func (e journalEntry) line() LogLine {
	var text string
	if json.Unmarshal(e.Message, &text) != nil {
		var raw []byte
		var nums []int
		if json.Unmarshal(e.Message, &nums) == nil {
			for _, n := range nums {
				raw = append(raw, byte(n))
			}
		}
		text = string(raw)
	}
	l := LogLine{Text: text}
	if us, err := strconv.ParseInt(e.Realtime, 10, 64); err == nil {
		l.At = time.UnixMicro(us)
	}
	return l
}

// journalArgs are journalctl's arguments for unit's lines that q selects,
// after cursor when it is set.
func journalArgs(unit string, q LogQuery, cursor string, follow bool) []string {
	args := []string{"--user", "--unit", unit, "--no-pager", "--output", "json"}
	switch {
	case cursor != "":
		args = append(args, "--after-cursor", cursor)
	case q.Lines > 0:
		args = append(args, "--lines", strconv.Itoa(q.Lines))
	case follow:
		args = append(args, "--lines", "all")
	}
	if !q.Since.IsZero() && cursor == "" {
		args = append(args, "--since", "@"+strconv.FormatInt(q.Since.Unix(), 10))
	}
	if follow {
		args = append(args, "--follow")
	}
	return args
}

// journalLines reads unit's lines from the journal, and the cursor of
// the last.
func journalLines(ctx context.Context, unit string, q LogQuery, cursor string) ([]LogLine, string, error) {
	out, err := exec.CommandContext(ctx, "journalctl", journalArgs(unit, q, cursor, false)...).Output()
	if err != nil {
		return nil, cursor, fmt.Errorf("journalctl: %w", err)
	}
	var lines []LogLine
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var e journalEntry
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			lines, cursor = append(lines, e.line()), e.Cursor
		}
	}
	return lines, cursor, nil
}

// followJournal is FollowLog for a unit logging to the journal:
// journalctl --follow until the incarnation ends, then what the journal
// got after the last line followed.
func (f *Fleet) followJournal(ctx context.Context, w *Worker, q LogQuery, emit func(LogLine) error, changes *Watch, ended func() bool) error {
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	cmd := exec.CommandContext(fctx, "journalctl", journalArgs(w.Unit, q, "", true)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("journalctl: %w", err)
	}
	entries := make(chan journalEntry)
	go func() {
		defer close(entries)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			var e journalEntry
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				select {
				case entries <- e:
				case <-fctx.Done():
					return
				}
			}
		}
	}()
	defer func() { stop(); _ = cmd.Wait() }()
	cursor := ""
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-entries:
			if !ok {
				return errors.New("journalctl --follow ended")
			}
			cursor = e.Cursor
			if err := emit(e.line()); err != nil {
				return err
			}
		case <-changes.C:
			if !ended() {
				continue
			}
			stop()
			for e := range entries {
				cursor = e.Cursor
				if err := emit(e.line()); err != nil {
					return err
				}
			}
			rest, _, err := journalLines(ctx, w.Unit, LogQuery{}, cursor)
			if cursor == "" {
				rest, _, err = journalLines(ctx, w.Unit, q, "")
			}
			for _, l := range rest {
				if err := emit(l); err != nil {
					return err
				}
			}
			return err
		}
	}
}

// seenAt is the time of a followed line ending at end: its mark, or now
// when it is not marked yet (it landed by now), with the marks' precision
// of milliseconds so that every line's time reads alike.
func seenAt(marks []logMark, end int64, now time.Time) time.Time {
	if at := markTime(marks, end); !at.IsZero() {
		return at
	}
	return now.Truncate(time.Millisecond)
}
