package wire

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// Framing benchmarks: what the broker and the clients pay per frame,
// without any I/O. b.SetBytes makes `go test -bench` report MB/s too.

func benchMessage(textBytes int) []byte {
	m := Message{ID: "6c1f3a52-5d43-4c7e-9a4d-6b2f0f3e2a11", Timestamp: 1760000000001,
		Text: strings.Repeat("the quick brown fox jumps over the lazy dog; ", textBytes/45+1)[:textBytes]}
	return m.AppendJSON(nil)
}

var benchSizes = []int{256, 4096, 64 << 10}

// BenchmarkFrameReader splits a stream of send frames: ns and allocations
// per frame.
func BenchmarkFrameReader(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("text=%dB", size), func(b *testing.B) {
			frame := AppendSendFrame(nil, "bbbb-2222", benchMessage(size))
			stream := bytes.Repeat(frame, 64)
			r := bytes.NewReader(stream)
			fr := NewFrameReader(r)
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if i%64 == 0 {
					r.Reset(stream)
				}
				if _, err := fr.Next(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkParseSend is the broker's validation of one send frame: JSON
// check, envelope, target, message rules and the dedup fingerprint.
func BenchmarkParseSend(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("text=%dB", size), func(b *testing.B) {
			payload := AppendSendFrame(nil, "bbbb-2222", benchMessage(size))[HeaderBytes:]
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			for b.Loop() {
				env, err := ParseEnvelope(payload)
				if err != nil {
					b.Fatal(err)
				}
				if s := env.DecodeSend(); s.Failure != "" {
					b.Fatal(s.Reason)
				}
			}
		})
	}
}

// BenchmarkParseAck is the broker's handling of message_received, the
// other frame every message costs.
func BenchmarkParseAck(b *testing.B) {
	payload := AppendMessageReceived(nil, "6c1f3a52-5d43-4c7e-9a4d-6b2f0f3e2a11")[HeaderBytes:]
	b.ReportAllocs()
	for b.Loop() {
		env, err := ParseEnvelope(payload)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := env.DecodeMessageReceived(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeDelivery is every frame the broker writes for one
// message: delivery_accepted, message (with the sender's SessionInfo) and
// delivered, into a reused buffer.
func BenchmarkEncodeDelivery(b *testing.B) {
	info := (&SessionInfo{ID: "aaaa-1111", Name: "alpha", HasName: true, Cwd: "/work/repo", Model: "claude",
		PID: 4242, StartedAt: 1760000000000, LastActivity: 1760000000000, TrustedLocal: true, Origin: "local"}).AppendJSON(nil)
	msg := benchMessage(256)
	const id = "6c1f3a52-5d43-4c7e-9a4d-6b2f0f3e2a11"
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendDeliveryAccepted(buf[:0], "m1", id)
		buf = AppendMessage(buf[:0], id, info, msg)
		buf = AppendDelivered(buf[:0], "m1", id)
	}
}

// BenchmarkDecodeMessageFrame is a client's strict decoding of a message
// frame and of the message in it (what a receiver pays per message).
func BenchmarkDecodeMessageFrame(b *testing.B) {
	info := (&SessionInfo{ID: "aaaa-1111", Cwd: "/work/repo", Model: "claude", Origin: "local"}).AppendJSON(nil)
	payload := AppendMessage(nil, "6c1f3a52-5d43-4c7e-9a4d-6b2f0f3e2a11", info, benchMessage(256))[HeaderBytes:]
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		f, err := DecodeBrokerFrame(payload)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ParseMessage(f.Message); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendString escapes message text as JSON.stringify does.
func BenchmarkAppendString(b *testing.B) {
	for _, text := range map[string]string{
		"ascii":   strings.Repeat("plain text, no escapes ", 12),
		"unicode": strings.Repeat("héllo \"quoted\" ✓ 🚀\n", 12),
	} {
		b.Run(fmt.Sprintf("%dB", len(text)), func(b *testing.B) {
			var buf []byte
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendString(buf[:0], text)
			}
		})
	}
}
