package broker_test

import (
	"bytes"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// TestGoroutineTransport runs protocol tests again over the goroutine
// transport: the only one on macOS and Windows, where CI runs no tests.
func TestGoroutineTransport(t *testing.T) {
	goroutineIO = true
	defer func() { goroutineIO = false }()
	for name, test := range map[string]func(*testing.T){
		"SendDeliveredAfterAck":               TestSendDeliveredAfterAck,
		"DeliveryFailures":                    TestDeliveryFailures,
		"SenderDisconnectedAndReplacement":    TestSenderDisconnectedAndReplacement,
		"MalformedAndOversizedFrames":         TestMalformedAndOversizedFramesCloseSilently,
		"FragmentedAndCoalescedFrames":        TestFragmentedAndCoalescedFramesFromClient,
		"RegisterRefusals":                    TestRegisterRefusals,
		"RateLimit":                           TestRateLimit,
		"SlowReaderIsDropped":                 TestSlowReaderIsDroppedWithoutHurtingOthers,
		"IdleConnectionFlood":                 TestIdleConnectionFloodDoesNotBlockRegistration,
		"LateFramesOnReplacedSocket":          TestLateFramesOnReplacedSocketAreDiscarded,
		"LargeFramesBothWays":                 TestLargeFramesBothWays,
		"ShutdownFlushesAndClosesConnections": TestShutdownFlushesAndClosesConnections,
		"FederationSendAcrossHosts":           TestFederationSendAcrossHosts,
	} {
		t.Run(name, test)
	}
}

// TestLargeFramesBothWays sends frames near the 1 MiB limit, written in
// uneven pieces, and reads them back forwarded: reads and writes that take
// many system calls and queue behind a full socket.
func TestLargeFramesBothWays(t *testing.T) {
	h := startBroker(t, func(c *broker.Config) { c.RateCapacity, c.RateRefill = 1e6, 1e6 })
	a := h.Register("a", intercomtest.RegisterOptions{})
	b := h.Register("b", intercomtest.RegisterOptions{})
	a.Expect(wire.TypeSessionJoined)
	text := bytes.Repeat([]byte("0123456789abcdef"), (wire.MaxTextBytes-64)/16)
	var stream []byte
	for i := range 3 {
		msg := intercomtest.Message(fmt.Sprintf("big-%d", i), string(text))
		stream = append(stream, wire.AppendSendFrame(nil, "b", msg)...)
	}
	for len(stream) > 0 { // pieces that split headers and payloads
		n := min(len(stream), 70001)
		a.Write(stream[:n])
		stream = stream[n:]
	}
	for i := range 3 {
		require.Equal(t, fmt.Sprintf("big-%d", i), a.Expect(wire.TypeDeliveryAccepted).MessageID)
	}
	for range 3 {
		m := b.Expect(wire.TypeMessage)
		require.Contains(t, string(m.Message), string(text[:1000]))
		require.Len(t, m.Message, len(intercomtest.Message("big-0", string(text))))
		b.Ack(m.DeliveryID)
	}
	for i := range 3 {
		require.Equal(t, fmt.Sprintf("big-%d", i), a.Expect(wire.TypeDelivered).MessageID)
	}
}

// TestShutdownFlushesAndClosesConnections: a broker that stops ends every
// connection after what was queued for it, and Run returns with no
// connection goroutine or event loop left.
func TestShutdownFlushesAndClosesConnections(t *testing.T) {
	before := runtime.NumGoroutine()
	h := startBroker(t)
	var cs []*intercomtest.Client
	for i := range 20 {
		cs = append(cs, h.Register(fmt.Sprintf("s%02d", i), intercomtest.RegisterOptions{Scope: "Scope_SHUTDOWN_000"}))
	}
	raw, err := net.Dial("unix", h.Paths.BrokerSocket()) // never registers
	require.NoError(t, err)
	defer raw.Close()
	h.Stop()
	for _, c := range cs {
		c.DrainUntilClosed()
	}
	_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = raw.Read(make([]byte, 1))
	require.Error(t, err, "the unregistered connection is closed too")
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= before+len(cs)+2 },
		5*time.Second, 10*time.Millisecond, "goroutines left after Run returned")
	running, conns := broker.LoopState(h.B)
	require.False(t, running, "the event loop has exited")
	require.Zero(t, conns)
}
