package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/bench"
)

// TestBenchBrokerAwake: --awake measures with one idle-priority busy loop
// per CPU, says so, and leaves none of them running.
func TestBenchBrokerAwake(t *testing.T) {
	t.Parallel()
	p := startBenchTarget(t, nil)
	s, out, errb := benchStreams()
	require.NoError(t, runBench(s, "broker", "--socket", p.BrokerSocket(), "--awake", "--json", "--pairs", "1", "--rate", "100",
		"--warmup", "0s", "--messages", "20"), errb.String())
	var res bench.BrokerResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &res), out.String())
	require.Equal(t, runtime.NumCPU(), res.Load.AwakeCPUs)
	requireSaneMeasurement(t, res.Result, true)
	require.Empty(t, busyLoopsOf(t, os.Getpid()), "the busy loops were stopped")

	s, out, errb = benchStreams()
	require.NoError(t, runBench(s, "broker", "--socket", p.BrokerSocket(), "--awake", "--pairs", "1", "--rate", "100",
		"--warmup", "0s", "--messages", "10"), errb.String())
	require.Contains(t, out.String(), "CPUs kept out of idle:")
	require.Empty(t, busyLoopsOf(t, os.Getpid()))
}

// busyLoopsOf lists the --awake busy loops among parent's children.
func busyLoopsOf(t *testing.T, parent int) []string {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	require.NoError(t, err)
	var found []string
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid …
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(parent) {
			continue
		}
		// The loop's argv exactly: a parallel test's child may carry the
		// same script among its arguments (spawn -- sh -c 'while …').
		cmd, _ := os.ReadFile(filepath.Join(filepath.Dir(st), "cmdline"))
		if string(cmd) == "/bin/sh\x00-c\x00while :; do :; done\x00" {
			found = append(found, st)
		}
	}
	return found
}
