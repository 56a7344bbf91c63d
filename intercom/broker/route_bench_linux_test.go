//go:build linux

package broker

import (
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Routing benchmarks: the broker's own work per frame — validation, dedup,
// resolution, delivery bookkeeping, encoding — with every connection
// writing to /dev/null instead of a socket, so no peer, no wake-up and no
// scheduler is measured (BenchmarkSendDelivered measures those).

type routeBench struct {
	br *Broker
	lp *eventLoop
}

func newRouteBench(b *testing.B) *routeBench {
	br, err := New(Config{Paths: intercom.NewPaths(b.TempDir()), IdleExit: -1, RateCapacity: 1e15, RateRefill: 1e15})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		br.mu.Lock()
		br.deliveries.stopTimers()
		br.asks.stopTimers()
		br.recent.release()
		br.mu.Unlock()
	})
	return &routeBench{br: br, lp: &eventLoop{b: br}}
}

// session registers a session on a connection that writes to /dev/null.
func (r *routeBench) session(b *testing.B, id, name, scope string) *conn {
	fd, err := syscall.Open("/dev/null", syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { syscall.Close(fd) })
	c := &conn{b: r.br, tokens: r.br.cfg.RateCapacity, lastRefill: time.Now(), deliveries: map[*delivery]struct{}{},
		loopConn: loopConn{loop: r.lp, fd: fd}}
	reg := wire.AppendRegisterFrame(nil, &wire.RegisterRequest{SessionID: id, Name: name, HasName: true, Scope: scope,
		Cwd: "/work/" + id, Model: "test-model", PID: 4242, StartedAt: 1760000000000, LastActivity: 1760000000000,
		RuntimeInstanceID: "rt-" + id})
	if !r.br.handleFrame(c, reg[wire.HeaderBytes:]) || c.sessionID != id {
		b.Fatalf("register %s failed", id)
	}
	return c
}

// deliver sends message seq from `from` to `to` and acknowledges it as
// recipient.
func (r *routeBench) deliver(b *testing.B, from, recipient *conn, to string, seq int, text string, buf *[]byte) {
	id := "m" + strconv.Itoa(seq)
	m := wire.Message{ID: id, Timestamp: 1760000000000, Text: text}
	*buf = wire.AppendSendFrame((*buf)[:0], to, m.AppendJSON(nil))
	r.br.handleFrame(from, (*buf)[wire.HeaderBytes:])
	d := r.br.deliveries.byKey[r.br.keys.dedupKey(from.sessionID, id)]
	if d == nil {
		b.Fatalf("send %s to %s was not accepted", id, to)
	}
	*buf = wire.AppendMessageReceived((*buf)[:0], d.id)
	r.br.handleFrame(recipient, (*buf)[wire.HeaderBytes:])
}

// BenchmarkRoute is one message accepted, forwarded, acknowledged and
// reported delivered: two frames in, three out.
func BenchmarkRoute(b *testing.B) {
	text := benchText(256)
	for _, scopeSize := range []int{2, 100, 1000} {
		for _, byName := range []bool{false, true} {
			how := "exact-id"
			if byName {
				how = "by-name"
			}
			b.Run(fmt.Sprintf("scope=%d/%s", scopeSize, how), func(b *testing.B) {
				r := newRouteBench(b)
				const scope = "Scope_ROUTE_BENCH_0"
				from := r.session(b, "sender", "sender", scope)
				to := r.session(b, "receiver", "receiver", scope)
				for i := 2; i < scopeSize; i++ {
					r.session(b, fmt.Sprintf("idle-%04d", i), fmt.Sprintf("idle %d", i), scope)
				}
				target := "receiver"
				if byName {
					target = "RECEIVER"
				}
				var buf []byte
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					r.deliver(b, from, to, target, i, text, &buf)
				}
			})
		}
	}
}

// BenchmarkRouteDedupReplay is an identical retry of a delivered message,
// answered from the dedup cache.
func BenchmarkRouteDedupReplay(b *testing.B) {
	r := newRouteBench(b)
	from := r.session(b, "sender", "sender", "")
	to := r.session(b, "receiver", "receiver", "")
	var buf []byte
	r.deliver(b, from, to, "receiver", 0, "hello", &buf)
	m := wire.Message{ID: "m0", Timestamp: 1760000000000, Text: "hello"}
	retry := wire.AppendSendFrame(nil, "receiver", m.AppendJSON(nil))[wire.HeaderBytes:]
	b.ReportAllocs()
	for b.Loop() {
		r.br.handleFrame(from, retry)
	}
}

// BenchmarkRouteHistory routes with a full dedup cache (2^17 records), the
// state of a broker that has delivered many messages: the cost must match
// BenchmarkRoute's.
func BenchmarkRouteHistory(b *testing.B) {
	r := newRouteBench(b)
	from := r.session(b, "sender", "sender", "")
	to := r.session(b, "receiver", "receiver", "")
	var buf []byte
	text := benchText(256)
	for i := range DefaultRecentMax {
		r.deliver(b, from, to, "receiver", i, text, &buf)
	}
	b.ReportAllocs()
	for i := DefaultRecentMax; b.Loop(); i++ {
		r.deliver(b, from, to, "receiver", i, text, &buf)
	}
}

// BenchmarkPresenceBroadcast is one presence change broadcast to a scope.
func BenchmarkPresenceBroadcast(b *testing.B) {
	for _, scopeSize := range []int{10, 100} {
		b.Run(fmt.Sprintf("scope=%d", scopeSize), func(b *testing.B) {
			r := newRouteBench(b)
			var cs []*conn
			for i := range scopeSize {
				cs = append(cs, r.session(b, fmt.Sprintf("s%04d", i), "", "Scope_PRESENCE_BENCH"))
			}
			frames := [][]byte{
				wire.AppendPresenceFrame(nil, &wire.Presence{Status: "thinking", HasStatus: true})[wire.HeaderBytes:],
				wire.AppendPresenceFrame(nil, &wire.Presence{Status: "idle", HasStatus: true})[wire.HeaderBytes:],
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				r.br.handleFrame(cs[i%len(cs)], frames[(i/len(cs))%2]) // each session alternates
			}
		})
	}
}

func benchText(n int) string {
	const filler = "the quick brown fox jumps over the lazy dog; "
	out := make([]byte, n)
	for i := range out {
		out[i] = filler[i%len(filler)]
	}
	return string(out)
}
