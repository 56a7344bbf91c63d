package broker_test

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

func dialRegistered(b *testing.B, sock, id string) (net.Conn, *wire.FrameReader) {
	nc, err := net.Dial("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	fr := wire.NewFrameReader(bufio.NewReaderSize(nc, 64<<10))
	if _, err := nc.Write(intercomtest.RegisterFrame(id, intercomtest.RegisterOptions{Scope: "Scope_BENCH_" + id})); err != nil {
		b.Fatal(err)
	}
	p, err := fr.Next()
	if err != nil {
		b.Fatal(err)
	}
	if f, _ := wire.DecodeBrokerFrame(p); f == nil || f.Type != wire.TypeRegistered {
		b.Fatalf("register %s: %s", id, p)
	}
	return nc, fr
}

// ackLoop acknowledges every message frame it reads until the connection closes.
func ackLoop(nc net.Conn, fr *wire.FrameReader) {
	w := bufio.NewWriterSize(nc, 64<<10)
	var out []byte
	for {
		p, err := fr.Next()
		if err != nil {
			return
		}
		env, err := wire.ParseEnvelope(p)
		if err != nil || env.Type != wire.TypeMessage {
			continue
		}
		f, err := wire.DecodeBrokerFrame(p)
		if err != nil {
			return
		}
		out = wire.AppendMessageReceived(out[:0], f.DeliveryID)
		if _, err := w.Write(out); err != nil || w.Flush() != nil {
			return
		}
	}
}

// BenchmarkSendDelivered measures send → delivered through the broker with
// two raw clients, `window` sends in flight; it reports delivered
// messages/s and the p50/p99 send → delivered latency in µs.
func BenchmarkSendDelivered(b *testing.B) {
	for _, window := range []int{1, 16, 64} {
		for _, size := range []int{256, 4096} {
			b.Run(fmt.Sprintf("window=%d/text=%dB", window, size), func(b *testing.B) {
				benchSendDelivered(b, window, size)
			})
		}
	}
}

func benchSendDelivered(b *testing.B, window, size int) {
	// Unpaced (rate limit raised), logging nothing.
	h := intercomtest.StartBroker(b, func(c *broker.Config) {
		c.RateCapacity, c.RateRefill = 1e12, 1e12
		c.CheckPeerUID = false
		c.Logger = slog.New(slog.DiscardHandler)
	})
	defer h.Stop()
	sender, sfr := dialRegistered(b, h.Paths.BrokerSocket(), "sender")
	defer sender.Close()
	receiver, rfr := dialRegistered(b, h.Paths.BrokerSocket(), "receiver")
	defer receiver.Close()
	go ackLoop(receiver, rfr)

	text := make([]byte, size)
	for i := range text {
		text[i] = 'a' + byte(i%26)
	}
	sent := make(map[string]time.Time, window)
	lat := make([]time.Duration, 0, b.N)
	var buf []byte
	next := 0
	sendOne := func() {
		id := "m" + strconv.Itoa(next)
		next++
		m := wire.Message{ID: id, Timestamp: 1760000000000, Text: string(text)}
		buf = wire.AppendSendFrame(buf[:0], "receiver", m.AppendJSON(nil))
		sent[id] = time.Now()
		if _, err := sender.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	for next < b.N && next < window {
		sendOne()
	}
	for done := 0; done < b.N; {
		p, err := sfr.Next()
		if err != nil {
			b.Fatal(err)
		}
		f, err := wire.DecodeBrokerFrame(p)
		if err != nil {
			b.Fatal(err)
		}
		switch f.Type {
		case wire.TypeDelivered:
			lat = append(lat, time.Since(sent[f.MessageID]))
			delete(sent, f.MessageID)
			done++
			if next < b.N {
				sendOne()
			}
		case wire.TypeDeliveryFailed:
			b.Fatalf("delivery failed: %+v", f)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
