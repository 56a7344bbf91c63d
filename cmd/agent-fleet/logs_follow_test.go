//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// lineReader hands out a process's output lines, with a hang guard.
type lineReader struct {
	t     *testing.T
	lines chan string
}

func readLines(t *testing.T, r io.Reader) *lineReader {
	lr := &lineReader{t: t, lines: make(chan string, 1024)}
	go func() {
		defer close(lr.lines)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			lr.lines <- sc.Text()
		}
	}()
	return lr
}

// until returns the first line for which ok holds, failing when the
// output ends first.
func (lr *lineReader) until(what string, ok func(string) bool) string {
	lr.t.Helper()
	guard := time.After(3 * time.Minute) // hang guard
	for {
		select {
		case l, more := <-lr.lines:
			require.True(lr.t, more, "the output ended before %s", what)
			if ok(l) {
				return l
			}
		case <-guard:
			lr.t.Fatalf("no %s", what)
		}
	}
}

// fleetCmd is fleetCLI's command, for a process the test reads as it runs.
func fleetCmd(t *testing.T, dir string, args ...string) (*lineReader, *lockedBuffer, func() error) {
	t.Helper()
	cmd := as(t, dir, "operator-test", args...)
	cmd.Env = append(cmd.Env, unitstest.Require(t).Env()...)
	cmd.Env = append(cmd.Env, "PATH="+os.Getenv("PATH"))
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	// Not StdoutPipe: Wait would close it while the reader may still
	// have lines to read. Wait returns once exec's copy to pw is done.
	stdout, pw := io.Pipe()
	cmd.Stdout = pw
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		pw.Close()
		done <- err
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
	})
	wait := func() error {
		select {
		case err := <-done:
			done <- err
			return err
		case <-time.After(3 * time.Minute): // hang guard
			t.Fatalf("%v did not end; stderr:\n%s", args, stderr.String())
			return nil
		}
	}
	return readLines(t, stdout), &stderr, wait
}

// A log line with --timestamps: local time to the millisecond and zone.
var stamped = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \S+ (.*)$`)

// logs -f follows a worker's output until the worker ends, then says how
// it ended; the lines carry the times the shim saw them land; --all and
// --since read the whole log and a part of it by time.
func TestLogsFollow(t *testing.T) {
	t.Parallel()
	unitstest.Require(t)
	dir := shortDir(t)
	t.Cleanup(func() {
		_, _ = fleetCLI(t, dir, "stop", "follow-w", "watched")
		stopBroker(t, dir)
	})
	// A live worker keeps the broker up across the test (an idle broker
	// leaves, and a spawn that meets it leaving fails).
	out, err := fleetCLI(t, dir, "spawn", "--id", "watched", "--", "sleep", "600")
	require.NoError(t, err, "%s", out)
	gate := filepath.Join(dir, "gate")
	out, err = fleetCLI(t, dir, "spawn", "--id", "follow-w", "--", "sh", "-c",
		fmt.Sprintf("echo one; while [ ! -e %s ]; do sleep 0.05; done; echo two; printf 'no newline'; exit 4", gate))
	require.NoError(t, err, "%s", out)

	follow, stderr, wait := fleetCmd(t, dir, "logs", "follow-w", "-f", "--timestamps")
	first := follow.until("the first line", func(l string) bool { return strings.HasSuffix(l, "one") })
	require.Regexp(t, stamped, first, "the line carries when it was written")
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	follow.until("the second line", func(l string) bool { return strings.HasSuffix(l, " two") })
	follow.until("the last, unterminated line", func(l string) bool { return strings.HasSuffix(l, " no newline") })
	require.NoError(t, wait(), "stderr: %s", stderr.String())
	require.Contains(t, stderr.String(), "agent-fleet: worker follow-w exited (exit 4)")

	out, err = fleetCLI(t, dir, "logs", "follow-w", "--all", "--timestamps", "--json")
	require.NoError(t, err, "%s", out)
	// The shim may stamp the last, unterminated line as it exits, a
	// moment after -f saw the worker end: take the end after this read.
	ended := time.Now()
	var all struct{ Lines, Times []string }
	require.NoError(t, json.Unmarshal(out, &all), "%s", out)
	require.Equal(t, []string{"one", "two", "no newline"}, all.Lines)
	require.Len(t, all.Times, 3)
	for _, ts := range all.Times {
		at, err := time.Parse(time.RFC3339Nano, ts)
		require.NoError(t, err, "a time for every line the shim saw: %q", ts)
		require.False(t, at.After(ended))
	}
	out, err = fleetCLI(t, dir, "logs", "follow-w", "--since", ended.Format(time.RFC3339Nano), "--json")
	require.NoError(t, err, "%s", out)
	require.JSONEq(t, `{"lines": []}`, string(out), "nothing was written since it ended")
	out, err = fleetCLI(t, dir, "logs", "follow-w", "--since", "1h")
	require.NoError(t, err, "%s", out)
	require.Equal(t, "one\ntwo\nno newline\n", string(out))
	out, err = fleetCLI(t, dir, "logs", "follow-w", "--all", "-n", "2")
	requireExit(t, err, exitUsage)
	require.Contains(t, string(out), "no line count")

	// list --watch, not on a terminal: a new listing at each change.
	watch, wstderr, _ := fleetCmd(t, dir, "list", "--watch", "--json")
	watch.until("the first listing", func(l string) bool {
		return strings.Contains(l, `"id":"follow-w"`) && strings.Contains(l, `"id":"watched"`)
	})
	status, _, _ := fleetCmd(t, dir, "status", "-w", "follow-w", "--json")
	var st output.Status
	require.NoError(t, json.Unmarshal([]byte(status.until("a status", func(string) bool { return true })), &st))
	require.Equal(t, "exited", st.Worker.State)
	out, err = fleetCLI(t, dir, "status", "-w", "nosuch", "--json")
	requireExit(t, err, exitNotFound) // a wrong id is not watched for ever
	out, err = fleetCLI(t, dir, "stop", "watched")
	require.NoError(t, err, "%s", out)
	watch.until("the stopped worker in a listing", func(l string) bool {
		return strings.Contains(l, `"id":"watched"`) && strings.Contains(l, `"state":"stopped"`)
	})
	require.Empty(t, wstderr.String())
}

// An exec worker's command writes its standard output and error to the
// log file itself, as systemd opened it: interleaved lines stay in the
// order they were written, and nothing goes through the shim.
func TestWorkerOutputReachesTheLogDirectly(t *testing.T) {
	t.Parallel()
	unitstest.Require(t)
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	fds := filepath.Join(dir, "fds")
	out, err := fleetCLI(t, dir, "spawn", "--id", "order-w", "--", "sh", "-c",
		fmt.Sprintf(`echo one; echo two >&2; echo three; fds=$(readlink /proc/$$/fd/1 /proc/$$/fd/2); echo "$fds" > %s`, fds))
	require.NoError(t, err, "%s", out)
	out, err = fleetCLI(t, dir, "wait", "order-w")
	require.NoError(t, err, "%s", out)
	out, err = fleetCLI(t, dir, "logs", "order-w", "--all", "--json")
	require.NoError(t, err, "%s", out)
	var all struct{ Lines []string }
	require.NoError(t, json.Unmarshal(out, &all), "%s", out)
	require.Equal(t, []string{"one", "two", "three"}, all.Lines)
	got, err := os.ReadFile(fds)
	require.NoError(t, err)
	for _, fd := range strings.Fields(string(got)) {
		require.True(t, strings.HasSuffix(fd, ".log"), "a descriptor on the log file, not a pipe: %s", got)
	}
}
