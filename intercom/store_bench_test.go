package intercom

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Durable file benchmarks. The write benchmarks are bound by the disk
// (fsync of the file and of its directory); the encode benchmarks are the
// CPU part alone.

func benchMsg(b *testing.B, id string, textBytes int) *wire.MessageInfo {
	m := wire.Message{ID: id, Timestamp: 1760000000000, Text: strings.Repeat("x", textBytes)}
	info, err := wire.ParseMessage(m.AppendJSON(nil))
	if err != nil {
		b.Fatal(err)
	}
	return info
}

// BenchmarkWriteFileAtomic is one atomic replacement: temp file, fsync,
// rename, fsync of the directory (spec §5.5).
func BenchmarkWriteFileAtomic(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10, 512 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			path := b.TempDir() + "/state.json"
			data := []byte(strings.Repeat("x", size))
			b.SetBytes(int64(size))
			for b.Loop() {
				if err := WriteFileAtomic(path, data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkOutboxSend is what the outbox costs one send: the entry written
// before the send, removed once delivered. cpu-µs/op is the process's CPU
// time per send, the kernel's share of the writes included.
func BenchmarkOutboxSend(b *testing.B) {
	o, err := OpenOutbox(NewPaths(b.TempDir()), "sender")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = o.Close() }) // before the temp dir goes
	msgs := make([]*wire.MessageInfo, 64)
	for i := range msgs {
		msgs[i] = benchMsg(b, fmt.Sprintf("m%d", i), 256)
	}
	cpu := processCPU()
	for i := 0; b.Loop(); i++ {
		m := msgs[i%len(msgs)]
		if _, err := o.Enqueue("receiver", m); err != nil {
			b.Fatal(err)
		}
		if err := o.Remove(m.ID); err != nil {
			b.Fatal(err)
		}
	}
	if used := processCPU() - cpu; used > 0 {
		b.ReportMetric(float64(used.Microseconds())/float64(b.N), "cpu-µs/op")
	}
}

// fullInbox is an inbox that remembers seen keys (the most it keeps is
// MaxSeenKeys) and holds `unread` unread messages.
func fullInbox(b *testing.B, seen, unread int) *Inbox {
	in, err := OpenInbox(NewPaths(b.TempDir()), "receiver")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = in.Close() }) // before the temp dir goes
	from := wire.SessionInfo{ID: "sender-session", Cwd: "/work", Model: "m", Origin: "local"}
	fromRaw := from.AppendJSON(nil)
	var keys []string
	for i := range seen {
		res := in.Stage(fromRaw, from, benchMsg(b, fmt.Sprintf("seen-%d", i), 256), 1760000000000)
		keys = append(keys, res.Message.Key)
	}
	if err := in.Consume(keys[:max(0, len(keys)-unread)]...); err != nil {
		b.Fatal(err)
	}
	return in
}

// BenchmarkInboxReceive is what a receiver's inbox costs per message that
// arrives alone: staged, then written before it is acknowledged; every 64
// messages the batch is taken (marked read). cpu-µs/op is the process's
// CPU time per message, the kernel's share of the writes included.
func BenchmarkInboxReceive(b *testing.B) {
	for _, seen := range []int{0, MaxSeenKeys} {
		b.Run(fmt.Sprintf("seen=%d", seen), func(b *testing.B) {
			in := fullInbox(b, seen, 0)
			from := wire.SessionInfo{ID: "sender-session", Cwd: "/work", Model: "m", Origin: "local"}
			fromRaw := from.AppendJSON(nil)
			var batch []string
			cpu := processCPU()
			for i := 0; b.Loop(); i++ {
				res := in.Stage(fromRaw, from, benchMsg(b, fmt.Sprintf("new-%d", i), 256), 1760000000000)
				if err := in.Flush(); err != nil {
					b.Fatal(err)
				}
				batch = append(batch, res.Message.Key)
				if len(batch) == 64 {
					if err := in.Consume(batch...); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			if used := processCPU() - cpu; used > 0 {
				b.ReportMetric(float64(used.Microseconds())/float64(b.N), "cpu-µs/op")
			}
		})
	}
}

// BenchmarkInboxEncode is the CPU of rendering an inbox that remembers
// MaxSeenKeys keys with their fingerprints, as every inbox write does.
func BenchmarkInboxEncode(b *testing.B) {
	in := fullInbox(b, MaxSeenKeys, 16)
	var n int
	for b.Loop() {
		in.mu.Lock()
		n = len(in.encode(nil))
		in.mu.Unlock()
	}
	b.SetBytes(int64(n))
}
