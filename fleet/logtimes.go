package fleet

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// A worker's log file has no timestamps: systemd appends the command's
// output to it directly (StandardOutput=append:), and nothing of
// agent-fleet's stands in that path, so no output is lost when the shim
// dies. The times are a side index instead, <id>-<run>.times beside
// <id>-<run>.log, which the worker's shim keeps while it runs
// (IndexLogTimes): a line "<size> <unix ms>" each time it sees the file
// grow, meaning the file held <size> bytes at that moment. A line's time
// is that of the first mark covering its end: when the shim saw it land
// (within 100 ms while output flows), so the lines of one burst share a
// time. Lines
// the shim did not see (it was killed, or the index was lost) have no
// time; `logs --timestamps` shows them as unknown.

// logTimesPath is the index of the log file at logPath.
func logTimesPath(logPath string) string { return strings.TrimSuffix(logPath, ".log") + ".times" }

// logMark says that the log file held Size bytes at At.
type logMark struct {
	size int64
	at   time.Time
}

// readLogMarks reads an index, in file order (sizes ascending); a missing
// or torn line is skipped.
func readLogMarks(path string) []logMark {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []logMark
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		sizeText, msText, ok := strings.Cut(string(line), " ")
		size, err1 := strconv.ParseInt(sizeText, 10, 64)
		ms, err2 := strconv.ParseInt(msText, 10, 64)
		if !ok || err1 != nil || err2 != nil || (len(out) > 0 && size < out[len(out)-1].size) {
			continue
		}
		out = append(out, logMark{size: size, at: time.UnixMilli(ms)})
	}
	return out
}

// markTime is the time of the first mark at or past end (zero: none).
func markTime(marks []logMark, end int64) time.Time {
	i := sort.Search(len(marks), func(i int) bool { return marks[i].size >= end })
	if i == len(marks) {
		return time.Time{}
	}
	return marks[i].at
}

// How often IndexLogTimes looks at the log's size: every markFast while
// it grows, slowing to markSlow after markIdle looks that saw nothing new.
// A look is one stat. It does not use inotify: instances are a per-user
// limit (fs.inotify.max_user_instances, often 128) shared with the user's
// editors, and hundreds of workers would use them up.
const (
	markFast = 100 * time.Millisecond
	markSlow = time.Second
	markIdle = 10
)

// IndexLogTimes keeps the time index of the log file at logPath (see
// above) until ctx ends, then marks the file's size once more and
// returns. The worker's shim runs it; an error means no index is kept
// (the log itself is untouched). A line's time is thus when a look saw it,
// within markFast while output flows and markSlow after a pause.
func IndexLogTimes(ctx context.Context, logPath string) error {
	fh, err := os.OpenFile(logTimesPath(logPath), os.O_WRONLY|os.O_CREATE|os.O_APPEND, intercom.FileMode)
	if err != nil {
		return err
	}
	defer fh.Close()
	var last int64
	if marks := readLogMarks(fh.Name()); len(marks) > 0 {
		last = marks[len(marks)-1].size
	}
	mark := func() bool {
		fi, err := os.Stat(logPath)
		if err != nil {
			return false
		}
		grew := fi.Size() > last
		if grew {
			fmt.Fprintf(fh, "%d %d\n", fi.Size(), time.Now().UnixMilli())
		}
		last = fi.Size() // smaller: capped, and the index shifted with it
		return grew
	}
	mark()
	t := time.NewTimer(markFast)
	defer t.Stop()
	idle := 0
	for {
		select {
		case <-ctx.Done():
			mark()
			return nil
		case <-t.C:
			next := markFast
			if mark() {
				idle = 0
			} else if idle++; idle >= markIdle {
				next = markSlow
			}
			t.Reset(next)
		}
	}
}

// shiftLogTimes rewrites the index of a log file capped in place: the
// first dropped bytes are gone and head was written before the rest, so
// every kept mark moves by len(head)-dropped, and head gets the time of
// the cap. It is rewritten in place (the shim appends to the same file);
// a mark the shim appends meanwhile may be lost, costing only the time of
// the lines it covered.
func shiftLogTimes(logPath string, dropped, head int64, at time.Time) error {
	path := logTimesPath(logPath)
	marks := readLogMarks(path)
	if marks == nil {
		return nil
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d %d\n", head, at.UnixMilli())
	for _, m := range marks {
		if m.size > dropped {
			fmt.Fprintf(&b, "%d %d\n", m.size-dropped+head, m.at.UnixMilli())
		}
	}
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer fh.Close()
	if err := fh.Truncate(0); err != nil {
		return err
	}
	_, err = fh.WriteAt(b.Bytes(), 0)
	return err
}
