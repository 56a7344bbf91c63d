package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/bench"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// requireSaneMeasurement checks the invariants every measurement holds,
// whatever the machine's speed.
func requireSaneMeasurement(t *testing.T, m *bench.Measurement, withBroker bool) {
	t.Helper()
	require.Positive(t, m.Delivered)
	require.Equal(t, m.Delivered, m.Latency.N)
	require.Positive(t, m.DurationMs)
	require.InEpsilon(t, float64(m.Delivered)/(m.DurationMs/1000), m.PerSecond, 0.02)
	l := m.Latency
	require.Positive(t, l.P50Ms)
	require.LessOrEqual(t, l.P50Ms, l.P90Ms)
	require.LessOrEqual(t, l.P90Ms, l.P99Ms)
	require.LessOrEqual(t, l.P99Ms, l.P999Ms)
	require.LessOrEqual(t, l.P999Ms, l.MaxMs)
	if runtime.GOOS == "linux" && withBroker {
		require.NotNil(t, m.BrokerCPU, "broker CPU is read from /proc")
		require.GreaterOrEqual(t, m.BrokerCPU.PerMessageUs, 0.0)
		require.NotNil(t, m.BrokerMemory)
		require.Positive(t, m.BrokerMemory.RSSMiB)
		require.GreaterOrEqual(t, m.BrokerMemory.PeakRSSMiB, m.BrokerMemory.RSSMiB)
		require.NotNil(t, m.BenchCPU)
	}
}

// TestBenchBrokerStartsAndStopsItsBroker runs `bench broker --json` as a
// process: it starts a broker of its own, measures it, and leaves nothing.
func TestBenchBrokerStartsAndStopsItsBroker(t *testing.T) {
	t.Parallel()
	cmd := agentFleet(t, shortDir(t), "bench", "broker", "--json", "--pairs", "2", "--rate", "0", "--window", "8",
		"--warmup", "100ms", "--messages", "600", "--segment", "200")
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)

	var raw map[string]any
	require.NoError(t, json.Unmarshal(out, &raw))
	for _, k := range []string{"broker", "load", "driver", "result", "drift", "includes", "presenceUpdates"} {
		require.Contains(t, raw, k)
	}
	var res bench.BrokerResult
	require.NoError(t, json.Unmarshal(out, &res))
	require.True(t, res.Broker.Started)
	require.Equal(t, "agent-fleet", res.Broker.Implementation)
	require.Contains(t, res.Broker.RateLimit, "raised", "an unpaced load needs the rate limit raised")
	require.Equal(t, bench.LoadView{Pairs: 2, TextBytes: 256, RatePerSender: 0, Window: 8, Sessions: 4, Scopes: 1, WarmupMs: 100}, res.Load)
	requireSaneMeasurement(t, res.Result, true)
	require.GreaterOrEqual(t, res.Result.Delivered, 600)

	// Segments cover the measured messages back to back, each (but the
	// last) at least --segment long. How many there are depends on the
	// machine's speed: the load is unpaced and a segment ends at the first
	// look (every 2 ms) after it is long enough.
	segs := res.Result.Segments
	require.NotEmpty(t, segs)
	next := 0
	for i, s := range segs {
		require.Equal(t, i+1, s.Index)
		require.Equal(t, next, s.From)
		require.Equal(t, s.Messages, s.Latency.N)
		if i < len(segs)-1 {
			require.GreaterOrEqual(t, s.Messages, 200)
		}
		next += s.Messages
	}
	require.Equal(t, res.Result.Delivered, next)
	if len(segs) > 1 {
		require.NotNil(t, res.Drift, "segments are compared")
	}
	require.NotContains(t, raw, "targets", "no absolute pass/fail figures")

	if runtime.GOOS == "linux" {
		require.Positive(t, res.Broker.PID)
		require.False(t, intercom.ProcessAlive(res.Broker.PID), "the broker started for the run was stopped")
	}
	_, err = os.Stat(filepath.Dir(filepath.Dir(res.Broker.Socket)))
	require.ErrorIs(t, err, os.ErrNotExist, "the run's agent directory was removed")
}

