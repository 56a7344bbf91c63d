package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

func TestDistribution(t *testing.T) {
	var ns []int64
	for i := 1000; i >= 1; i-- {
		ns = append(ns, int64(i)*int64(time.Microsecond))
	}
	d := distribution(ns)
	require.Equal(t, latencyDist{N: 1000, P50Ms: 0.5, P90Ms: 0.9, P99Ms: 0.99, P999Ms: 0.999, MaxMs: 1, MeanMs: 0.501}, d)
	require.Equal(t, latencyDist{}, distribution(nil))
}

// TestFramePeeking: the bench's fast reading of broker frames agrees with
// the strict decoder, and its acknowledgements are valid frames.
func TestFramePeeking(t *testing.T) {
	info := (&wire.SessionInfo{ID: "s", Cwd: "/", Model: "m", Origin: "local"}).AppendJSON(nil)
	msg := []byte(`{"id":"m0-abc-17","timestamp":1,"content":{"text":"a \"deliveryId\":\"x\" b"}}`)
	frame := wire.AppendMessage(nil, "d-123", info, msg)
	payload := frame[wire.HeaderBytes:]
	require.Equal(t, wire.TypeMessage, string(peek(payload, `"type":"`)))
	require.Equal(t, "d-123", string(peek(payload, `"deliveryId":"`)))
	require.Nil(t, peek([]byte(`{"type":"x","deliveryId":"a\"b"}`), `"deliveryId":"`), "escapes are left to the decoder")

	ack := appendAck(nil, []byte("d-123"))
	require.Equal(t, wire.AppendMessageReceived(nil, "d-123"), ack)

	seq, ok := messageSeq([]byte("m0-abc-17"))
	require.True(t, ok)
	require.Equal(t, uint64(17), seq)
	_, ok = messageSeq([]byte("m0-abc-"))
	require.False(t, ok)
}

func TestDrift(t *testing.T) {
	require.Nil(t, drift(&Measurement{}))
	seg := func(p50, p99, cpu, rss float64) segment {
		return segment{Latency: latencyDist{P50Ms: p50, P99Ms: p99}, BrokerCPUPerMessageUs: cpu, RSSMiB: rss}
	}
	d := drift(&Measurement{Segments: []segment{seg(0.10, 1, 20, 20), seg(0.10, 1, 20, 22), seg(0.10, 1, 20, 22.5), seg(0.12, 1.05, 21, 25)}})
	require.Equal(t, 0.2, d.P50)
	require.Equal(t, 0.05, d.P99)
	require.Equal(t, 0.05, *d.BrokerCPU)
	require.Equal(t, 3.0, *d.SecondHalfRSSMiB, "the most the second half had, over its first segment")
}

// TestComparisonFigures: medians over a side's runs, ratios oriented so
// that above 1 means agent-fleet is better, absent where unknown.
func TestComparisonFigures(t *testing.T) {
	run := func(side string, rate, p50, p99 float64, cpu *cpuFigures, mem *memFigures) ComparisonRun {
		return ComparisonRun{Broker: side, Result: &Measurement{PerSecond: rate, Latency: latencyDist{P50Ms: p50, P99Ms: p99}, BrokerCPU: cpu, BrokerMemory: mem}}
	}
	runs := []ComparisonRun{
		run("agent-fleet", 400, 0.3, 1, &cpuFigures{PerMessageUs: 100}, &memFigures{RSSMiB: 20}),
		run("other", 400, 1.0, 5, nil, nil),
		run("agent-fleet", 400, 0.5, 2, &cpuFigures{PerMessageUs: 140}, &memFigures{RSSMiB: 22}),
		run("other", 380, 1.2, 6, nil, nil),
		run("agent-fleet", 400, 0.4, 3, &cpuFigures{PerMessageUs: 120}, &memFigures{RSSMiB: 21}),
		run("other", 390, 1.1, 7, nil, nil),
	}
	ours, other := medians(runs, "agent-fleet"), medians(runs, "other")
	require.Equal(t, 0.4, ours.P50Ms)
	require.Equal(t, 2.0, ours.P99Ms)
	require.Equal(t, 120.0, *ours.CPUPerMessageUs)
	require.Equal(t, 21.0, *ours.RSSMiB)
	require.Nil(t, other.CPUPerMessageUs, "no pid, no CPU figure")
	r := ratios(ours, other)
	require.Equal(t, 2.75, *r.P50)
	require.Equal(t, 3.0, *r.P99)
	require.Equal(t, 1.03, *r.PerSecond)
	require.Nil(t, r.CPUPerMessage)
	require.Nil(t, r.RSS)
	require.Equal(t, 2.5, median([]float64{4, 1, 2, 3}))
}

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	l := summarize(ds)
	require.Equal(t, Latency{P50Ms: 50, P99Ms: 99, MinMs: 1, MaxMs: 100, MeanMs: 50.5, N: 100}, l)
	require.Equal(t, Latency{P50Ms: 7, P99Ms: 7, MinMs: 7, MaxMs: 7, MeanMs: 7, N: 1}, summarize([]time.Duration{7 * time.Millisecond}))
	require.Equal(t, Latency{}, summarize(nil))
}
