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

func TestCheckTargets(t *testing.T) {
	o := &LoadOptions{Spec: LoadSpec{Pairs: 4, Rate: 100, TextBytes: 256}}
	m := &Measurement{Latency: latencyDist{P50Ms: 0.1, P99Ms: 3}, BrokerCPU: &cpuFigures{PerMessageUs: 40},
		BrokerMemory: &memFigures{RSSMiB: 31}}
	got := map[string]bool{}
	for _, c := range checkTargets(o, m) {
		got[c.Name] = c.Met
	}
	require.Equal(t, map[string]bool{"p50 send → delivered": true, "p99 send → delivered": false,
		"broker CPU per message": true, "broker resident memory": false}, got)

	o.Spec.Rate = 0
	m.PerSecond = 60000
	seg := func(p50, p99, cpu, rss float64) segment {
		return segment{Latency: latencyDist{P50Ms: p50, P99Ms: p99}, BrokerCPUPerMessageUs: cpu, RSSMiB: rss}
	}
	m.Segments = []segment{seg(0.10, 1, 20, 20), seg(0.10, 1, 20, 22), seg(0.10, 1, 20, 22.5), seg(0.12, 1.05, 21, 25)}
	got = map[string]bool{}
	for _, c := range checkTargets(o, m) {
		got[c.Name] = c.Met
	}
	require.Equal(t, map[string]bool{"unpaced delivered messages/s": true,
		"p50 change, last segment vs first": false, "p99 change, last segment vs first": true,
		"broker CPU/message change, last segment vs first": true,
		"broker RSS growth over the second half":           false}, got)
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