// startBenchTarget runs a broker in this process for --socket runs.
func startBenchTarget(t *testing.T, tweak func(*broker.Config)) intercom.Paths {
	t.Helper()
	return intercomtest.ListenAndServe(t, func(c *broker.Config) {
		c.Paths = intercom.NewPaths(shortDir(t))
		c.CheckPeerUID = false
		if tweak != nil {
			tweak(c)
		}
	})
}

func benchStreams() (*factory.IOStreams, *bytes.Buffer, *bytes.Buffer) { return testStreams() }

// runBench runs `bench ARGS…` in this process, reporting errors only
// through its result, as the root command does.
func runBench(s *factory.IOStreams, args ...string) error {
	cmd := newBenchCmd(testFactory(s))
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs(args)
	return cmd.Execute()
}

// TestBenchBrokerAgainstASocket measures a broker it did not start, at
// scale (idle sessions in scopes, presence), and leaves it running.
func TestBenchBrokerAgainstASocket(t *testing.T) {
	t.Parallel()
	p := startBenchTarget(t, func(c *broker.Config) { c.RateCapacity, c.RateRefill = 1e6, 1e6 })
	s, out, errb := benchStreams()
	require.NoError(t, runBench(s, "broker", "--socket", p.BrokerSocket(), "--json", "--pairs", "2", "--rate", "200",
		"--sessions", "24", "--scopes", "3", "--presence-interval", "200ms", "--warmup", "100ms", "--messages", "40"), errb.String())
	var res bench.BrokerResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &res), out.String())
	require.False(t, res.Broker.Started)
	require.Equal(t, "agent-fleet", res.Broker.Implementation, "it answers the local API")
	require.Equal(t, os.Getpid(), res.Broker.PID, "the pid comes from broker.pid")
	require.Equal(t, 24, res.Load.Sessions)
	require.Equal(t, 3, res.Load.Scopes)
	require.Positive(t, res.PresenceUpdates)
	requireSaneMeasurement(t, res.Result, true)
	h, _ := intercom.ProbeBroker(context.Background(), p)
	require.Equal(t, intercom.Compatible, h, "the broker is left running")
	st, err := (&intercom.LocalAPIClient{Path: p.LocalAPISocket()}).Stats(context.Background())
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err = (&intercom.LocalAPIClient{Path: p.LocalAPISocket()}).Stats(context.Background())
		return err == nil && st.Sessions == 0
	}, 5*time.Second, 10*time.Millisecond, "every bench session unregistered")
	require.Zero(t, st.PendingDeliveries)

	// The text output names the figures.
	s, out, errb = benchStreams()
	require.NoError(t, runBench(s, "broker", "--socket", p.BrokerSocket(), "--pairs", "1", "--rate", "100", "--warmup", "0s", "--duration", "300ms"), errb.String())
	for _, want := range []string{"Broker benchmark:", "delivered", "send → delivered", "p99.9", "broker CPU", "Load: 1 pairs, 100 msg/s each"} {
		require.Contains(t, out.String(), want)
	}
}

// TestBenchBrokerAgainstAnother: --against runs the broker under test and
// the other one in turns, reports every run and the ratios, and leaves the
// other broker running.
func TestBenchBrokerAgainstAnother(t *testing.T) {
	t.Parallel()
	ours, other := startBenchTarget(t, nil), startBenchTarget(t, nil)
	s, out, errb := benchStreams()
	require.NoError(t, runBench(s, "broker", "--socket", ours.BrokerSocket(), "--against", other.BrokerSocket(), "--rounds", "2",
		"--json", "--pairs", "1", "--rate", "100", "--warmup", "0s", "--messages", "20"), errb.String())
	var res bench.BrokerComparison
	require.NoError(t, json.Unmarshal(out.Bytes(), &res), out.String())
	require.Equal(t, 2, res.Rounds)
	require.Equal(t, ours.BrokerSocket(), res.Broker.Socket)
	require.Equal(t, other.BrokerSocket(), res.Against.Socket)
	var order []string
	for _, r := range res.Runs {
		order = append(order, fmt.Sprintf("%d %s", r.Round, r.Broker))
		requireSaneMeasurement(t, r.Result, true)
	}
	require.Equal(t, []string{"1 agent-fleet", "1 other", "2 other", "2 agent-fleet"}, order, "the first of a round alternates")
	for _, side := range []string{"agent-fleet", "other"} {
		require.Positive(t, res.Medians[side].P50Ms)
	}
	require.NotNil(t, res.Ratios.P50)
	require.InDelta(t, res.Medians["other"].P50Ms/res.Medians["agent-fleet"].P50Ms, *res.Ratios.P50, 0.01)
	h, _ := intercom.ProbeBroker(context.Background(), other)
	require.Equal(t, intercom.Compatible, h, "the other broker is left running")

	s, out, errb = benchStreams()
	require.NoError(t, runBench(s, "broker", "--socket", ours.BrokerSocket(), "--against", other.BrokerSocket(), "--rounds", "1",
		"--pairs", "1", "--rate", "100", "--warmup", "0s", "--messages", "10"), errb.String())
	for _, want := range []string{"Broker comparison", "round", "Medians", "p50 send → delivered", "(other ÷ agent-fleet)"} {
		require.Contains(t, out.String(), want)
	}
	require.NotContains(t, out.String(), "MISSED")
}

