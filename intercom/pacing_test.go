package intercom

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

func TestPacerKeepsWithinTheBrokersBucket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	small := wire.AppendFrame(nil, []byte(`{"type":"list","requestId":"r"}`))
	big := wire.AppendFrame(nil, make([]byte, 3*wire.RateBytesPerToken+1))
	require.Equal(t, 4, wire.FramesCost(big))
	require.Equal(t, 6, wire.FramesCost(append(append(append([]byte(nil), small...), small...), big...)), "frames written in one go")

	batch := append(append(append([]byte(nil), small...), small...), big...)
	n, cost := wire.FramesPrefix(batch, 5)
	require.Equal(t, []int{len(small) * 2, 2}, []int{n, cost}, "whole frames within the cost")
	n, cost = wire.FramesPrefix(batch, 6)
	require.Equal(t, []int{len(batch), 6}, []int{n, cost})
	n, cost = wire.FramesPrefix(big, 1)
	require.Equal(t, []int{len(big), 4}, []int{n, cost}, "a frame alone, whatever it costs")

	var p pacer
	now := time.Unix(1000, 0)
	for range paceCapacity - 1 { // the registration drew one
		require.Zero(t, p.delay(a, wire.FramesCost(small), now), "a burst within the bucket goes at once")
	}
	d := p.delay(a, wire.FramesCost(small), now)
	require.Equal(t, time.Second/paceRefill, d, "then one token's refill")
	now = now.Add(d)
	require.InDelta(t, time.Second/paceRefill, p.delay(a, wire.FramesCost(small), now), float64(time.Microsecond), "the debt was paid by the wait")
	now = now.Add(10 * time.Second)
	require.Zero(t, p.delay(a, wire.FramesCost(big), now), "refilled")
	require.InDelta(t, float64(paceCapacity-4), p.tokens, 1e-9, "never over the capacity")
	require.Zero(t, p.delay(b, wire.FramesCost(small), now), "a new connection has a full bucket")

	// The margin: whatever the client writes at the pace, the broker's
	// own bucket, started later and read at once, pays for it.
	require.Less(t, paceCapacity, wire.RateCapacity)
	require.Less(t, paceRefill, wire.RateRefill)
}

// A batch the broker's bucket could never pay for at once (the
// acknowledgements of a flood) is written in pieces it can.
func TestABatchIsWrittenInPiecesTheBucketCanPay(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	var batch []byte
	for range wire.RateCapacity + 60 {
		batch = wire.AppendMessageReceived(batch, "d-0123456789")
	}
	c := NewClient(ClientConfig{})
	done := make(chan error, 1)
	go func() { done <- c.writeTo(a, batch) }()
	buf := make([]byte, len(batch))
	total := 0
	for total < len(batch) {
		n, err := b.Read(buf)
		require.NoError(t, err)
		require.LessOrEqual(t, wire.FramesCost(buf[:n]), paceChunk, "one write")
		total += n
	}
	require.NoError(t, <-done)
	require.Equal(t, len(batch), total)
}