// TestBenchBrokerSaysWhenTheRateLimitBites: a load above the broker's rate
// limit ends with the broker's error and what to change.
func TestBenchBrokerSaysWhenTheRateLimitBites(t *testing.T) {
	t.Parallel()
	p := startBenchTarget(t, func(c *broker.Config) { c.RateCapacity, c.RateRefill = 20, 10 })
	s, _, _ := benchStreams()
	err := runBench(s, "broker", "--socket", p.BrokerSocket(), "--pairs", "1", "--rate", "0", "--warmup", "0s", "--duration", "2s")
	require.Error(t, err)
	require.Contains(t, err.Error(), string(wire.CodeRateLimited))
	require.Contains(t, err.Error(), "--rate-capacity")
}

func TestBenchFlagsAreChecked(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"broker", "--window", "65"},
		{"broker", "--pairs", "0"},
		{"broker", "--sessions", "3", "--pairs", "2"},
		{"broker", "--socket", "/nonexistent/intercom/broker.sock"},
		{"broker", "--against", "/nonexistent/intercom/broker.sock"},
		{"broker", "--against-pid", "12"},
		{"broker", "--rounds", "-1"},
		{"client", "--rate", "-1"},
	} {
		s, _, _ := benchStreams()
		err := runBench(s, args...)
		require.Error(t, err, "%v", args)
		require.Equal(t, exitUsage, exitCode(err), "%v: %v", args, err)
	}
}

// TestBenchClientBesideRawFrames runs `bench client --json` against a
// broker it did not start: both runs are measured and the sessions' files
// are removed afterwards.
func TestBenchClientBesideRawFrames(t *testing.T) {
	t.Parallel()
	p := startBenchTarget(t, nil)
	s, out, errb := benchStreams()
	require.NoError(t, runBench(s, "client", "--socket", p.BrokerSocket(), "--json", "--pairs", "2", "--rate", "40", "--window", "4",
		"--warmup", "100ms", "--messages", "20"), errb.String())
	var raw map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &raw))
	for _, k := range []string{"broker", "load", "client", "raw", "durabilityCost", "includes"} {
		require.Contains(t, raw, k)
	}
	var res bench.ClientResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &res))
	requireSaneMeasurement(t, res.Raw, true)
	requireSaneMeasurement(t, res.Client, true)
	require.InDelta(t, res.Client.Latency.P50Ms-res.Raw.Latency.P50Ms, res.DurabilityCost.P50AddedMs, 0.0011)
	for _, dir := range []string{"inbox", "outbox"} {
		entries, _ := os.ReadDir(filepath.Join(p.Dir, dir))
		require.Empty(t, entries, "the bench sessions' %s files are removed", dir)
	}

	// --socket must name an agent directory's broker.sock.
	s, _, _ = benchStreams()
	other := filepath.Join(shortDir(t), "b.sock")
	require.NoError(t, os.WriteFile(other, nil, 0o600))
	err := runBench(s, "client", "--socket", other)
	require.Error(t, err)
	require.Equal(t, exitUsage, exitCode(err))
}
